import { describe, expect, it } from 'vitest';
import { DELIVERIES_PER_APPLY_MAX, stateHash } from '../src/machine/index.js';
import { Harness } from './machine-harness.js';

describe('spec 3: consuming', () => {
  it('delivers in enqueue order within prefetch (credit)', () => {
    const h = new Harness();
    const ids = [h.publish(), h.publish(), h.publish()];
    h.run({ type: 'subscribe', consumerId: 'c', prefetch: 2 });
    expect(h.deliveries('c').map((d) => d.messageId)).toEqual(ids.slice(0, 2));
    expect(h.deliveries().map((d) => d.deliveryTag)).toEqual([1, 2]);
    h.run({ type: 'ack', consumerId: 'c', deliveryTag: 1 });
    expect(h.deliveries('c').map((d) => d.messageId)).toEqual([ids[2]]);
  });

  it('prefetch 0 means unlimited, as in AMQP', () => {
    const h = new Harness();
    for (let i = 0; i < 5; i += 1) h.publish();
    h.run({ type: 'subscribe', consumerId: 'c', prefetch: 0 });
    expect(h.deliveries()).toHaveLength(5);
  });

  it('deliveries per apply are bounded; the rest follow on the next tick, which is asked for', () => {
    const h = new Harness();
    const total = DELIVERIES_PER_APPLY_MAX + 10;
    for (let i = 0; i < total; i += 1) h.publish();
    h.run({ type: 'subscribe', consumerId: 'c', prefetch: 0 });
    expect(h.deliveries()).toHaveLength(DELIVERIES_PER_APPLY_MAX);
    expect(h.ofType('scheduleTick')).toContainEqual({ type: 'scheduleTick', at: h.now });
    h.run({ type: 'tick' });
    expect(h.deliveries()).toHaveLength(10);
  });

  it('credit changes the prefetch of a running consumer', () => {
    const h = new Harness();
    h.run({ type: 'subscribe', consumerId: 'c', prefetch: 1 });
    h.publish();
    h.publish();
    h.run({ type: 'credit', consumerId: 'c', prefetch: 2 });
    expect(h.deliveries()).toHaveLength(1);
  });

  it('ack multiple settles every unacked tag up to the given one', () => {
    const h = new Harness();
    for (let i = 0; i < 4; i += 1) h.publish();
    h.run({ type: 'subscribe', consumerId: 'c', prefetch: 10 });
    h.run({ type: 'ack', consumerId: 'c', deliveryTag: 3, multiple: true });
    expect(h.state.totals.delivered.count).toBe(1);
    expect(h.state.gone.acked).toBe(3);
  });

  it('requeue puts the message back at its original position (head side), redelivered, count + 1', () => {
    const h = new Harness();
    const [a, b, c] = [h.publish(), h.publish(), h.publish()];
    h.run({ type: 'subscribe', consumerId: 'x', prefetch: 2 });
    h.run({ type: 'credit', consumerId: 'x', prefetch: 0 });
    expect(h.deliveries().map((d) => d.messageId)).toEqual([c]);
    h.run({ type: 'cancel', consumerId: 'x' });
    h.run({ type: 'subscribe', consumerId: 'y', prefetch: 0 });
    const redelivered = h.deliveries('y');
    expect(redelivered.map((d) => d.messageId)).toEqual([a, b, c]);
    expect(redelivered.map((d) => d.deliveryCount)).toEqual([1, 1, 1]);
    expect(redelivered.every((d) => d.redelivered)).toBe(true);
  });

  it('nack with requeue returns to the head before never-delivered messages', () => {
    const h = new Harness();
    h.run({ type: 'subscribe', consumerId: 'c', prefetch: 1 });
    const a = h.publish();
    h.publish();
    h.run({ type: 'return', consumerId: 'c', deliveryTag: 1 });
    const [d] = h.deliveries('c');
    expect(d?.messageId).toBe(a);
    expect(d?.deliveryCount).toBe(1);
    expect(d?.redelivered).toBe(true);
  });

  it('a consumer that goes down has its unacked deliveries returned and counted as failed', () => {
    const h = new Harness();
    const a = h.publish();
    h.run({ type: 'subscribe', consumerId: 'c', prefetch: 1 });
    h.run({ type: 'consumerDown', consumerId: 'c' });
    expect(h.state.totals.ready.count).toBe(1);
    expect(h.state.messages.get(a)?.deliveryCount).toBe(1);
  });

  it('higher-priority consumers with credit are served first, equal ones round-robin', () => {
    const h = new Harness();
    h.run({ type: 'subscribe', consumerId: 'low', prefetch: 10, priority: 0 });
    h.run({ type: 'subscribe', consumerId: 'high', prefetch: 2, priority: 5 });
    for (let i = 0; i < 4; i += 1) h.publish();
    expect(h.state.consumers.get('high')?.unacked.size).toBe(2);
    expect(h.state.consumers.get('low')?.unacked.size).toBe(2);
    const rr = new Harness();
    rr.run({ type: 'subscribe', consumerId: 'a', prefetch: 0 });
    rr.run({ type: 'subscribe', consumerId: 'b', prefetch: 0 });
    const who: string[] = [];
    for (let i = 0; i < 4; i += 1) {
      rr.publish();
      who.push(rr.deliveries()[0]?.consumerId ?? '');
    }
    expect(who).toEqual(['a', 'b', 'a', 'b']);
  });

  it('get pulls one message: auto ack removes it, manual hands it to the consumer', () => {
    const h = new Harness();
    expect(h.run({ type: 'get', ackMode: 'auto' }).type).toBe('empty');
    const a = h.publish();
    const b = h.publish();
    const auto = h.run({ type: 'get', ackMode: 'auto' });
    expect(auto.type === 'message' && auto.message.messageId).toBe(a);
    expect(h.state.gone.acked).toBe(1);
    const c = h.publish();
    // The consumer's credit is used up by b; a manual get still hands it c.
    h.run({ type: 'subscribe', consumerId: 'puller', prefetch: 1 });
    expect(h.deliveries('puller').map((d) => d.messageId)).toEqual([b]);
    const manual = h.run({ type: 'get', ackMode: 'manual', consumerId: 'puller' });
    expect(manual).toMatchObject({ type: 'message', message: { messageId: c, deliveryTag: 2 } });
    h.run({ type: 'ack', consumerId: 'puller', deliveryTag: 2 });
    expect(h.state.gone.acked).toBe(2);
  });

  it('get manual needs a consumer id (an unknown one becomes a get holder: machine-get.test.ts)', () => {
    const h = new Harness();
    h.publish();
    const before = structuredClone(h.state.totals);
    expect(h.run({ type: 'get', ackMode: 'manual' })).toMatchObject({ type: 'error', code: 'INVALID_ARGUMENT' });
    expect(h.run({ type: 'get', ackMode: 'manual', consumerId: '' })).toMatchObject({ type: 'error', code: 'INVALID_ARGUMENT' });
    expect(h.run({ type: 'get', ackMode: 'manual', consumerId: 7 as never })).toMatchObject({ type: 'error', code: 'INVALID_ARGUMENT' });
    expect(h.state.totals).toEqual(before);
    expect(h.state.getHolders.size).toBe(0);
  });
});

