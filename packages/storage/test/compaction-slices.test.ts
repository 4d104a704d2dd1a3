import { describe, expect, it } from 'vitest';
import { COMPACTION_SLICE_BYTES, compactSegment, type CompactionHost } from '../src/message-store/compaction.js';
import { HandleTable } from '../src/message-store/handles.js';
import { FRAME_OVERHEAD_BYTES, encodeFrameInto } from '../src/message-store/record-format.js';

/**
 * A compaction shares the node's one thread with everything else: it must let other work run
 * after each slice it copies, not after each read-ahead window.
 */
describe('compactSegment: slices', () => {
  it('copies at most COMPACTION_SLICE_BYTES (plus one frame) per turn, and every live record', async () => {
    const messageBytes = 1000;
    const frameBytes = FRAME_OVERHEAD_BYTES + messageBytes;
    const records = 4000; // about 4 MiB: four read-ahead windows of 1 MiB
    const file = Buffer.alloc(records * frameBytes);
    const handles = new HandleTable();
    const live: number[] = [];
    for (let i = 0; i < records; i++) {
      const body = Buffer.alloc(messageBytes, i & 0xff);
      encodeFrameInto(file.subarray(i * frameBytes, (i + 1) * frameBytes), i + 1, body);
      const handle = handles.allocate(i + 1, 1, i * frameBytes, messageBytes);
      if (i % 4 === 0) handles.release(handle); // a quarter dead
      else live.push(handle);
    }
    let copiedSinceYield = 0;
    const slices: number[] = [];
    let placedAt = 0;
    const host: CompactionHost = {
      handles,
      readAheadBytes: 1024 * 1024,
      readSegment: (_segment, offset, length) => file.subarray(offset, Math.min(file.byteLength, offset + length)),
      placeCopy: (frame) => {
        copiedSinceYield += frame.byteLength;
        const offset = placedAt;
        placedAt += frame.byteLength;
        return { segment: 2, offset };
      },
      dropCopy: () => {},
      moveToCopy: (handle, _from, segment, offset) => handles.move(handle, segment, offset),
      sync: async () => {},
      yieldTurn: async () => {
        slices.push(copiedSinceYield);
        copiedSinceYield = 0;
      },
      stopping: () => false,
    };

    const outcome = await compactSegment(host, 1);

    expect(outcome).toEqual({ kind: 'done', copiedRecords: live.length, copiedBytes: live.length * frameBytes });
    for (const handle of live) expect(handles.segment(handle)).toBe(2);
    slices.push(copiedSinceYield);
    expect(Math.max(...slices)).toBeLessThanOrEqual(COMPACTION_SLICE_BYTES + frameBytes);
    expect(slices.length).toBeGreaterThanOrEqual(Math.floor((live.length * frameBytes) / (COMPACTION_SLICE_BYTES + frameBytes)));
  });
});
