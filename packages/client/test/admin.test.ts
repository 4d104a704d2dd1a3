import * as grpc from '@grpc/grpc-js';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { connect, QuorumqError, type MoveProgress, type QuorumqClient } from '../src/index.js';
import { FakeBroker } from './fake-broker.js';

let broker: FakeBroker;
let client: QuorumqClient;

beforeEach(async () => {
  broker = await FakeBroker.start();
  client = connect({ nodes: [broker.address], failoverTimeoutMs: 500 });
});

afterEach(async () => {
  await client.close();
  broker.kill();
});

describe('topology', () => {
  it('declares a queue with camelCase arguments mirroring QueueArguments', async () => {
    const result = await client.declareQueue('orders', {
      deliveryLimit: 5,
      messageTtlMs: 60_000,
      maxLength: 10,
      overflow: 'reject-publish',
      maxPriority: 4,
      singleActiveConsumer: true,
      deadLetterStrategy: 'at-most-once',
      replicas: 3,
    });
    expect(result).toEqual({ name: 'orders', created: true, warnings: ['delivery limit without a dead-letter exchange'], members: ['node-1'] });
    const args = broker.state.queues.get('orders')?.args;
    expect(args?.deliveryLimit).toEqual(expect.anything());
    expect(Number(args?.deliveryLimit)).toBe(5);
    expect(Number(args?.messageTtlMs)).toBe(60_000);
    expect(args?.overflow).toBe('reject-publish');
    expect(args?.maxPriority).toBe(4);
    expect(args?.singleActiveConsumer).toBe(true);
    expect(args?.deadLetterStrategy).toBe('at-most-once');
    expect(args?.replicas).toBe(3);
    // Unset arguments stay unset on the wire.
    expect(args?.deadLetterExchange ?? null).toBeNull();
    expect((await client.declareQueue('orders')).created).toBe(false);
  });

  it('passive declare of a missing queue rejects with NOT_FOUND / QUEUE_NOT_FOUND', async () => {
    const error = await client.declareQueue('missing', undefined, { passive: true }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(QuorumqError);
    const q = error as QuorumqError;
    expect(q.code).toBe('NOT_FOUND');
    expect(q.reason).toBe('QUEUE_NOT_FOUND');
    expect(q.retriable).toBe(false);
    expect(q.node).toBe(broker.address);
    expect(broker.calls.filter((c) => c === 'declareQueue')).toHaveLength(1); // not retried
  });

  it('declares exchanges, binds, routes, unbinds, purges and deletes', async () => {
    await client.declareQueue('q1');
    expect(await client.declareExchange('ex', 'direct')).toEqual({ created: true });
    expect(await client.declareExchange('ex', 'direct', { passive: true })).toEqual({ created: false });
    const mismatch = await client.declareExchange('ex', 'fanout').catch((e: unknown) => e);
    expect(mismatch).toMatchObject({ code: 'FAILED_PRECONDITION', reason: 'EXCHANGE_TYPE_MISMATCH', retriable: false });
    expect(await client.bind({ source: 'ex', queue: 'q1', bindingKey: 'k' })).toEqual({ created: true });
    expect((await client.publish('ex', 'k', 'routed')).outcome).toBe('confirmed');
    expect((await client.queueStatus('q1')).ready).toBe(1);
    expect(await client.unbind({ source: 'ex', queue: 'q1', bindingKey: 'k' })).toEqual({ removed: true });
    expect((await client.publish('ex', 'k', 'lost')).outcome).toBe('unroutable');
    expect(await client.purgeQueue('q1')).toEqual({ messagesDropped: 1 });
    await client.deleteExchange('ex');
    expect(broker.state.exchanges.has('ex')).toBe(false);
    broker.state.put('q1', 'x');
    const refused = await client.deleteQueue('q1', { ifEmpty: true }).catch((e: unknown) => e);
    expect(refused).toMatchObject({ code: 'FAILED_PRECONDITION', reason: 'QUEUE_NOT_EMPTY' });
    expect(await client.deleteQueue('q1')).toEqual({ messagesDropped: 1 });
    await expect(client.bind({ source: 'ex', queue: 'a', exchange: 'b' } as unknown as Parameters<QuorumqClient['bind']>[0])).rejects.toThrow(/exactly one/);
  });

  it('reports queue and cluster status and learns the leaders', async () => {
    await client.declareQueue('q1');
    broker.state.put('q1', 'a');
    const status = await client.queueStatus('q1');
    expect(status).toMatchObject({ name: 'q1', leader: 'node-1', members: ['node-1'], ready: 1, unacked: 0, commitIndex: 42, term: 3 });
    const cluster = await client.clusterStatus();
    expect(cluster.node).toBe('node-1');
    expect(cluster.nodes['node-1']).toEqual({ id: 'node-1', address: broker.address, reachable: true, diskAlarm: false, memoryAlarm: false, state: 'active', peerAddress: '', voter: false });
    expect(cluster.queues['q1']?.leader).toBe('node-1');
    expect(cluster.queues['q1']?.leaderAddress).toBe(broker.address);
    expect(client.leaderOf('q1')).toBe(broker.address);
  });

  it('learns the leader a declare or a purge names, and nothing from one that names none', async () => {
    await client.declareQueue('silent');
    await client.purgeQueue('silent');
    expect(client.leaderOf('silent')).toBeUndefined();
    broker.tellsLeader = true;
    await client.declareQueue('named');
    expect(client.leaderOf('named')).toBe(broker.address);
    const other = connect({ nodes: [broker.address], failoverTimeoutMs: 500 });
    try {
      await other.purgeQueue('named');
      expect(other.leaderOf('named')).toBe(broker.address);
    } finally {
      await other.close();
    }
  });

  it('moves messages and reports progress', async () => {
    await client.declareQueue('src');
    await client.declareQueue('dst');
    await client.declareExchange('to-dst', 'fanout');
    await client.bind({ source: 'to-dst', queue: 'dst' });
    for (const body of ['1', '2', '3']) broker.state.put('src', body);
    const seen: MoveProgress[] = [];
    const final = await client.move({ sourceQueue: 'src', destinationExchange: 'to-dst', onProgress: (p) => seen.push(p) });
    expect(final).toEqual({ moved: 3, total: 3, done: true });
    expect(seen.map((p) => p.moved)).toEqual([1, 2, 3]);
    expect(broker.state.queues.get('dst')?.ready.map((m) => Buffer.from(m.message.body ?? []).toString())).toEqual(['1', '2', '3']);
    const missing = await client.move({ sourceQueue: 'nope', destinationExchange: 'to-dst' }).catch((e: unknown) => e);
    expect(missing).toMatchObject({ code: 'NOT_FOUND', reason: 'QUEUE_NOT_FOUND' });
  });

  it('maps RESOURCE_EXHAUSTED from a disk alarm to a retriable error', async () => {
    broker.failNext('declareQueue', { code: grpc.status.RESOURCE_EXHAUSTED, reason: 'DISK_ALARM', details: 'disk alarm' });
    const error = await client.declareQueue('q').catch((e: unknown) => e);
    expect(error).toMatchObject({ code: 'RESOURCE_EXHAUSTED', reason: 'DISK_ALARM', retriable: true, message: 'disk alarm' });
  });
});
