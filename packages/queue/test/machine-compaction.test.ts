/**
 * Keyed compaction (spec 9, seed 003): the last value per key, tombstones and their
 * retention, the minimum lag, and how compaction meets the queue's other rules (TTL,
 * priorities, delays, dead-lettering, dedup, max_length, moves, returns). The property
 * test drives keyed sequences against a model of "the latest message enqueued per key".
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  apply,
  argumentMismatch,
  argumentWarnings,
  COMPACTION_TOMBSTONE_RETENTION_DEFAULT_MS,
  createQueueState,
  decodeSnapshot,
  encodeSnapshot,
  liveKeyCount,
  parseQueueArguments,
  QueueArgumentError,
  restore,
  snapshot,
  stateHash,
  type Command,
  type QueueArgumentsInput,
  type QueueState,
} from '../src/machine/index.js';
import { Harness } from './machine-harness.js';
import { checkInvariants, checkKeyIndex } from './machine-invariants.js';

const KEYED: QueueArgumentsInput = { compactionKey: 'k' };

function waitingIds(state: QueueState): number[] {
  return state.messages
    .values()
    .filter((m) => m.place === 'ready' || m.place === 'delayed')
    .map((m) => m.id);
}

describe('compaction arguments', () => {
  it('fills the defaults only on a compacting queue', () => {
    const args = parseQueueArguments({ compactionKey: 'entity-id' });
    expect(args.compactionKey).toBe('entity-id');
    expect(args.compactionTombstoneRetentionMs).toBe(COMPACTION_TOMBSTONE_RETENTION_DEFAULT_MS);
    expect(args.compactionMinLagMs).toBe(0);
    expect(args.compactionDeadLetter).toBe(false);
    const plain = parseQueueArguments({});
    expect('compactionKey' in plain || 'compactionMinLagMs' in plain).toBe(false);
    expect(parseQueueArguments({ compactionKey: '$routing_key', compactionMinLagMs: 50, compactionTombstoneRetentionMs: 0, compactionDeadLetter: true })).toMatchObject({
      compactionKey: '$routing_key',
      compactionMinLagMs: 50,
      compactionTombstoneRetentionMs: 0,
      compactionDeadLetter: true,
    });
  });

  it.each([
    [{ compactionKey: '' }, 'compactionKey'],
    [{ compactionKey: 7 }, 'compactionKey'],
    [{ compactionKey: 'k', compactionMinLagMs: -1 }, 'compactionMinLagMs'],
    [{ compactionKey: 'k', compactionMinLagMs: 1.5 }, 'compactionMinLagMs'],
    [{ compactionKey: 'k', compactionTombstoneRetentionMs: '1h' }, 'compactionTombstoneRetentionMs'],
    [{ compactionKey: 'k', compactionDeadLetter: 'yes' }, 'compactionDeadLetter'],
    [{ compactionMinLagMs: 10 }, 'compactionMinLagMs'],
    [{ compactionDeadLetter: true }, 'compactionDeadLetter'],
  ])('refuses %j naming %s', (input, argument) => {
    let error: unknown;
    try {
      parseQueueArguments(input as QueueArgumentsInput);
    } catch (caught) {
      error = caught;
    }
    expect(error).toBeInstanceOf(QueueArgumentError);
    expect((error as QueueArgumentError).message).toContain(argument);
  });

  it('a redeclare with other compaction arguments is a mismatch; an old definition without them is a queue without compaction', () => {
    const keyed = parseQueueArguments({ compactionKey: 'k' });
    expect(argumentMismatch(keyed, parseQueueArguments({ compactionKey: 'k' }))).toBeNull();
    expect(argumentMismatch(keyed, parseQueueArguments({ compactionKey: 'other' }))).toBe('compactionKey');
    expect(argumentMismatch(keyed, parseQueueArguments({ compactionKey: 'k', compactionMinLagMs: 5 }))).toBe('compactionMinLagMs');
    expect(argumentMismatch(parseQueueArguments({}), keyed)).toBe('compactionKey');
    expect(argumentMismatch(parseQueueArguments({}), parseQueueArguments({}))).toBeNull();
  });

  it('warns when replaced messages should be dead-lettered but there is no dead-letter exchange', () => {
    expect(argumentWarnings(parseQueueArguments({ compactionKey: 'k', compactionDeadLetter: true, deliveryLimit: -1 }))).toEqual([
      expect.stringContaining('compaction_dead_letter'),
    ]);
    expect(argumentWarnings(parseQueueArguments({ compactionKey: 'k', compactionDeadLetter: true, deliveryLimit: -1, deadLetterExchange: 'dlx' }))).toEqual([]);
  });

  it('refuses a key or tombstone flag of the wrong type on an enqueue, changing nothing', () => {
    const h = new Harness(KEYED);
    const before = stateHash(h.state);
    expect(h.run({ type: 'enqueue', sizeBytes: 1, exchange: '', routingKeys: [], compactionKey: 3 as unknown as string })).toMatchObject({ code: 'INVALID_ARGUMENT' });
    expect(h.run({ type: 'enqueue', sizeBytes: 1, exchange: '', routingKeys: [], tombstone: 'yes' as unknown as boolean })).toMatchObject({ code: 'INVALID_ARGUMENT' });
    expect(stateHash(h.state)).toBe(before);
  });
});

describe('compaction', () => {
  it('a newer message replaces the waiting one of its key; other keys and unkeyed messages stay', () => {
    const h = new Harness(KEYED);
    const a1 = h.publish({ compactionKey: 'a' });
    const b1 = h.publish({ compactionKey: 'b' });
    const plain = h.publish();
    const a2 = h.publish({ compactionKey: 'a' });
    expect(h.ofType('drop')).toEqual([{ type: 'drop', messageId: a1, reason: 'compacted' }]);
    expect(waitingIds(h.state)).toEqual([b1, plain, a2]);
    expect(h.state.gone.compacted).toBe(1);
    expect(h.state.compaction?.replaced).toBe(1);
    expect(liveKeyCount(h.state.compaction!)).toBe(2);
    // A consumer then reads the latest per key, in enqueue order.
    h.run({ type: 'subscribe', consumerId: 'c', prefetch: 0 });
    expect(h.deliveries().map((d) => d.messageId)).toEqual([b1, plain, a2]);
    checkInvariants(h.state);
  });

  it('a queue without compaction_key ignores keys', () => {
    const h = new Harness();
    h.publish({ compactionKey: 'a' });
    h.publish({ compactionKey: 'a', sizeBytes: 0 });
    expect(h.state.messages.size).toBe(2);
    expect(h.state.compaction).toBeNull();
  });

  it('a delivered, unacked message stays until settled; returned after a newer one it is replaced, not requeued', () => {
    const h = new Harness(KEYED);
    const a1 = h.publish({ compactionKey: 'a' });
    h.run({ type: 'get', ackMode: 'manual', consumerId: 'g' });
    const a2 = h.publish({ compactionKey: 'a' });
    expect(h.ofType('drop')).toEqual([]);
    expect(h.state.messages.get(a1)?.place).toBe('delivered');
    h.run({ type: 'return', consumerId: 'g', deliveryTag: 1 });
    expect(h.ofType('drop')).toEqual([{ type: 'drop', messageId: a1, reason: 'compacted' }]);
    expect(waitingIds(h.state)).toEqual([a2]);
    // Acked instead, it simply leaves.
    const h2 = new Harness(KEYED);
    h2.publish({ compactionKey: 'a' });
    h2.run({ type: 'get', ackMode: 'manual', consumerId: 'g' });
    const b2 = h2.publish({ compactionKey: 'a' });
    h2.run({ type: 'ack', consumerId: 'g', deliveryTag: 1 });
    expect(h2.state.gone).toMatchObject({ acked: 1, compacted: 0 });
    expect(waitingIds(h2.state)).toEqual([b2]);
    checkKeyIndex(h2.state);
  });

  it('a tombstone (empty body or flag) replaces the value, is delivered, and is dropped once its retention ends', () => {
    const h = new Harness({ compactionKey: 'k', compactionTombstoneRetentionMs: 500 });
    h.publish({ compactionKey: 'a' });
    const tombstone = h.publish({ compactionKey: 'a', sizeBytes: 0 });
    expect(waitingIds(h.state)).toEqual([tombstone]);
    expect(h.state.compaction?.tombstones).toBe(1);
    expect(liveKeyCount(h.state.compaction!)).toBe(0);
    h.advance(499);
    expect(waitingIds(h.state)).toEqual([tombstone]);
    h.advance(1);
    expect(h.ofType('drop')).toEqual([{ type: 'drop', messageId: tombstone, reason: 'compacted' }]);
    expect(h.state.messages.size).toBe(0);
    expect(h.state.compaction?.keys.size).toBe(0);
    expect(h.state.compaction?.tombstonesExpired).toBe(1);
    // The explicit flag with a body, consumed in time: the consumer learns of the delete.
    const flagged = h.publish({ compactionKey: 'b', sizeBytes: 20, tombstone: true });
    h.run({ type: 'subscribe', consumerId: 'c', prefetch: 1 });
    expect(h.deliveries().map((d) => d.messageId)).toEqual([flagged]);
  });

  it('a tombstone with retention 0 only deletes: the value is gone and nothing is delivered', () => {
    const h = new Harness({ compactionKey: 'k', compactionTombstoneRetentionMs: 0, deadLetterExchange: 'dlx' });
    h.publish({ compactionKey: 'a' });
    h.publish({ compactionKey: 'a', tombstone: true });
    expect(h.state.messages.size).toBe(0);
    expect(h.ofType('deadLetter')).toEqual([]);
    expect(h.state.gone.compacted).toBe(2);
  });

  it('compaction_min_lag_ms: a message younger than the lag is not replaced (a burst is seen whole)', () => {
    const h = new Harness({ compactionKey: 'k', compactionMinLagMs: 100 });
    const a1 = h.publish({ compactionKey: 'a' });
    h.now += 50;
    const a2 = h.publish({ compactionKey: 'a' });
    expect(waitingIds(h.state)).toEqual([a1, a2]);
    h.now += 60;
    // a1 is 110 ms old, a2 60 ms: only a1 goes.
    const a3 = h.publish({ compactionKey: 'a' });
    expect(waitingIds(h.state)).toEqual([a2, a3]);
    h.now += 200;
    const a4 = h.publish({ compactionKey: 'a' });
    expect(waitingIds(h.state)).toEqual([a4]);
  });

  it('compaction_dead_letter sends a replaced message to the DLX with reason compacted', () => {
    const h = new Harness({ compactionKey: 'k', compactionDeadLetter: true, deadLetterExchange: 'dlx', deadLetterStrategy: 'at-least-once' });
    const a1 = h.publish({ compactionKey: 'a' });
    h.publish({ compactionKey: 'a' });
    const [dead] = h.ofType('deadLetter');
    expect(dead).toMatchObject({ messageId: a1, reason: 'compacted', exchange: 'dlx', confirmRequired: true });
    expect(dead?.deaths.last.reason).toBe('compacted');
    expect(h.state.messages.get(a1)?.place).toBe('deadLettering');
    h.run({ type: 'deadLetterConfirmed', messageIds: [a1] });
    expect(h.state.gone.compacted).toBe(1);
    checkInvariants(h.state);
  });

  it('max_length counts live messages only: a replacement does not overflow the queue', () => {
    const h = new Harness({ compactionKey: 'k', maxLength: 2, overflow: 'reject-publish' });
    h.publish({ compactionKey: 'a' });
    h.publish({ compactionKey: 'b' });
    const a2 = h.publish({ compactionKey: 'a' });
    expect(h.reply.type).toBe('enqueued');
    expect(h.publish({ compactionKey: 'c' })).toBe(-1);
    expect(h.reply).toEqual({ type: 'rejected', reason: 'maxlen' });
    // The refused message replaced nothing.
    expect(waitingIds(h.state)).toContain(a2);
    expect(h.state.messages.size).toBe(2);
  });

  it('a duplicate (dedup) replaces nothing', () => {
    const h = new Harness(KEYED);
    const a1 = h.publish({ compactionKey: 'a', producerId: 'p', sequence: 1 });
    expect(h.publish({ compactionKey: 'a', producerId: 'p', sequence: 1 })).toBe(-1);
    expect(h.reply.type).toBe('duplicate');
    expect(waitingIds(h.state)).toEqual([a1]);
  });

  it('replaces across priorities and delays, and a TTL expiry of a keyed message forgets it', () => {
    const h = new Harness({ compactionKey: 'k', maxPriority: 3, messageTtlMs: 1000 });
    h.publish({ compactionKey: 'a', priority: 3 });
    const delayed = h.publish({ compactionKey: 'a', delayMs: 200 });
    expect(waitingIds(h.state)).toEqual([delayed]);
    const b = h.publish({ compactionKey: 'b', delayMs: 100 });
    const b2 = h.publish({ compactionKey: 'b', priority: 2 });
    expect(waitingIds(h.state)).toEqual([delayed, b2]);
    expect(h.state.messages.has(b)).toBe(false);
    h.advance(1000);
    expect(h.state.messages.size).toBe(0);
    expect(h.state.compaction?.keys.size).toBe(0);
    expect(h.state.gone).toMatchObject({ expired: 2, compacted: 2 });
  });

  it('a moving message stays until the move settles; a failed one a newer message followed is replaced', () => {
    const h = new Harness(KEYED);
    const a1 = h.publish({ compactionKey: 'a' });
    h.run({ type: 'moveStart', moveId: 'm', exchange: '', routingKey: 'dest' });
    expect(h.state.messages.get(a1)?.place).toBe('moving');
    const a2 = h.publish({ compactionKey: 'a' });
    expect(h.state.messages.get(a1)?.place).toBe('moving');
    h.run({ type: 'moveFailed', moveId: 'm', messageIds: [a1] });
    expect(waitingIds(h.state)).toEqual([a2]);
    expect(h.state.gone.compacted).toBe(1);
    checkInvariants(h.state);
  });

  it('purge and delete forget every key', () => {
    const h = new Harness(KEYED);
    h.publish({ compactionKey: 'a' });
    h.publish({ compactionKey: 'b', sizeBytes: 0 });
    h.run({ type: 'purge' });
    expect(h.state.compaction?.keys.size).toBe(0);
    expect(h.state.compaction?.tombstones).toBe(0);
  });

  it('memory and snapshots follow the keys, not the history: stale index entries of replaced messages are pruned', () => {
    const h = new Harness({ compactionKey: 'k', messageTtlMs: 60_000 });
    for (let version = 0; version < 20_000; version += 1) h.publish({ compactionKey: `k${version % 100}`, ...(version % 7 === 0 ? { delayMs: 10 } : {}) });
    expect(h.state.messages.size).toBe(100);
    const fresh = h.state.ready.reduce((sum, level) => sum + level.fresh.length, 0);
    expect(fresh).toBeLessThanOrEqual(2 * 100 + 1024 + 1);
    expect(h.state.expiryHeap.size).toBeLessThanOrEqual(2 * 100 + 1024 + 1);
    expect(h.state.delayedHeap.size).toBeLessThanOrEqual(2 * 100 + 1024 + 1);
    // A snapshot of 100 keys after 20,000 updates: tens of kilobytes at most (the pruning's
    // slack), not ids and deadlines per update (~480 KB).
    expect(encodeSnapshot(h.state).length).toBeLessThan(48 * 1024);
    // Consumed, the latest of each key comes out, in enqueue order.
    h.advance(10);
    h.run({ type: 'subscribe', consumerId: 'c', prefetch: 0 });
    const delivered = h.deliveries().map((d) => d.messageId);
    expect(delivered.length).toBe(100);
    expect([...delivered].sort((a, b) => a - b)).toEqual(h.state.messages.keys());
    checkInvariants(h.state);
  });

  it('snapshots carry the key index (plain and binary) and a queue without compaction writes none', () => {
    const h = new Harness({ compactionKey: 'k', compactionMinLagMs: 10 });
    h.publish({ compactionKey: 'a' });
    h.now += 20;
    h.publish({ compactionKey: 'a' });
    h.publish({ compactionKey: 'b', tombstone: true });
    h.publish({ compactionKey: 'b' });
    const plain = snapshot(h.state);
    expect(plain.compaction?.keys.map(([key]) => key)).toEqual(['a', 'b']);
    for (const copy of [restore(plain), decodeSnapshot(encodeSnapshot(h.state))]) {
      expect(stateHash(copy)).toBe(stateHash(h.state));
      checkKeyIndex(copy);
      expect(copy.compaction?.replaced).toBe(h.state.compaction?.replaced);
    }
    const other = new Harness();
    other.publish({ compactionKey: 'a' });
    const otherPlain = snapshot(other.state);
    expect('compaction' in otherPlain).toBe(false);
    expect('compacted' in otherPlain.gone).toBe(false);
    // An index naming a message that is not there is a corrupt snapshot, not a different state.
    const broken = { ...plain, compaction: { ...plain.compaction!, keys: [['a', 999, [[999, 0, 0]]] as [string, number, Array<[number, number, number]>]] } };
    expect(() => restore(broken)).toThrow(/key a/);
  });
});

// --- Property: a model of the latest message per key ---

type Op =
  | { readonly kind: 'enqueue'; readonly key: number; readonly size: number; readonly delay: number; readonly priority: number }
  | { readonly kind: 'tombstone'; readonly key: number; readonly flag: boolean }
  | { readonly kind: 'subscribe'; readonly prefetch: number }
  | { readonly kind: 'cancel' }
  | { readonly kind: 'ack' }
  | { readonly kind: 'return' }
  | { readonly kind: 'get' }
  | { readonly kind: 'advance'; readonly ms: number }
  | { readonly kind: 'snapshot' };

const KEYS = 4;
const RETENTION_MS = 300;

const opArb: fc.Arbitrary<Op> = fc.oneof(
  { weight: 8, arbitrary: fc.record({ kind: fc.constant('enqueue' as const), key: fc.nat(KEYS), size: fc.integer({ min: 1, max: 20 }), delay: fc.constantFrom(0, 0, 0, 150), priority: fc.nat(2) }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('tombstone' as const), key: fc.nat(KEYS - 1), flag: fc.boolean() }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('subscribe' as const), prefetch: fc.integer({ min: 1, max: 3 }) }) },
  { weight: 1, arbitrary: fc.constant({ kind: 'cancel' as const }) },
  { weight: 3, arbitrary: fc.constant({ kind: 'ack' as const }) },
  { weight: 2, arbitrary: fc.constant({ kind: 'return' as const }) },
  { weight: 2, arbitrary: fc.constant({ kind: 'get' as const }) },
  { weight: 3, arbitrary: fc.record({ kind: fc.constant('advance' as const), ms: fc.nat(250) }) },
  { weight: 1, arbitrary: fc.constant({ kind: 'snapshot' as const }) },
);

/** Key KEYS means "no key": an unkeyed message on the same queue. */
function keyName(key: number): string | undefined {
  return key === KEYS ? undefined : `key-${key}`;
}