describe('spec 3: single active consumer', () => {
  it('only one consumer receives; hand-over goes to the highest priority, then the oldest', () => {
    const h = new Harness({ singleActiveConsumer: true });
    h.run({ type: 'subscribe', consumerId: 'first', prefetch: 0 });
    h.run({ type: 'subscribe', consumerId: 'second', prefetch: 0 });
    h.run({ type: 'subscribe', consumerId: 'third', prefetch: 0, priority: 3 });
    h.run({ type: 'subscribe', consumerId: 'fourth', prefetch: 0, priority: 3 });
    h.publish();
    h.publish();
    expect(h.state.consumers.get('first')?.unacked.size).toBe(2);
    h.run({ type: 'cancel', consumerId: 'first' });
    expect(h.state.activeConsumerId).toBe('third');
    expect(h.deliveries('third')).toHaveLength(2);
    h.run({ type: 'cancel', consumerId: 'third' });
    expect(h.state.activeConsumerId).toBe('fourth');
  });
});

describe('spec 2: publisher dedup', () => {
  it('a re-sent sequence is answered DUPLICATE and stored once', () => {
    const h = new Harness();
    h.publish({ producerId: 'p', sequence: 1 });
    expect(h.run({ type: 'enqueue', sizeBytes: 1, exchange: '', routingKeys: ['q'], producerId: 'p', sequence: 1 })).toEqual({
      type: 'duplicate',
      producerId: 'p',
      sequence: 1,
    });
    h.publish({ producerId: 'p', sequence: 2 });
    expect(h.state.totals.ready.count).toBe(2);
  });

  it('a producer idle longer than dedup_window is forgotten', () => {
    const h = new Harness({ dedupWindowMs: 1000 });
    h.publish({ producerId: 'p', sequence: 5 });
    h.now += 1001;
    expect(h.publish({ producerId: 'p', sequence: 5 })).toBeGreaterThan(0);
    expect(h.state.producers.size).toBe(1);
  });

  it('a rejected publish does not record the sequence', () => {
    const h = new Harness({ maxLength: 1, overflow: 'reject-publish' });
    h.publish();
    expect(h.run({ type: 'enqueue', sizeBytes: 1, exchange: '', routingKeys: [], producerId: 'p', sequence: 1 }).type).toBe('rejected');
    expect(h.state.producers.has('p')).toBe(false);
  });
});

