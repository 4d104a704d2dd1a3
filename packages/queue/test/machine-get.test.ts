/**
 * Spec 3, `get` with manual ack under an id that is not subscribed (the server's Get RPC
 * passes a fresh id per call, e.g. "n1/get/<uuid>"): a get holder that only holds what it
 * got, is settled by that id and tag, and goes once it holds nothing.
 */
import { describe, expect, it } from 'vitest';
import {
  decodeSnapshot,
  encodeSnapshot,
  QueueInvariantError,
  restore,
  snapshot,
  stateHash,
  type Reply,
} from '../src/machine/index.js';
import { Harness } from './machine-harness.js';
import { checkInvariants } from './machine-invariants.js';

const G = 'n1/get/7f3a';

function tagOf(reply: Reply): number {
  expect(reply.type).toBe('message');
  return reply.type === 'message' ? reply.message.deliveryTag : -1;
}

describe('spec 3: get with manual ack and a fresh id (get holder)', () => {
  it('creates a holder for the delivery, numbers further gets under the same id, and removes it after the last settle', () => {
    const h = new Harness();
    const a = h.publish();
    const b = h.publish();
    const first = h.run({ type: 'get', ackMode: 'manual', consumerId: G });
    expect(first).toMatchObject({ type: 'message', message: { messageId: a, deliveryTag: 1, deliveryCount: 0, redelivered: false } });
    expect(h.state.getHolders.get(G)?.unacked).toEqual(new Map([[1, a]]));
    expect(h.state.consumers.size).toBe(0);
    expect(h.state.hadConsumer).toBe(false);
    expect(h.state.totals.delivered.count).toBe(1);
    expect(h.state.messages.get(a)?.consumerId).toBe(G);
    expect(tagOf(h.run({ type: 'get', ackMode: 'manual', consumerId: G }))).toBe(2);
    expect(h.state.getHolders.get(G)?.unacked).toEqual(new Map([[1, a], [2, b]]));
    checkInvariants(h.state);

    expect(h.run({ type: 'ack', consumerId: G, deliveryTag: 9 })).toMatchObject({ type: 'error', code: 'UNKNOWN_DELIVERY_TAG' });
    expect(h.run({ type: 'ack', consumerId: G, deliveryTag: 1 })).toEqual({ type: 'ok' });
    expect(h.state.getHolders.has(G)).toBe(true);
    expect(h.run({ type: 'ack', consumerId: G, deliveryTag: 2 })).toEqual({ type: 'ok' });
    expect(h.state.getHolders.size).toBe(0);
    expect(h.state.gone.acked).toBe(2);
    // Gone: a late or repeated settle under that id is an unknown consumer.
    expect(h.run({ type: 'ack', consumerId: G, deliveryTag: 2 })).toMatchObject({ type: 'error', code: 'UNKNOWN_CONSUMER' });
    checkInvariants(h.state);
  });

  it('ack multiple settles every tag up to the given one and removes the holder with the last', () => {
    const h = new Harness();
    for (let i = 0; i < 3; i += 1) h.publish();
    for (let i = 0; i < 3; i += 1) h.run({ type: 'get', ackMode: 'manual', consumerId: G });
    h.run({ type: 'ack', consumerId: G, deliveryTag: 2, multiple: true });
    expect([...(h.state.getHolders.get(G)?.unacked.keys() ?? [])]).toEqual([3]);
    h.run({ type: 'ack', consumerId: G, deliveryTag: 3, multiple: true });
    expect(h.state.getHolders.size).toBe(0);
    expect(h.state.gone.acked).toBe(3);
  });

  it('return puts the message back (counted, redelivered), discard dead-letters it; either way the holder goes', () => {
    const h = new Harness({ deadLetterExchange: 'dlx', deadLetterStrategy: 'at-most-once' });
    const a = h.publish();
    h.run({ type: 'get', ackMode: 'manual', consumerId: G });
    h.run({ type: 'return', consumerId: G, deliveryTag: 1 });
    expect(h.state.getHolders.size).toBe(0);
    expect(h.state.messages.get(a)).toMatchObject({ place: 'ready', deliveryCount: 1 });
    const again = h.run({ type: 'get', ackMode: 'manual', consumerId: 'n1/get/second' });
    expect(again).toMatchObject({ type: 'message', message: { messageId: a, deliveryTag: 1, deliveryCount: 1, redelivered: true } });
    h.run({ type: 'discard', consumerId: 'n1/get/second', deliveryTag: 1 });
    expect(h.ofType('deadLetter')).toMatchObject([{ messageId: a, reason: 'rejected' }]);
    expect(h.state.getHolders.size).toBe(0);
    expect(h.state.messages.size).toBe(0);
  });

  it('return with a delay leaves the message delayed and the holder gone', () => {
    const h = new Harness();
    const a = h.publish();
    h.run({ type: 'get', ackMode: 'manual', consumerId: G });
    h.run({ type: 'return', consumerId: G, deliveryTag: 1, delayMs: 100 });
    expect(h.state.messages.get(a)?.place).toBe('delayed');
    expect(h.state.getHolders.size).toBe(0);
  });

  it('an empty queue makes no holder; a missing or empty id is INVALID_ARGUMENT', () => {
    const h = new Harness();
    expect(h.run({ type: 'get', ackMode: 'manual', consumerId: G })).toEqual({ type: 'empty' });
    expect(h.state.getHolders.size).toBe(0);
    expect(h.run({ type: 'get', ackMode: 'manual', consumerId: '' })).toMatchObject({ type: 'error', code: 'INVALID_ARGUMENT' });
  });

  it('a subscribed consumer id keeps working as before: no holder, the delivery joins its unacked', () => {
    const h = new Harness();
    h.publish();
    h.publish();
    h.run({ type: 'subscribe', consumerId: 'c', prefetch: 1 });
    expect(tagOf(h.run({ type: 'get', ackMode: 'manual', consumerId: 'c' }))).toBe(2);
    expect(h.state.getHolders.size).toBe(0);
    expect(h.state.consumers.get('c')?.unacked.size).toBe(2);
  });

  it('a holder is not a consumer: no credit, no subscribe under its id until it is gone', () => {
    const h = new Harness();
    h.publish();
    h.run({ type: 'get', ackMode: 'manual', consumerId: G });
    const hash = stateHash(h.state);
    expect(h.run({ type: 'credit', consumerId: G, prefetch: 5 })).toMatchObject({ type: 'error', code: 'UNKNOWN_CONSUMER' });
    expect(h.run({ type: 'subscribe', consumerId: G, prefetch: 5 })).toMatchObject({ type: 'error', code: 'CONSUMER_EXISTS' });
    expect(stateHash(h.state)).toBe(hash);
    h.run({ type: 'ack', consumerId: G, deliveryTag: 1 });
    expect(h.run({ type: 'subscribe', consumerId: G, prefetch: 5 })).toEqual({ type: 'ok' });
  });
});

