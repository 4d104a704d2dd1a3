import * as grpc from '@grpc/grpc-js';
import { quorumq } from '@quorumq/proto';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { connect, QuorumqError, type ConnectOptions, type Delivery, type QuorumqClient } from '../src/index.js';
import { wireNumber } from '../src/longs.js';
import { FakeBroker, FakeState, waitFor } from './fake-broker.js';

const { SettleKind } = quorumq.v1;
const cleanup: Array<() => Promise<void> | void> = [];
/** The stream kind the clients of the running block use: the SDK's own HTTP/2 (the default) or grpc-js's. */
let nativeStreams = true;
afterEach(async () => {
  for (const fn of cleanup.splice(0).reverse()) await fn();
});

async function setup(n = 1, options: Partial<ConnectOptions> = {}): Promise<{ brokers: FakeBroker[]; state: FakeState; client: QuorumqClient }> {
  const state = new FakeState();
  const brokers: FakeBroker[] = [];
  for (let i = 0; i < n; i++) brokers.push(await FakeBroker.start(state));
  state.declareQueue('q');
  state.leaders.set('q', brokers[0]?.nodeId ?? '');
  const client = connect({ nodes: brokers.map((b) => b.address), failoverTimeoutMs: 2_000, initialBackoffMs: 10, maxBackoffMs: 50, nativeStreams, ...options });
  cleanup.push(() => {
    for (const b of brokers) b.kill();
  });
  cleanup.push(() => client.close());
  return { brokers, state, client };
}

function first<T>(items: readonly T[]): T {
  const item = items[0];
  if (item === undefined) throw new Error('empty');
  return item;
}

async function take(iterator: AsyncIterator<Delivery>): Promise<Delivery> {
  const result = await iterator.next();
  if (result.done === true) throw new Error('iteration ended');
  return result.value;
}