describe('spec 4: delivery limit', () => {
  it('a message returned more than delivery_limit times is dead-lettered with reason delivery_limit', () => {
    const h = new Harness({ deliveryLimit: 2, deadLetterExchange: 'dlx' });
    const id = h.publish();
    h.run({ type: 'subscribe', consumerId: 'c', prefetch: 1 });
    for (let tag = 1; tag <= 2; tag += 1) {
      h.run({ type: 'return', consumerId: 'c', deliveryTag: tag });
      expect(h.deliveries('c')[0]?.deliveryCount).toBe(tag);
    }
    h.run({ type: 'return', consumerId: 'c', deliveryTag: 3 });
    const [dead] = h.ofType('deadLetter');
    expect(dead).toMatchObject({ messageId: id, reason: 'delivery_limit', exchange: 'dlx', routingKeys: ['rk'] });
    expect(h.deliveries()).toHaveLength(0);
  });

  it('delivery_limit -1 never dead-letters', () => {
    const h = new Harness({ deliveryLimit: -1 });
    h.publish();
    h.run({ type: 'subscribe', consumerId: 'c', prefetch: 1 });
    for (let tag = 1; tag <= 100; tag += 1) h.run({ type: 'return', consumerId: 'c', deliveryTag: tag });
    expect(h.deliveries()[0]?.deliveryCount).toBe(100);
  });

  it('without a dead-letter exchange the message over the limit is dropped and counted', () => {
    const h = new Harness({ deliveryLimit: 0 });
    h.publish();
    h.run({ type: 'subscribe', consumerId: 'c', prefetch: 1 });
    h.run({ type: 'return', consumerId: 'c', deliveryTag: 1 });
    expect(h.ofType('drop')).toMatchObject([{ reason: 'delivery_limit' }]);
    expect(h.state.gone.delivery_limit).toBe(1);
    expect(h.state.messages.size).toBe(0);
  });

  it('consumer timeout returns the delivery, counts it and tells the consumer why', () => {
    const h = new Harness({ consumerTimeoutMs: 500 });
    const id = h.publish();
    h.run({ type: 'subscribe', consumerId: 'c', prefetch: 1 });
    expect(h.ofType('scheduleTick')).toEqual([{ type: 'scheduleTick', at: h.now + 500 }]);
    h.advance(499);
    expect(h.ofType('consumerTimedOut')).toHaveLength(0);
    h.advance(1);
    expect(h.ofType('consumerTimedOut')).toEqual([{ type: 'consumerTimedOut', consumerId: 'c', deliveryTag: 1 }]);
    expect(h.deliveries('c')).toMatchObject([{ messageId: id, deliveryCount: 1, redelivered: true }]);
  });
});