describe('spec 3: a get holder is never pushed to', () => {
  it('alone: later messages stay ready, whatever its "credit"', () => {
    const h = new Harness();
    h.publish();
    h.run({ type: 'get', ackMode: 'manual', consumerId: G });
    for (let i = 0; i < 5; i += 1) {
      h.publish();
      expect(h.deliveries()).toEqual([]);
    }
    h.advance(10);
    expect(h.deliveries()).toEqual([]);
    expect(h.state.totals.ready.count).toBe(5);
    expect(h.state.getHolders.get(G)?.unacked.size).toBe(1);
  });

  it('next to a subscribed consumer: only the consumer is pushed to', () => {
    const h = new Harness();
    for (let i = 0; i < 3; i += 1) h.publish();
    h.run({ type: 'subscribe', consumerId: 'c', prefetch: 1 });
    expect(h.deliveries('c')).toHaveLength(1);
    h.run({ type: 'get', ackMode: 'manual', consumerId: G });
    const pushedTo: string[] = [];
    for (let tag = 1; tag <= 2; tag += 1) {
      h.run({ type: 'ack', consumerId: 'c', deliveryTag: tag });
      pushedTo.push(...h.deliveries().map((d) => d.consumerId));
      h.publish();
      pushedTo.push(...h.deliveries().map((d) => d.consumerId));
    }
    expect(pushedTo).toEqual(['c', 'c']);
    expect(h.state.getHolders.get(G)?.unacked.size).toBe(1);
    checkInvariants(h.state);
  });

  it('single active consumer: a holder never becomes the active one', () => {
    const h = new Harness({ singleActiveConsumer: true });
    h.publish();
    h.publish();
    h.run({ type: 'get', ackMode: 'manual', consumerId: G });
    expect(h.state.activeConsumerId).toBeNull();
    h.run({ type: 'subscribe', consumerId: 'c', prefetch: 1 });
    expect(h.state.activeConsumerId).toBe('c');
    h.run({ type: 'cancel', consumerId: 'c' });
    expect(h.state.activeConsumerId).toBeNull();
    expect(h.state.getHolders.has(G)).toBe(true);
    checkInvariants(h.state);
  });
});