describe.each([true, false])('Consumer (streams on the SDK own HTTP/2: %s)', (native) => {
  beforeEach(() => {
    nativeStreams = native;
  });

  it('subscribes, yields deliveries with their fields and acks them on the stream', async () => {
    const { brokers, state, client } = await setup();
    const broker = first(brokers);
    state.enqueue(state.declareQueue('q'), 'ex', {
      body: Buffer.from('one'),
      routingKey: 'rk',
      properties: { contentType: 'application/json', messageId: 'id-1', priority: 2, timestampMs: 5000 },
      headers: { n: { intValue: 3 }, tags: { listValue: { values: [{ stringValue: 'a' }] } } },
      deaths: [{ queue: 'dlq-src', reason: 'rejected', count: 2, exchange: 'ex', routingKeys: ['rk'], firstTimeMs: 1000, lastTimeMs: 2000 }],
      firstDeath: { reason: 'rejected', queue: 'dlq-src', exchange: 'ex' },
      lastDeath: { reason: 'rejected', queue: 'dlq-src', exchange: 'ex' },
    });
    state.put('q', 'two');
    const consumer = client.consume('q', { prefetch: 7, priority: 5, consumerTag: 'my-tag' });
    await consumer.ready();
    expect(broker.subscribes).toHaveLength(1);
    expect(broker.subscribes[0]).toMatchObject({ queue: 'q', prefetch: 7, priority: 5, consumerTag: 'my-tag' });
    const iterator = consumer[Symbol.asyncIterator]();
    const d1 = await take(iterator);
    expect(d1.body.toString()).toBe('one');
    expect(d1).toMatchObject({ queue: 'q', consumerTag: 'my-tag', deliveryTag: 1, deliveryCount: 1, redelivered: false, exchange: 'ex', routingKey: 'rk', routingKeys: ['rk'] });
    expect(d1.properties).toEqual({ contentType: 'application/json', messageId: 'id-1', priority: 2, timestamp: new Date(5000) });
    expect(d1.headers).toEqual({ n: 3, tags: ['a'] });
    expect(d1.deaths).toEqual([{ queue: 'dlq-src', reason: 'rejected', count: 2, exchange: 'ex', routingKeys: ['rk'], firstTime: new Date(1000), lastTime: new Date(2000) }]);
    expect(d1.firstDeath).toEqual({ reason: 'rejected', queue: 'dlq-src', exchange: 'ex' });
    expect(d1.lastDeath).toEqual({ reason: 'rejected', queue: 'dlq-src', exchange: 'ex' });
    const d2 = await take(iterator);
    expect(d2.deliveryTag).toBe(2);
    expect(d2.firstDeath).toBeUndefined();
    await d1.ack();
    expect(d1.settled).toBe(true);
    await d1.ack(); // settling twice is a no-op
    await waitFor(() => broker.settles.length === 1, 2_000, 'one settle');
    const settle = first(broker.settles);
    expect([settle.kind, wireNumber(settle.deliveryTag), settle.multiple ?? false]).toEqual([SettleKind.SETTLE_KIND_ACK, 1, false]);
    await d2.ack();
    await waitFor(() => broker.settles.length === 2, 2_000, 'two settles');
    expect(state.queues.get('q')?.unacked.size).toBe(0);
    consumer.setPrefetch(3);
    await waitFor(() => broker.credits.length === 1, 2_000, 'credit');
    expect(broker.credits).toEqual([3]);
    await consumer.cancel();
    expect(await iterator.next()).toEqual({ done: true, value: undefined });
    expect(await consumer.ended).toBeUndefined();
  });

  it('sends nack and reject with the right fields, and multiple acks', async () => {
    const { brokers, state, client } = await setup();
    const broker = first(brokers);
    for (const body of ['a', 'b', 'c', 'd', 'e', 'f']) state.put('q', body);
    const consumer = client.consume('q', { prefetch: 6 });
    const iterator = consumer[Symbol.asyncIterator]();
    const ds: Delivery[] = [];
    for (let i = 0; i < 6; i++) ds.push(await take(iterator));
    const [a, b, c, d, e, f] = ds;
    if (a === undefined || b === undefined || c === undefined || d === undefined || e === undefined || f === undefined) throw new Error('missing deliveries');
    await a.nack({ requeue: false, delayMs: 500 });
    await b.nack({ delayMs: 250 });
    await c.reject();
    await d.reject({ requeue: true });
    await f.ack({ multiple: true });
    await e.ack(); // covered by the multiple ack: nothing sent
    expect(e.settled).toBe(true);
    await waitFor(() => broker.settles.length === 5, 2_000, 'five settles');
    await new Promise((resolve) => setTimeout(resolve, 30));
    const seen = broker.settles.map((s) => ({
      kind: s.kind,
      tag: wireNumber(s.deliveryTag),
      requeue: s.requeue ?? false,
      delayMs: wireNumber(s.delayMs),
      multiple: s.multiple ?? false,
    }));
    expect(seen).toEqual([
      { kind: SettleKind.SETTLE_KIND_NACK, tag: 1, requeue: false, delayMs: 500, multiple: false },
      { kind: SettleKind.SETTLE_KIND_NACK, tag: 2, requeue: true, delayMs: 250, multiple: false },
      { kind: SettleKind.SETTLE_KIND_REJECT, tag: 3, requeue: false, delayMs: 0, multiple: false },
      { kind: SettleKind.SETTLE_KIND_REJECT, tag: 4, requeue: true, delayMs: 0, multiple: false },
      { kind: SettleKind.SETTLE_KIND_ACK, tag: 6, requeue: false, delayMs: 0, multiple: true },
    ]);
    await consumer.cancel();
  });

  it('acks made in one turn travel as one batch; a run of acks with nothing unsettled below becomes one multiple ack', async () => {
    const { brokers, state, client } = await setup();
    const broker = first(brokers);
    for (const body of ['a', 'b', 'c', 'd', 'e']) state.put('q', body);
    const consumer = client.consume('q', { prefetch: 5 });
    const iterator = consumer[Symbol.asyncIterator]();
    const ds: Delivery[] = [];
    for (let i = 0; i < 5; i++) ds.push(await take(iterator));
    const [a, b, c, d, e] = ds;
    if (a === undefined || b === undefined || c === undefined || d === undefined || e === undefined) throw new Error('missing deliveries');
    // Same turn: ack 1, 2, 3 and 5 (4 stays unsettled), reject 2 is not there: plain acks only.
    void a.ack();
    void b.ack();
    void c.ack();
    void e.ack();
    await waitFor(() => broker.settles.length === 2, 2_000, 'two settles');
    await new Promise((resolve) => setTimeout(resolve, 30));
    expect(broker.settles.map((s) => ({ tag: wireNumber(s.deliveryTag), multiple: s.multiple ?? false }))).toEqual([
      { tag: 5, multiple: false },
      { tag: 3, multiple: true },
    ]);
    await d.ack();
    await waitFor(() => broker.settles.length === 3, 2_000, 'three settles');
    expect(wireNumber(broker.settles[2]?.deliveryTag)).toBe(4);
    await consumer.cancel();
  });

  it('callback form acks when the handler resolves and nacks (requeue) when it throws', async () => {
    const { brokers, state, client } = await setup();
    const broker = first(brokers);
    state.put('q', 'ok');
    state.put('q', 'boom');
    const errors: unknown[] = [];
    const handled: string[] = [];
    const consumer = client.consume('q', { prefetch: 1, onError: (error) => errors.push(error) }, async (delivery) => {
      handled.push(`${delivery.body.toString()}#${delivery.deliveryCount}`);
      if (delivery.body.toString() === 'boom' && !delivery.redelivered) throw new Error('handler failed');
    });
    await waitFor(() => handled.length === 3 && broker.settles.length === 3, 2_000, 'three handled');
    expect(handled).toEqual(['ok#1', 'boom#1', 'boom#2']);
    expect(broker.settles.map((s) => [s.kind, s.requeue ?? false])).toEqual([
      [SettleKind.SETTLE_KIND_ACK, false],
      [SettleKind.SETTLE_KIND_NACK, true],
      [SettleKind.SETTLE_KIND_ACK, false],
    ]);
    expect(errors).toHaveLength(1);
    expect(state.queues.get('q')?.ready).toHaveLength(0);
    await consumer.cancel();
  });

  it('resubscribes on another node when its node dies; settlements of old deliveries are dropped', async () => {
    const { brokers, state, client } = await setup(2);
    const [a, b] = brokers;
    if (a === undefined || b === undefined) throw new Error('no brokers');
    state.put('q', 'm1');
    const consumer = client.consume('q', { prefetch: 10, consumerTag: 'c1' });
    const received: Delivery[] = [];
    const loop = (async () => {
      for await (const delivery of consumer) received.push(delivery);
    })();
    await waitFor(() => received.length === 1, 2_000, 'first delivery');
    expect(consumer.node).toBe(a.address);
    const old = first(received);
    a.kill();
    await waitFor(() => received.length === 2, 3_000, 'redelivery on B');
    const again = received[1];
    if (again === undefined) throw new Error('no redelivery');
    expect(consumer.node).toBe(b.address);
    expect(consumer.resubscriptions).toBe(1);
    expect(b.subscribes).toEqual([expect.objectContaining({ queue: 'q', consumerTag: 'c1', prefetch: 10 })]);
    expect(again.body.toString()).toBe('m1');
    expect(again.redelivered).toBe(true);
    expect(old.settled).toBe(true); // moot: the broker took it back
    await old.ack(); // dropped silently
    await new Promise((resolve) => setTimeout(resolve, 30));
    expect(b.settles).toHaveLength(0);
    await again.ack();
    await waitFor(() => b.settles.length === 1, 2_000, 'ack on B');
    // The iteration goes on with new messages.
    state.put('q', 'm2');
    b.pumpAll();
    await waitFor(() => received.length === 3, 2_000, 'm2');
    expect(received[2]?.body.toString()).toBe('m2');
    await consumer.cancel();
    await loop;
  });

  it('follows the quorumq-leader trailer when the leader moves', async () => {
    const { brokers, state, client } = await setup(3);
    const [a, b, c] = brokers;
    if (a === undefined || b === undefined || c === undefined) throw new Error('no brokers');
    const consumer = client.consume('q');
    await consumer.ready();
    expect(consumer.node).toBe(a.address);
    state.leaders.set('q', c.nodeId);
    a.endConsumeStreams({ code: grpc.status.UNAVAILABLE, reason: 'NOT_LEADER', leader: c.address });
    await waitFor(() => c.subscribes.length === 1, 2_000, 'subscribe on C');
    await consumer.ready();
    expect(consumer.node).toBe(c.address);
    expect(b.subscribes).toHaveLength(0);
    expect(client.leaderOf('q')).toBe(c.address);
    await consumer.cancel();
  });

  it('reports consumer events; a delivery the broker took back is settled as moot', async () => {
    const { brokers, state, client } = await setup();
    const broker = first(brokers);
    state.put('q', 'slow');
    const events: unknown[] = [];
    const consumer = client.consume('q', { prefetch: 1, onEvent: (event) => events.push(event) });
    const iterator = consumer[Symbol.asyncIterator]();
    const slow = await take(iterator);
    broker.sendEvent('consumer_timeout', 'delivery timed out', slow.deliveryTag);
    await waitFor(() => events.length === 1, 2_000, 'event');
    expect(events).toEqual([{ kind: 'consumer_timeout', message: 'delivery timed out', deliveryTag: 1 }]);
    expect(slow.settled).toBe(true);
    await slow.ack(); // moot: nothing sent
    // The broker redelivers it on the same stream.
    const again = await take(iterator);
    expect(again.deliveryTag).toBe(2);
    expect(again.redelivered).toBe(true);
    await again.ack();
    await waitFor(() => broker.settles.length === 1, 2_000, 'ack');
    expect(wireNumber(first(broker.settles).deliveryTag)).toBe(2);
    await consumer.cancel();
  });

  it('ends the iteration with a QuorumqError when the subscription is refused', async () => {
    const { client } = await setup();
    const consumer = client.consume('missing');
    await expect(consumer.ready()).rejects.toMatchObject({ code: 'NOT_FOUND', reason: 'QUEUE_NOT_FOUND', retriable: false });
    const iterate = async (): Promise<number> => {
      let n = 0;
      for await (const _ of consumer) n += 1;
      return n;
    };
    const error = await iterate().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(QuorumqError);
    expect(error).toMatchObject({ code: 'NOT_FOUND' });
    expect(await consumer.ended).toMatchObject({ code: 'NOT_FOUND' });
    expect(consumer.isDone).toBe(true);
  });

  it('close resolves only once the broker ended the subscription, after the acks made before it (issue 12 item 12)', async () => {
    const { brokers, state, client } = await setup();
    const broker = first(brokers);
    broker.consumeEndDelayMs = 300;
    state.put('q', 'a');
    state.put('q', 'b');
    const consumer = client.consume('q', { prefetch: 10 });
    const iterator = consumer[Symbol.asyncIterator]();
    await (await take(iterator)).ack();
    await (await take(iterator)).ack();
    await consumer.close();
    expect(broker.consumeStreamsEnded).toBe(1);
    const queue = state.queues.get('q')!;
    expect(queue.consumers).toBe(0);
    expect(queue.unacked.size).toBe(0);
    expect(broker.settles.length).toBeGreaterThan(0);
    expect((await consumer.ended)).toBeUndefined();
    // Closing again waits for the same end; a consumer closed by `break` waits too.
    await consumer.close();
    state.put('q', 'c');
    const second = client.consume('q', { prefetch: 10 });
    for await (const delivery of second) {
      await delivery.ack();
      break;
    }
    expect(broker.consumeStreamsEnded).toBe(2);
    expect(queue.consumers).toBe(0);
    expect(queue.unacked.size).toBe(0);
  });

  it('drain waits until delivered messages are settled, then ends the subscription', async () => {
    const { brokers, state, client } = await setup();
    const broker = first(brokers);
    state.put('q', 'x');
    state.put('q', 'y');
    const consumer = client.consume('q', { prefetch: 2 });
    const iterator = consumer[Symbol.asyncIterator]();
    const x = await take(iterator);
    await waitFor(() => state.queues.get('q')?.unacked.size === 2, 2_000, 'both delivered');
    let drained = false;
    const draining = consumer.drain().then(() => {
      drained = true;
    });
    expect(await iterator.next()).toEqual({ done: true, value: undefined }); // 'y' is not yielded
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(drained).toBe(false);
    await x.ack();
    await draining;
    expect(drained).toBe(true);
    await waitFor(() => state.queues.get('q')?.consumers === 0, 2_000, 'stream closed');
    expect(broker.settles).toHaveLength(1);
    // 'y' went back to the queue.
    expect(state.queues.get('q')?.ready.map((m) => Buffer.from(m.message.body ?? []).toString())).toEqual(['y']);
  });

  it('receives messages over grpc-js default 4 MiB limit by default, and keeps a receive limit the application set (issue 12 item 1)', async () => {
    const { state, client } = await setup();
    const big = 'x'.repeat(5 * 1024 * 1024);
    state.put('q', big);
    expect((await client.get('q'))?.body.toString()).toBe(big);
    state.put('q', big);
    const consumer = client.consume('q', { prefetch: 1 });
    const iterator = consumer[Symbol.asyncIterator]();
    expect((await take(iterator)).body.toString()).toBe(big);
    await consumer.close();
    const limited = connect({ nodes: client.nodes, failoverTimeoutMs: 500, nativeStreams, channelOptions: { 'grpc.max_receive_message_length': 1024 * 1024 } });
    cleanup.push(() => limited.close());
    const error = await limited.get('q').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(QuorumqError);
    expect((error as QuorumqError).code).toBe('RESOURCE_EXHAUSTED');
  });

  it('get returns one message or null, and settles manual gets through SettleGet', async () => {
    const { brokers, state, client } = await setup();
    const broker = first(brokers);
    expect(await client.get('q')).toBeNull();
    state.put('q', 'auto', { h: { boolValue: true } });
    state.put('q', 'manual');
    const auto = await client.get('q');
    expect(auto?.body.toString()).toBe('auto');
    expect(auto?.headers).toEqual({ h: true });
    expect(auto?.settled).toBe(true);
    await auto?.ack();
    expect(broker.settleGets).toHaveLength(0);
    const manual = await client.get('q', { manualAck: true });
    if (manual === null) throw new Error('no message');
    expect(manual.settled).toBe(false);
    expect(state.queues.get('q')?.unacked.size).toBe(1);
    await manual.nack({ requeue: true });
    expect(broker.settleGets).toHaveLength(1);
    const request = first(broker.settleGets);
    expect(request.queue).toBe('q');
    expect(request.consumerTag).toBe(manual.consumerTag);
    expect([request.settle?.kind, wireNumber(request.settle?.deliveryTag), request.settle?.requeue]).toEqual([SettleKind.SETTLE_KIND_NACK, manual.deliveryTag, true]);
    expect(state.queues.get('q')?.ready).toHaveLength(1);
    await expect(client.get('nope')).rejects.toMatchObject({ code: 'NOT_FOUND', reason: 'QUEUE_NOT_FOUND' });
  });
});