describe('spec 5: dead-lettering', () => {
  it('nack without requeue dead-letters with reason rejected and a death record', () => {
    const h = new Harness({ deadLetterExchange: 'dlx', deadLetterStrategy: 'at-most-once' });
    h.publish({ exchange: 'work', routingKeys: ['a', 'b'] });
    h.run({ type: 'subscribe', consumerId: 'c', prefetch: 1 });
    h.now = 5_000;
    h.run({ type: 'discard', consumerId: 'c', deliveryTag: 1 });
    const [dead] = h.ofType('deadLetter');
    expect(dead?.routingKeys).toEqual(['a', 'b']);
    expect(dead?.confirmRequired).toBe(false);
    expect(dead?.deaths).toEqual({
      records: [
        { queue: 'q', reason: 'rejected', count: 1, exchange: 'work', routingKeys: ['a', 'b'], firstTime: 5000, lastTime: 5000, originalExpirationMs: null },
      ],
      first: { reason: 'rejected', queue: 'q', exchange: 'work' },
      last: { reason: 'rejected', queue: 'q', exchange: 'work' },
    });
    expect(h.state.messages.size).toBe(0);
    expect(h.state.gone.rejected).toBe(1);
  });

  it('dead_letter_routing_key replaces the routing keys', () => {
    const h = new Harness({ deadLetterExchange: 'dlx', deadLetterRoutingKey: 'dead' });
    h.publish({ routingKeys: ['a', 'b'] });
    h.run({ type: 'subscribe', consumerId: 'c', prefetch: 1 });
    h.run({ type: 'discard', consumerId: 'c', deliveryTag: 1 });
    expect(h.ofType('deadLetter')[0]?.routingKeys).toEqual(['dead']);
  });

  it('death records fold per (queue, reason), newest first; first_death never changes', () => {
    const h = new Harness({ deadLetterExchange: 'dlx', deadLetterStrategy: 'at-most-once' }, 'retry');
    const earlier = {
      records: [
        { queue: 'work', reason: 'rejected' as const, count: 1, exchange: 'ex', routingKeys: ['rk'], firstTime: 10, lastTime: 10, originalExpirationMs: null },
        { queue: 'retry', reason: 'expired' as const, count: 1, exchange: 'ex', routingKeys: ['rk'], firstTime: 20, lastTime: 20, originalExpirationMs: null },
      ],
      first: { reason: 'rejected' as const, queue: 'work', exchange: 'ex' },
      last: { reason: 'expired' as const, queue: 'retry', exchange: 'ex' },
    };
    h.publish({ deaths: earlier, expirationMs: 100 });
    h.advance(100);
    const deaths = h.ofType('deadLetter')[0]?.deaths;
    expect(deaths?.records.map((r) => [r.queue, r.reason, r.count])).toEqual([
      ['retry', 'expired', 2],
      ['work', 'rejected', 1],
    ]);
    expect(deaths?.records[0]?.firstTime).toBe(20);
    expect(deaths?.records[0]?.lastTime).toBe(1100);
    expect(deaths?.records[0]?.originalExpirationMs).toBe(100);
    expect(deaths?.first).toEqual({ reason: 'rejected', queue: 'work', exchange: 'ex' });
    expect(deaths?.last).toEqual({ reason: 'expired', queue: 'retry', exchange: 'ex' });
  });

  it('at-least-once holds the message until the targets confirmed it (handshake)', () => {
    const h = new Harness({ deadLetterExchange: 'dlx' });
    const id = h.publish();
    h.run({ type: 'subscribe', consumerId: 'c', prefetch: 1 });
    h.run({ type: 'discard', consumerId: 'c', deliveryTag: 1 });
    expect(h.ofType('deadLetter')[0]?.confirmRequired).toBe(true);
    expect(h.state.messages.get(id)?.place).toBe('deadLettering');
    expect(h.state.gone.rejected).toBe(0);
    h.run({ type: 'deadLetterConfirmed', messageIds: [id] });
    h.run({ type: 'deadLetterConfirmed', messageIds: [id] });
    expect(h.state.messages.size).toBe(0);
    expect(h.state.gone.rejected).toBe(1);
  });
});