function commandOf(op: Op, state: QueueState): Command | null {
  const consumer = state.consumers.get('c');
  const firstTag = [...(consumer?.unacked.keys() ?? [])][0];
  switch (op.kind) {
    case 'enqueue': {
      const key = keyName(op.key);
      return { type: 'enqueue', sizeBytes: op.size, exchange: '', routingKeys: ['q'], priority: op.priority, ...(op.delay > 0 ? { delayMs: op.delay } : {}), ...(key === undefined ? {} : { compactionKey: key }) };
    }
    case 'tombstone':
      return { type: 'enqueue', sizeBytes: op.flag ? 5 : 0, exchange: '', routingKeys: ['q'], compactionKey: `key-${op.key}`, ...(op.flag ? { tombstone: true } : {}) };
    case 'subscribe':
      return consumer === undefined ? { type: 'subscribe', consumerId: 'c', prefetch: op.prefetch } : null;
    case 'cancel':
      return consumer === undefined ? null : { type: 'cancel', consumerId: 'c' };
    case 'ack':
      return firstTag === undefined ? null : { type: 'ack', consumerId: 'c', deliveryTag: firstTag };
    case 'return':
      return firstTag === undefined ? null : { type: 'return', consumerId: 'c', deliveryTag: firstTag };
    case 'get':
      return { type: 'get', ackMode: 'auto' };
    case 'advance':
    case 'snapshot':
      return { type: 'tick' };
  }
}

