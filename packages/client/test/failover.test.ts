import * as grpc from '@grpc/grpc-js';
import { afterEach, describe, expect, it } from 'vitest';
import { connect, QuorumqError, type ConnectOptions, type QuorumqClient } from '../src/index.js';
import { FakeBroker, FakeState } from './fake-broker.js';

const cleanup: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const fn of cleanup.splice(0).reverse()) await fn();
});

function client(nodes: string[], options: Partial<ConnectOptions> = {}): QuorumqClient {
  const c = connect({ nodes, failoverTimeoutMs: 2_000, initialBackoffMs: 10, maxBackoffMs: 50, ...options });
  cleanup.push(() => c.close());
  return c;
}

async function brokers(n: number): Promise<FakeBroker[]> {
  const state = new FakeState();
  const list: FakeBroker[] = [];
  for (let i = 0; i < n; i++) list.push(await FakeBroker.start(state));
  cleanup.push(() => {
    for (const b of list) b.kill();
  });
  return list;
}

function count(broker: FakeBroker, method: string): number {
  return broker.calls.filter((c) => c === method).length;
}

describe('failover', () => {
  it('retries a unary call on the next node when a node is down, and sticks to the healthy one', async () => {
    const [a] = await brokers(1);
    if (a === undefined) throw new Error('no broker');
    const dead = await FakeBroker.deadAddress();
    const c = client([dead, a.address]);
    expect((await c.declareQueue('q')).created).toBe(true);
    expect((await c.queueStatus('q')).name).toBe('q');
    expect(count(a, 'declareQueue')).toBe(1);
    expect(count(a, 'queueStatus')).toBe(1);
  });

  it("a publisher whose stream to the queue's known leader breaks forgets that leader and goes on at another node", async () => {
    const [a, b] = await brokers(2);
    if (a === undefined || b === undefined) throw new Error('no brokers');
    a.tellsLeader = true;
    const cl = client([a.address, b.address], { failoverTimeoutMs: 5_000 });
    await cl.declareQueue('q');
    expect(cl.leaderOf('q')).toBe(a.address);
    const publisher = cl.createPublisher({ producerId: 'p', maxInFlight: 4 });
    expect((await publisher.publish('q', 'm0')).outcome).toBe('confirmed');
    expect(publisher.node).toBe(a.address);
    a.kill();
    // Before the fix the stream kept reopening at the dead leader the cache still named.
    expect((await publisher.publish('q', 'm1')).outcome).toBe('confirmed');
    expect(publisher.node).toBe(b.address);
    expect(cl.leaderOf('q')).toBeUndefined();
    await publisher.close();
  });

  it('retries on UNAVAILABLE and prefers the address in the quorumq-leader trailer', async () => {
    const [a, b, c] = await brokers(3);
    if (a === undefined || b === undefined || c === undefined) throw new Error('no brokers');
    a.failNext('purgeQueue', { code: grpc.status.UNAVAILABLE, reason: 'NOT_LEADER', leader: c.address });
    a.state.declareQueue('q');
    a.state.put('q', 'x');
    const cl = client([a.address, b.address, c.address]);
    expect(await cl.purgeQueue('q')).toEqual({ messagesDropped: 1 });
    expect(count(a, 'purgeQueue')).toBe(1);
    expect(count(b, 'purgeQueue')).toBe(0);
    expect(count(c, 'purgeQueue')).toBe(1);
  });

  it('gives up after the failover timeout with the last retriable error, backing off between rounds', async () => {
    const [a, b] = await brokers(2);
    if (a === undefined || b === undefined) throw new Error('no brokers');
    a.failNext('deleteExchange', { code: grpc.status.UNAVAILABLE, reason: 'NO_QUORUM' }, 1000);
    b.failNext('deleteExchange', { code: grpc.status.UNAVAILABLE, reason: 'NO_QUORUM' }, 1000);
    const cl = client([a.address, b.address], { failoverTimeoutMs: 300, initialBackoffMs: 20, maxBackoffMs: 40 });
    const started = Date.now();
    const error = await cl.deleteExchange('x').catch((e: unknown) => e);
    const elapsed = Date.now() - started;
    expect(error).toBeInstanceOf(QuorumqError);
    expect(error).toMatchObject({ code: 'UNAVAILABLE', reason: 'NO_QUORUM', retriable: true });
    expect(elapsed).toBeGreaterThanOrEqual(250);
    expect(elapsed).toBeLessThan(1_500);
    const attempts = count(a, 'deleteExchange') + count(b, 'deleteExchange');
    // Back-off keeps the attempts bounded (20-40 ms per round of two nodes over ~300 ms).
    expect(attempts).toBeGreaterThanOrEqual(4);
    expect(attempts).toBeLessThan(60);
  });

  it('a unary publish whose first attempt broke after the broker stored it is stored once, and confirmed (issue 12 item 13)', async () => {
    const [a, b] = await brokers(2);
    if (a === undefined || b === undefined) throw new Error('no broker');
    a.state.declareQueue('jobs');
    a.failAfterStore.push({ code: grpc.status.UNAVAILABLE, details: 'connection reset after the commit' });
    const c = client([a.address, b.address]);
    expect(await c.publish('', 'jobs', 'once')).toEqual({ outcome: 'confirmed', queues: ['jobs'] });
    expect(a.state.queues.get('jobs')?.ready.map((m) => Buffer.from(m.message.body ?? []).toString())).toEqual(['once']);
    // The retry went to the other node with the same producer id and sequence.
    const [first, retry] = [...a.publishRequests, ...b.publishRequests];
    expect(retry?.producerId).toBe(first?.producerId);
    expect(retry?.sequence).toBe(first?.sequence);
    expect(first?.producerId).not.toBe('');
  });

  it('concurrent unary publishes never share a producer id; sequential ones reuse it with increasing sequences', async () => {
    const [a] = await brokers(1);
    if (a === undefined) throw new Error('no broker');
    a.state.declareQueue('jobs');
    const c = client([a.address]);
    const results = await Promise.all(Array.from({ length: 20 }, (_, i) => c.publish('', 'jobs', `m${i}`)));
    expect(results.every((r) => r.outcome === 'confirmed')).toBe(true);
    expect(new Set(a.publishRequests.map((r) => r.producerId)).size).toBe(20);
    const before = a.publishRequests.length;
    for (let i = 0; i < 3; i++) expect((await c.publish('', 'jobs', `s${i}`)).outcome).toBe('confirmed');
    const sequential = a.publishRequests.slice(before);
    expect(new Set(sequential.map((r) => r.producerId)).size).toBe(1);
    const sequences = sequential.map((r) => Number(r.sequence));
    expect(sequences[1]).toBeGreaterThan(sequences[0]!);
    expect(sequences[2]).toBeGreaterThan(sequences[1]!);
    expect(a.state.queues.get('jobs')?.ready).toHaveLength(23);
    // A publish with its own producer id keeps it, and its DUPLICATE.
    expect(await c.publish('', 'jobs', 'x', { producerId: 'mine', sequence: 7 })).toEqual({ outcome: 'confirmed', queues: ['jobs'] });
    expect(await c.publish('', 'jobs', 'x', { producerId: 'mine', sequence: 7 })).toEqual({ outcome: 'duplicate', queues: ['jobs'] });
  });

  it('does not fail over on a non-retriable status', async () => {
    const [a, b] = await brokers(2);
    if (a === undefined || b === undefined) throw new Error('no brokers');
    const cl = client([a.address, b.address]);
    await expect(cl.queueStatus('missing')).rejects.toMatchObject({ code: 'NOT_FOUND', reason: 'QUEUE_NOT_FOUND' });
    expect(count(a, 'queueStatus')).toBe(1);
    expect(count(b, 'queueStatus')).toBe(0);
  });

  it('fails over a move that failed before any progress', async () => {
    const [a, b] = await brokers(2);
    if (a === undefined || b === undefined) throw new Error('no brokers');
    a.state.declareQueue('src');
    a.state.put('src', 'x');
    a.state.exchanges.set('dst', 'fanout');
    a.failNext('move', { code: grpc.status.UNAVAILABLE, reason: 'NO_QUORUM' });
    const cl = client([a.address, b.address], { leaderRouting: false });
    expect(await cl.move({ sourceQueue: 'src', destinationExchange: 'dst' })).toEqual({ moved: 1, total: 1, done: true });
    expect(count(a, 'move')).toBe(1);
    expect(count(b, 'move')).toBe(1);
  });

  it('routes get and consume to the queue leader learnt from ClusterStatus', async () => {
    const [a, b] = await brokers(2);
    if (a === undefined || b === undefined) throw new Error('no brokers');
    a.state.declareQueue('q');
    a.state.leaders.set('q', b.nodeId);
    a.state.put('q', 'x');
    const cl = client([a.address, b.address]);
    expect((await cl.get('q'))?.body.toString()).toBe('x');
    expect(count(a, 'clusterStatus')).toBe(1);
    expect(count(a, 'get')).toBe(0);
    expect(count(b, 'get')).toBe(1);
    expect(cl.leaderOf('q')).toBe(b.address);
    const consumer = cl.consume('q');
    await consumer.ready();
    expect(consumer.node).toBe(b.address);
    expect(b.subscribes).toHaveLength(1);
    expect(a.subscribes).toHaveLength(0);
    await consumer.cancel();
    // Without leader routing, the sticky node serves everything.
    const plain = client([a.address, b.address], { leaderRouting: false });
    expect(await plain.get('q')).toBeNull();
    expect(count(a, 'get')).toBe(1);
  });
});