describe('spec 6: TTL, delays, priorities, length limits', () => {
  it('every message expires on time wherever it is, not only at the head', () => {
    const h = new Harness({ deadLetterExchange: 'dlx', deadLetterStrategy: 'at-most-once' });
    const long = h.publish({ expirationMs: 10_000 });
    const short = h.publish({ expirationMs: 100 });
    expect(h.ofType('scheduleTick')).toEqual([{ type: 'scheduleTick', at: h.now + 100 }]);
    h.advance(100);
    expect(h.ofType('deadLetter').map((d) => [d.messageId, d.reason])).toEqual([[short, 'expired']]);
    expect(h.state.messages.has(long)).toBe(true);
  });

  it('effective TTL is the minimum of the queue message_ttl and the message expiration', () => {
    const h = new Harness({ messageTtlMs: 50 });
    const a = h.publish({ expirationMs: 500 });
    const b = h.publish({ expirationMs: 20 });
    expect(h.state.messages.get(a)?.expiresAt).toBe(h.now + 50);
    expect(h.state.messages.get(b)?.expiresAt).toBe(h.now + 20);
  });

  it('an expired message is never delivered, even before the tick ran', () => {
    const h = new Harness();
    h.publish({ expirationMs: 100 });
    const fresh = h.publish();
    h.now += 100;
    h.run({ type: 'subscribe', consumerId: 'c', prefetch: 0 });
    expect(h.deliveries().map((d) => d.messageId)).toEqual([fresh]);
    expect(h.state.gone.expired).toBe(1);
  });

  it('a delayed message (delay_ms or not_before) stays invisible until its time', () => {
    const h = new Harness();
    h.run({ type: 'subscribe', consumerId: 'c', prefetch: 0 });
    const delayed = h.publish({ delayMs: 1000 });
    const notBefore = h.publish({ notBefore: h.now + 500 });
    expect(h.deliveries()).toHaveLength(0);
    h.advance(499);
    expect(h.deliveries()).toHaveLength(0);
    h.advance(1);
    expect(h.deliveries().map((d) => d.messageId)).toEqual([notBefore]);
    h.advance(500);
    expect(h.deliveries().map((d) => d.messageId)).toEqual([delayed]);
  });

  it('nack with requeue and delay_ms returns the message after a back-off', () => {
    const h = new Harness();
    const id = h.publish();
    h.run({ type: 'subscribe', consumerId: 'c', prefetch: 1 });
    h.run({ type: 'return', consumerId: 'c', deliveryTag: 1, delayMs: 300 });
    expect(h.state.messages.get(id)?.place).toBe('delayed');
    h.advance(300);
    expect(h.deliveries()).toMatchObject([{ messageId: id, deliveryCount: 1 }]);
  });

  it('max_priority: higher first, FIFO within a priority, priorities above the max are clamped', () => {
    const h = new Harness({ maxPriority: 3 });
    const low = h.publish({ priority: 0 });
    const mid = h.publish({ priority: 2 });
    const top1 = h.publish({ priority: 9 });
    const top2 = h.publish({ priority: 3 });
    h.run({ type: 'subscribe', consumerId: 'c', prefetch: 0 });
    expect(h.deliveries().map((d) => d.messageId)).toEqual([top1, top2, mid, low]);
  });

  it('priorities are ignored when max_priority is 0', () => {
    const h = new Harness();
    const a = h.publish({ priority: 0 });
    const b = h.publish({ priority: 9 });
    h.run({ type: 'subscribe', consumerId: 'c', prefetch: 0 });
    expect(h.deliveries().map((d) => d.messageId)).toEqual([a, b]);
  });

  it('max_length with drop-head dead-letters the oldest with reason maxlen', () => {
    const h = new Harness({ maxLength: 2, deadLetterExchange: 'dlx', deadLetterStrategy: 'at-most-once' });
    const a = h.publish();
    h.publish();
    h.publish();
    expect(h.ofType('deadLetter').map((d) => [d.messageId, d.reason])).toEqual([[a, 'maxlen']]);
    expect(h.state.totals.ready.count).toBe(2);
  });

  it('max_length_bytes with reject-publish refuses the new message', () => {
    const h = new Harness({ maxLengthBytes: 25, overflow: 'reject-publish' });
    h.publish();
    h.publish();
    expect(h.run({ type: 'enqueue', sizeBytes: 10, exchange: '', routingKeys: [] })).toEqual({ type: 'rejected', reason: 'maxlen' });
    expect(h.state.totals.ready).toEqual({ count: 2, bytes: 20 });
  });

  it('reject-publish-dlx refuses the new message and dead-letters it with reason maxlen', () => {
    const h = new Harness({ maxLength: 1, overflow: 'reject-publish-dlx', deadLetterExchange: 'dlx', deadLetterStrategy: 'at-most-once' });
    h.publish();
    expect(h.run({ type: 'enqueue', sizeBytes: 1, exchange: 'ex', routingKeys: ['x'] }).type).toBe('rejected');
    expect(h.ofType('deadLetter')).toMatchObject([{ reason: 'maxlen', routingKeys: ['x'] }]);
    expect(h.state.totals.ready.count).toBe(1);
  });
});

