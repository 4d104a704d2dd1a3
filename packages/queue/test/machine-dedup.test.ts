import { describe, expect, it } from 'vitest';
import { decodeSnapshot, encodeSnapshot, restore, snapshot } from '../src/index.js';
import { DEDUP_REORDER_WINDOW } from '../src/machine/dedup.js';
import { Harness } from './machine-harness.js';

function enqueue(h: Harness, sequence: number): string {
  return h.run({ type: 'enqueue', sizeBytes: 1, exchange: '', routingKeys: ['q'], producerId: 'p', sequence }).type;
}

describe('spec 2: publisher dedup when a producer\'s messages arrive out of order', () => {
  it('a sequence that arrives after a higher one is stored, not answered DUPLICATE', () => {
    const h = new Harness();
    expect(enqueue(h, 1)).toBe('enqueued');
    expect(enqueue(h, 4)).toBe('enqueued');
    expect(enqueue(h, 2)).toBe('enqueued');
    expect(enqueue(h, 3)).toBe('enqueued');
    expect(h.state.totals.ready.count).toBe(4);
    // Every one of them, re-sent, is now a duplicate.
    for (const s of [1, 2, 3, 4]) expect(enqueue(h, s)).toBe('duplicate');
    expect(h.state.producers.get('p')).toEqual({ sequence: 4, lastSeenAt: h.now });
  });

  it('gaps older than the reorder window are forgotten, so the record stays bounded', () => {
    const h = new Harness();
    enqueue(h, 1);
    enqueue(h, 3); // gap 2
    enqueue(h, 3 + DEDUP_REORDER_WINDOW); // window moves past 2
    expect(h.state.producers.get('p')?.gaps?.includes(2) ?? false).toBe(false);
    expect(enqueue(h, 2)).toBe('duplicate');
  });

  it('a jump larger than the window (sparse sequences) records no gaps', () => {
    const h = new Harness();
    enqueue(h, 10);
    enqueue(h, 10 + 10 * DEDUP_REORDER_WINDOW);
    expect(h.state.producers.get('p')?.gaps).toBeUndefined();
    expect(enqueue(h, 11)).toBe('duplicate');
  });

  it('gaps survive both snapshot forms', () => {
    const h = new Harness();
    enqueue(h, 1);
    enqueue(h, 5);
    const copies = [restore(snapshot(h.state)), decodeSnapshot(encodeSnapshot(h.state))];
    for (const copy of copies) expect(copy.producers.get('p')).toEqual({ sequence: 5, lastSeenAt: h.now, gaps: [2, 3, 4] });
  });
});
