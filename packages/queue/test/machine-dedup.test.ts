import { describe, expect, it } from 'vitest';
import { decodeSnapshot, encodeSnapshot, restore, snapshot } from '../src/index.js';
import { DEDUP_REORDER_WINDOW, rememberSequence, sequenceStatus } from '../src/machine/dedup.js';
import { Harness } from './machine-harness.js';

function enqueue(h: Harness, sequence: number, producerId = 'p'): string {
  return h.run({ type: 'enqueue', sizeBytes: 1, exchange: '', routingKeys: ['q'], producerId, sequence }).type;
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
  });

  it('a new producer\'s first messages may arrive out of order (its sequences start anywhere)', () => {
    const h = new Harness();
    const first = 1_796_000_000_000_000; // the SDK starts at Date.now() * 1000
    expect(enqueue(h, first + 5)).toBe('enqueued');
    expect(enqueue(h, first)).toBe('enqueued');
    expect(enqueue(h, first + 1)).toBe('enqueued');
    expect(enqueue(h, first)).toBe('duplicate');
    expect(enqueue(h, first + 5)).toBe('duplicate');
    expect(h.state.totals.ready.count).toBe(3);
  });

  it('after a jump larger than the window (sparse sequences), the skipped ones are unseen and earlier ones are refused, not answered DUPLICATE', () => {
    const h = new Harness();
    enqueue(h, 1000);
    const far = 1000 + 10 * DEDUP_REORDER_WINDOW;
    expect(enqueue(h, far)).toBe('enqueued');
    expect(enqueue(h, far - 1)).toBe('enqueued');
    expect(enqueue(h, far - DEDUP_REORDER_WINDOW + 1)).toBe('enqueued');
    expect(h.state.totals.ready.count).toBe(4);
    // Below the window the queue cannot tell (1000 was stored, far - 1024 was not): both refused.
    for (const old of [1000, far - DEDUP_REORDER_WINDOW]) {
      const reply = h.run({ type: 'enqueue', sizeBytes: 1, exchange: '', routingKeys: ['q'], producerId: 'p', sequence: old });
      expect(reply).toMatchObject({ type: 'error', code: 'SEQUENCE_TOO_OLD' });
      expect(reply.type === 'error' ? reply.message : '').toContain(`below the highest one stored (${far})`);
    }
    expect(h.state.totals.ready.count).toBe(4);
  });

  it('a message held up while the producer\'s later ones went on is never answered DUPLICATE: it is stored, or refused when too old to tell', () => {
    // What a 10M-message run lost 52 messages to: a batch stuck on a node that lost its
    // leadership reached the new leader after the producer's later messages, more than the
    // window behind, and was answered DUPLICATE though it had never been stored.
    const h = new Harness();
    for (let s = 1; s <= 100; s++) if (s < 10 || s > 61) expect(enqueue(h, s)).toBe('enqueued');
    for (let s = 10; s <= 61; s++) expect(enqueue(h, s)).toBe('enqueued');
    for (let s = 2_000; s <= 2_000 + 2 * DEDUP_REORDER_WINDOW; s++) expect(enqueue(h, s)).toBe('enqueued');
    for (let s = 1_500; s < 1_552; s++) expect(enqueue(h, s)).toBe('error');
    expect(h.state.totals.ready.count).toBe(100 + 2 * DEDUP_REORDER_WINDOW + 1);
  });

  it('the bitmap shifts exactly: every stored sequence in the window stays a duplicate, every other one does not', () => {
    let record = rememberSequence(undefined, 100, 0);
    const stored = new Set([100]);
    // Shifts of every size, crossing word boundaries.
    for (const s of [101, 103, 135, 134, 200, 199, 131, 500, 470, 1100, 1099, 1063]) {
      expect(sequenceStatus(record, s)).toBe('new');
      record = rememberSequence(record, s, 0);
      stored.add(s);
    }
    for (let s = record.sequence - DEDUP_REORDER_WINDOW + 1; s <= record.sequence + 2; s++) {
      expect(sequenceStatus(record, s)).toBe(stored.has(s) ? 'stored' : 'new');
    }
    expect(sequenceStatus(record, record.sequence - DEDUP_REORDER_WINDOW)).toBe('unknown');
  });

  it('the record survives both snapshot forms', () => {
    const h = new Harness();
    enqueue(h, 1);
    enqueue(h, 5);
    const copies = [restore(snapshot(h.state)), decodeSnapshot(encodeSnapshot(h.state))];
    for (const copy of copies) {
      expect(copy.producers.get('p')).toEqual(h.state.producers.get('p'));
      expect(sequenceStatus(copy.producers.get('p'), 3)).toBe('new');
      expect(sequenceStatus(copy.producers.get('p'), 5)).toBe('stored');
    }
  });
});