describe('spec 7: lifecycle', () => {
  it('auto_delete: never for a queue that never had a consumer; when the last consumer leaves after one', () => {
    const h = new Harness({ autoDelete: true });
    h.advance(10_000_000);
    expect(h.ofType('deleteQueue')).toHaveLength(0);
    h.run({ type: 'subscribe', consumerId: 'a', prefetch: 1 });
    h.run({ type: 'subscribe', consumerId: 'b', prefetch: 1 });
    h.run({ type: 'cancel', consumerId: 'a' });
    expect(h.ofType('deleteQueue')).toHaveLength(0);
    h.run({ type: 'consumerDown', consumerId: 'b' });
    expect(h.ofType('deleteQueue')).toEqual([{ type: 'deleteQueue', reason: 'auto_delete' }]);
  });

  it('expires: deleted after being unused that long; get and redeclare renew the lease', () => {
    const h = new Harness({ expiresMs: 1000 });
    h.advance(900);
    h.run({ type: 'get', ackMode: 'auto' });
    h.advance(900);
    h.run({ type: 'declare' });
    h.advance(999);
    expect(h.ofType('deleteQueue')).toHaveLength(0);
    h.advance(1);
    expect(h.ofType('deleteQueue')).toEqual([{ type: 'deleteQueue', reason: 'expires' }]);
  });

  it('expires: a queue with consumers does not expire', () => {
    const h = new Harness({ expiresMs: 1000 });
    h.run({ type: 'subscribe', consumerId: 'c', prefetch: 1 });
    h.advance(5000);
    expect(h.ofType('deleteQueue')).toHaveLength(0);
  });

  it('exclusive: the queue is deleted when its session ends', () => {
    const h = new Harness({ exclusive: true });
    h.run({ type: 'sessionEnded' });
    expect(h.ofType('deleteQueue')).toEqual([{ type: 'deleteQueue', reason: 'exclusive' }]);
  });

  it('delete if_unused / if_empty fail with FAILED_PRECONDITION, else drop everything', () => {
    const h = new Harness();
    h.publish();
    h.run({ type: 'subscribe', consumerId: 'c', prefetch: 0 });
    h.publish();
    expect(h.run({ type: 'delete', ifUnused: true })).toMatchObject({ type: 'error', code: 'FAILED_PRECONDITION' });
    h.run({ type: 'cancel', consumerId: 'c' });
    expect(h.run({ type: 'delete', ifEmpty: true })).toMatchObject({ type: 'error', code: 'FAILED_PRECONDITION' });
    expect(h.run({ type: 'delete' })).toEqual({ type: 'deleted', messagesDropped: 2 });
    expect(h.state.messages.size).toBe(0);
    expect(h.run({ type: 'purge' })).toMatchObject({ type: 'error', code: 'QUEUE_DELETED' });
  });

  it('purge drops ready and delayed messages, not unacked ones', () => {
    const h = new Harness();
    h.publish();
    h.run({ type: 'subscribe', consumerId: 'c', prefetch: 1 });
    h.publish();
    h.publish({ delayMs: 100 });
    expect(h.run({ type: 'purge' })).toEqual({ type: 'purged', messagesDropped: 2 });
    expect(h.state.totals.delivered.count).toBe(1);
    expect(h.state.gone.purged).toBe(2);
    expect(h.ofType('dropWaiting')).toEqual([{ type: 'dropWaiting', reason: 'purged', count: 2 }]);
    expect(h.ofType('drop')).toEqual([]);
  });

  it('a purge of a queue whose messages all wait is one effect, and gives their memory back', () => {
    const h = new Harness({ compactionKey: 'k' });
    for (let i = 0; i < 20_000; i++) h.publish({ delayMs: i % 10 === 0 ? 60_000 : undefined, expirationMs: 30_000, compactionKey: i % 3 === 0 ? `key-${i}` : undefined });
    const live = h.state.messages.size;
    expect(live).toBe(20_000);
    expect(h.state.messages.capacity).toBeGreaterThanOrEqual(live);
    expect(h.run({ type: 'purge' })).toEqual({ type: 'purged', messagesDropped: live });
    expect(h.effects).toEqual([{ type: 'dropWaiting', reason: 'purged', count: live }]);
    expect(h.state.messages.size).toBe(0);
    expect(h.state.messages.capacity).toBeLessThanOrEqual(16);
    expect(h.state.totals.ready).toEqual({ count: 0, bytes: 0 });
    expect(h.state.totals.delayed).toEqual({ count: 0, bytes: 0 });
    expect(h.state.gone.purged).toBe(live);
    expect(h.state.expiryHeap.size).toBe(0);
    expect(h.state.compaction?.keys.size).toBe(0);
    // The queue goes on as a fresh one would: publish, consume, ack.
    const id = h.publish({ compactionKey: 'key-1' });
    h.run({ type: 'subscribe', consumerId: 'c', prefetch: 1 });
    const [delivery] = h.deliveries('c');
    expect(delivery?.messageId).toBe(id);
    h.run({ type: 'ack', consumerId: 'c', deliveryTag: delivery!.deliveryTag });
    expect(h.state.messages.size).toBe(0);
    expect(h.state.compaction?.keys.size).toBe(0);
  });
});

