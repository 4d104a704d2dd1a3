/**
 * RecoveryLookup: the records found at open, by id, whatever order compaction left the
 * files in; an id found in two files resolves to the newer file's copy.
 */
import { describe, expect, it } from 'vitest';

import { RecoveryLookup } from '../src/message-store/recovery-lookup.js';
import { SegmentRecords } from '../src/message-store/segment-records.js';

/** A segment whose records have these ids (offset = 100 * position, length = id % 1000). */
function segment(number: number, ids: number[]): { segment: number; records: SegmentRecords } {
  const records = new SegmentRecords(ids.length);
  ids.forEach((id, i) => records.push(id, 100 * i, id % 1000));
  return { segment: number, records };
}

/** Deterministic pseudo-random numbers (xorshift). */
function numbers(seed: number): () => number {
  let x = seed;
  return () => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return (x >>> 0) / 2 ** 32;
  };
}

describe('RecoveryLookup', () => {
  it('finds every record of files in id order', () => {
    const lookup = RecoveryLookup.build([segment(1, [1, 2, 3]), segment(2, [4, 5])]);
    expect(lookup.size).toBe(5);
    expect(lookup.maxRecordId).toBe(5);
    for (const id of [1, 2, 3, 4, 5]) {
      const at = lookup.find(id);
      expect(at).toBeGreaterThanOrEqual(0);
      expect(lookup.messageBytes(at)).toBe(id % 1000);
    }
    expect(lookup.find(6)).toBe(-1);
  });

  it('orders the runs compaction leaves and keeps the newest copy of an id, as a full sort would', () => {
    const random = numbers(7);
    for (let round = 0; round < 50; round++) {
      // Each segment: new ids ascending, with copies of older ids spliced in as runs.
      const segments: Array<{ segment: number; records: SegmentRecords }> = [];
      const expected = new Map<number, { segment: number; offset: number }>();
      let next = 1;
      for (let s = 1; s <= 1 + Math.floor(random() * 6); s++) {
        const ids: number[] = [];
        for (let run = 0; run < 1 + Math.floor(random() * 4); run++) {
          if (random() < 0.5 && next > 10) {
            // A compaction's copies: ascending older ids (some already in other files).
            const from = 1 + Math.floor(random() * (next - 5));
            // (never of an id in the segment it copies into: compaction copies from a sealed one)
            for (let id = from; id < Math.min(next, from + 1 + Math.floor(random() * 20)); id += 1 + Math.floor(random() * 2)) {
              if (!ids.includes(id)) ids.push(id);
            }
          } else {
            for (let k = 0; k < 1 + Math.floor(random() * 30); k++) ids.push(next++);
          }
        }
        segments.push(segment(s, ids));
        ids.forEach((id, i) => expected.set(id, { segment: s, offset: 100 * i })); // later files win
      }
      const lookup = RecoveryLookup.build(segments);
      expect(lookup.size).toBe(expected.size);
      for (const [id, where] of expected) {
        const at = lookup.find(id);
        expect(at, `id ${id} in round ${round}`).toBeGreaterThanOrEqual(0);
        expect({ segment: lookup.segment(at), offset: lookup.offset(at) }).toEqual(where);
      }
    }
  });
});