describe('property: keyed sequences', () => {
  it('at most one waiting message per key, the latest enqueued; tombstones remove the value and expire on time; snapshots round-trip', () => {
    const seen = { replaced: 0, tombstonesExpired: 0, deliveredTombstones: 0 };
    fc.assert(
      fc.property(fc.array(opArb, { minLength: 10, maxLength: 120 }), (ops) => {
        let state = createQueueState('q', parseQueueArguments({ compactionKey: 'k', compactionTombstoneRetentionMs: RETENTION_MS, deliveryLimit: -1 }), 1000);
        let now = 1000;
        let index = 0;
        // The model: per key, the id and time of the latest message enqueued, and whether it is a tombstone.
        const latest = new Map<string, { id: number; at: number; tombstone: boolean }>();
        for (const op of ops) {
          if (op.kind === 'advance') now += op.ms;
          if (op.kind === 'snapshot') {
            const decoded = decodeSnapshot(encodeSnapshot(state));
            expect(stateHash(decoded)).toBe(stateHash(state));
            state = decoded;
          }
          const command = commandOf(op, state);
          if (command === null) continue;
          index += 1;
          const result = apply({ index, term: 1, now }, command, state);
          state = result.state;
          expect(result.reply.type).not.toBe('error');
          if (command.type === 'enqueue' && result.reply.type === 'enqueued' && command.compactionKey !== undefined) {
            latest.set(command.compactionKey, { id: result.reply.messageId, at: now, tombstone: command.tombstone === true || command.sizeBytes === 0 });
          }
          for (const effect of result.effects) {
            if (effect.type === 'deliver' && state.compaction?.keyOf.has(effect.messageId) === true && effect.sizeBytes === 0) seen.deliveredTombstones += 1;
          }
          checkInvariants(state);
          // The claim, against the model: every waiting keyed message is its key's latest.
          for (const message of state.messages.values()) {
            const key = state.compaction?.keyOf.get(message.id);
            if (key === undefined || (message.place !== 'ready' && message.place !== 'delayed')) continue;
            const model = latest.get(key);
            expect(message.id, `waiting message of ${key}`).toBe(model?.id);
            // A tombstone waits at most its retention (a tick at the deadline drops it).
            if (model?.tombstone === true && command.type === 'tick') expect(now).toBeLessThan(model.at + RETENTION_MS);
          }
          // A key whose latest is a tombstone has no value left waiting or live in the index but the tombstone (and deliveries).
          for (const [key, model] of latest) {
            if (!model.tombstone) continue;
            const record = state.compaction?.keys.get(key);
            for (const keyed of record?.live ?? []) {
              const place = state.messages.get(keyed.id)?.place;
              if (keyed.id !== model.id) expect(place === 'ready' || place === 'delayed', `old value ${keyed.id} of deleted ${key}`).toBe(false);
            }
          }
        }
        seen.replaced += state.compaction?.replaced ?? 0;
        seen.tombstonesExpired += state.compaction?.tombstonesExpired ?? 0;
        const restored = restore(snapshot(state));
        expect(stateHash(restored)).toBe(stateHash(state));
      }),
      { numRuns: 300 },
    );
    expect(seen.replaced).toBeGreaterThan(0);
    expect(seen.tombstonesExpired).toBeGreaterThan(0);
    expect(seen.deliveredTombstones).toBeGreaterThan(0);
  }, 60_000);
});