describe('bad commands return a typed error and leave the state unchanged', () => {
  const bad: Array<[string, (h: Harness) => void, string]> = [
    ['unknown consumer', (h) => h.run({ type: 'ack', consumerId: 'ghost', deliveryTag: 1 }), 'UNKNOWN_CONSUMER'],
    ['double ack', (h) => h.run({ type: 'ack', consumerId: 'c', deliveryTag: 1 }), 'UNKNOWN_DELIVERY_TAG'],
    ['ack of a tag not delivered to that consumer', (h) => h.run({ type: 'ack', consumerId: 'd', deliveryTag: 2 }), 'UNKNOWN_DELIVERY_TAG'],
    ['negative prefetch', (h) => h.run({ type: 'subscribe', consumerId: 'e', prefetch: -1 }), 'INVALID_ARGUMENT'],
    ['negative credit', (h) => h.run({ type: 'credit', consumerId: 'c', prefetch: -3 }), 'INVALID_ARGUMENT'],
    ['duplicate consumer', (h) => h.run({ type: 'subscribe', consumerId: 'c', prefetch: 1 }), 'CONSUMER_EXISTS'],
    ['wrong size type', (h) => h.run({ type: 'enqueue', sizeBytes: '10' as never, exchange: '', routingKeys: [] }), 'INVALID_ARGUMENT'],
    ['wrong routing keys', (h) => h.run({ type: 'enqueue', sizeBytes: 1, exchange: '', routingKeys: 'rk' as never }), 'INVALID_ARGUMENT'],
    ['sequence without producer', (h) => h.run({ type: 'enqueue', sizeBytes: 1, exchange: '', routingKeys: [], sequence: 1 }), 'INVALID_ARGUMENT'],
    ['negative delay', (h) => h.run({ type: 'return', consumerId: 'd', deliveryTag: 1, delayMs: -1 }), 'INVALID_ARGUMENT'],
    ['unknown command type', (h) => h.run({ type: 'compact' } as never), 'INVALID_ARGUMENT'],
    ['delete with a non-boolean flag', (h) => h.run({ type: 'delete', ifEmpty: 'yes' as never }), 'INVALID_ARGUMENT'],
    ['get with an unknown ack mode', (h) => h.run({ type: 'get', ackMode: 'none' as never }), 'INVALID_ARGUMENT'],
    ['not a command', (h) => h.run(null as never), 'INVALID_ARGUMENT'],
    ['ack multiple below every tag', (h) => h.run({ type: 'ack', consumerId: 'c', deliveryTag: 0, multiple: true }), 'UNKNOWN_DELIVERY_TAG'],
  ];
  for (const [name, act, code] of bad) {
    it(name, () => {
      const h = new Harness();
      h.publish();
      h.publish();
      h.run({ type: 'subscribe', consumerId: 'c', prefetch: 1 });
      h.run({ type: 'subscribe', consumerId: 'd', prefetch: 1 });
      h.run({ type: 'ack', consumerId: 'c', deliveryTag: 1 });
      const before = stateHash(h.state);
      act(h);
      expect(h.reply).toMatchObject({ type: 'error', code });
      expect(h.effects).toEqual([]);
      expect(stateHash(h.state)).toBe(before);
    });
  }
});