describe('spec 3/7: a get holder does not count as a consumer', () => {
  it('auto_delete: a holder neither marks the queue as having had a consumer nor keeps it when the last consumer leaves', () => {
    const h = new Harness({ autoDelete: true });
    h.publish();
    h.run({ type: 'get', ackMode: 'manual', consumerId: G });
    h.run({ type: 'ack', consumerId: G, deliveryTag: 1 });
    expect(h.ofType('deleteQueue')).toEqual([]);
    h.publish();
    h.run({ type: 'get', ackMode: 'manual', consumerId: G });
    h.run({ type: 'cancel', consumerId: G });
    expect(h.ofType('deleteQueue')).toEqual([]);
    expect(h.state.hadConsumer).toBe(false);

    h.publish();
    h.run({ type: 'subscribe', consumerId: 'c', prefetch: 1 });
    h.run({ type: 'get', ackMode: 'manual', consumerId: 'n1/get/other' });
    expect(h.state.getHolders.size).toBe(1);
    h.run({ type: 'cancel', consumerId: 'c' });
    expect(h.ofType('deleteQueue')).toEqual([{ type: 'deleteQueue', reason: 'auto_delete' }]);
  });

  it('expires: a get renews the lease, but holding its message does not keep the queue (and settling does not renew)', () => {
    const h = new Harness({ expiresMs: 1000 });
    h.publish();
    h.publish();
    h.advance(500);
    h.run({ type: 'get', ackMode: 'manual', consumerId: G });
    h.run({ type: 'get', ackMode: 'manual', consumerId: 'n1/get/other' });
    h.advance(600);
    h.run({ type: 'ack', consumerId: 'n1/get/other', deliveryTag: 1 });
    h.advance(399);
    expect(h.ofType('deleteQueue')).toEqual([]);
    h.advance(1);
    expect(h.state.getHolders.has(G)).toBe(true);
    expect(h.ofType('deleteQueue')).toEqual([{ type: 'deleteQueue', reason: 'expires' }]);
  });

  it('delete if_unused succeeds while a holder holds a message; the delete drops it and the holder', () => {
    const h = new Harness();
    h.publish();
    h.run({ type: 'get', ackMode: 'manual', consumerId: G });
    expect(h.run({ type: 'delete', ifUnused: true })).toEqual({ type: 'deleted', messagesDropped: 1 });
    expect(h.state.getHolders.size).toBe(0);
    expect(h.state.gone.deleted).toBe(1);
  });

  it('purge leaves the held message with its holder', () => {
    const h = new Harness();
    h.publish();
    h.publish();
    h.run({ type: 'get', ackMode: 'manual', consumerId: G });
    expect(h.run({ type: 'purge' })).toEqual({ type: 'purged', messagesDropped: 1 });
    expect(h.state.getHolders.get(G)?.unacked.size).toBe(1);
    checkInvariants(h.state);
  });
});

describe('spec 3: ends of a get holder without a settle', () => {
  it('consumer timeout returns its message (counted), tells the holder id and removes it', () => {
    const h = new Harness({ consumerTimeoutMs: 500 });
    const a = h.publish();
    h.run({ type: 'get', ackMode: 'manual', consumerId: G });
    expect(h.ofType('scheduleTick')).toEqual([{ type: 'scheduleTick', at: h.now + 500 }]);
    h.advance(499);
    expect(h.ofType('consumerTimedOut')).toEqual([]);
    h.advance(1);
    expect(h.ofType('consumerTimedOut')).toEqual([{ type: 'consumerTimedOut', consumerId: G, deliveryTag: 1 }]);
    expect(h.state.getHolders.size).toBe(0);
    expect(h.state.messages.get(a)).toMatchObject({ place: 'ready', deliveryCount: 1 });
    expect(h.run({ type: 'ack', consumerId: G, deliveryTag: 1 })).toMatchObject({ type: 'error', code: 'UNKNOWN_CONSUMER' });
  });

  it('consumer timeout over the delivery limit dead-letters it', () => {
    const h = new Harness({ consumerTimeoutMs: 500, deliveryLimit: 0 });
    h.publish();
    h.run({ type: 'get', ackMode: 'manual', consumerId: G });
    h.advance(500);
    expect(h.ofType('drop')).toMatchObject([{ reason: 'delivery_limit' }]);
    expect(h.state.getHolders.size).toBe(0);
  });

  it('consumerDown and cancel with its id return its messages as failed deliveries', () => {
    for (const type of ['consumerDown', 'cancel'] as const) {
      const h = new Harness();
      const a = h.publish();
      const b = h.publish();
      h.run({ type: 'get', ackMode: 'manual', consumerId: G });
      h.run({ type: 'get', ackMode: 'manual', consumerId: G });
      expect(h.run({ type, consumerId: G })).toEqual({ type: 'ok' });
      expect(h.state.getHolders.size).toBe(0);
      expect(h.state.messages.get(a)).toMatchObject({ place: 'ready', deliveryCount: 1 });
      expect(h.state.messages.get(b)).toMatchObject({ place: 'ready', deliveryCount: 1 });
      // Back at their original positions: a first.
      expect(h.run({ type: 'get', ackMode: 'auto' })).toMatchObject({ message: { messageId: a, redelivered: true } });
      expect(h.run({ type, consumerId: G })).toMatchObject({ type: 'error', code: 'UNKNOWN_CONSUMER' });
      checkInvariants(h.state);
    }
  });
});

describe('spec 10: snapshots of get holders', () => {
  function holding(): Harness {
    const h = new Harness({ consumerTimeoutMs: 500 });
    for (let i = 0; i < 4; i += 1) h.publish();
    h.run({ type: 'subscribe', consumerId: 'c', prefetch: 1 });
    h.run({ type: 'get', ackMode: 'manual', consumerId: G });
    h.run({ type: 'get', ackMode: 'manual', consumerId: G });
    h.run({ type: 'get', ackMode: 'manual', consumerId: 'n1/get/other' });
    h.run({ type: 'ack', consumerId: G, deliveryTag: 1 });
    return h;
  }

  it('without holders the snapshot has no getHolders field (older snapshots restore unchanged)', () => {
    const h = new Harness();
    h.publish();
    expect('getHolders' in snapshot(h.state)).toBe(false);
    expect(restore(snapshot(h.state)).getHolders.size).toBe(0);
  });

  it('plain and binary forms round-trip holders exactly, and the restored state goes on the same', () => {
    const h = holding();
    const plain = snapshot(h.state);
    expect(plain.getHolders).toEqual([
      { id: G, nextDeliveryTag: 3, unacked: [[2, 3]] },
      { id: 'n1/get/other', nextDeliveryTag: 2, unacked: [[1, 4]] },
    ]);
    const fromPlain = restore(plain);
    const fromBinary = decodeSnapshot(encodeSnapshot(h.state));
    for (const restored of [fromPlain, fromBinary]) {
      expect(stateHash(restored)).toBe(stateHash(h.state));
      expect(restored.getHolders).toEqual(h.state.getHolders);
      expect([...restored.getHolders.keys()]).toEqual([...h.state.getHolders.keys()]);
      checkInvariants(restored);
    }
    // The same commands on the original and a restored copy: same states, same replies.
    const copy = new Harness({ consumerTimeoutMs: 500 });
    copy.state = fromBinary;
    copy.index = h.index;
    for (const run of [h, copy]) {
      run.publish();
      run.run({ type: 'get', ackMode: 'manual', consumerId: G });
      run.advance(500);
    }
    expect(copy.reply).toEqual(h.reply);
    expect(stateHash(copy.state)).toBe(stateHash(h.state));
    expect(copy.state.getHolders.size).toBe(0);
  });

  it('the state hash covers holders', () => {
    const a = holding();
    const b = holding();
    expect(stateHash(a.state)).toBe(stateHash(b.state));
    const holder = b.state.getHolders.get(G);
    if (holder !== undefined) holder.nextDeliveryTag += 1;
    expect(stateHash(a.state)).not.toBe(stateHash(b.state));
  });

  it('decoding refuses a holder that does not match the deliveries', () => {
    const h = holding();
    const holder = h.state.getHolders.get(G);
    const wrong = new Map([[7, 3]]);
    if (holder !== undefined) h.state.getHolders.set(G, { ...holder, unacked: wrong, nextDeliveryTag: 8 });
    expect(() => decodeSnapshot(encodeSnapshot(h.state))).toThrow(QueueInvariantError);
    h.state.getHolders.set(G, { id: G, unacked: new Map(), nextDeliveryTag: 3 });
    expect(() => decodeSnapshot(encodeSnapshot(h.state))).toThrow(/holds nothing/);
  });
});
