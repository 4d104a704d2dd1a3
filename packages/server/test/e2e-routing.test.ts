/**
 * End to end against three real node processes: publishing and consuming through every
 * exchange type, status, and the errors a client gets for bad requests.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, credentials, status as grpcStatus, type ServiceError } from '@grpc/grpc-js';
import { QuorumqError, type QuorumqClient } from '@quorumq/client';
import { quorumq } from '@quorumq/proto';

import { TestCluster } from './cluster.js';

let cluster: TestCluster;
let client: QuorumqClient;

beforeAll(async () => {
  cluster = await TestCluster.start({ env: { QUORUMQ_EXCLUSIVE_LEASE_MS: '2000' } });
  client = cluster.client({ sessionKeepAliveMs: 500 });
});

afterAll(async () => {
  await cluster?.close();
});

/** Takes `count` messages from `queue` with a consumer, acking each. */
async function take(queue: string, count: number, timeoutMs = 20_000): Promise<string[]> {
  const bodies: string[] = [];
  const consumer = client.consume(queue, { prefetch: 50 });
  const timer = setTimeout(() => void consumer.cancel(), timeoutMs);
  for await (const delivery of consumer) {
    bodies.push(delivery.body.toString());
    await delivery.ack();
    if (bodies.length >= count) break;
  }
  clearTimeout(timer);
  await consumer.close();
  return bodies;
}

async function expectError(promise: Promise<unknown>, code: string, reason?: string): Promise<QuorumqError> {
  const error = await promise.then(
    () => null,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(QuorumqError);
  const q = error as QuorumqError;
  expect(q.code).toBe(code);
  if (reason !== undefined) expect(q.reason).toBe(reason);
  expect(q.message.length).toBeGreaterThan(10);
  return q;
}

describe('batching', () => {
  /** Publishes `count` messages with `count` in flight through `via`; returns how many log entries they took. */
  async function publishTogether(via: QuorumqClient, queue: string, count: number): Promise<number> {
    const before = (await client.queueStatus(queue)).commitIndex;
    const publisher = via.createPublisher({ maxInFlight: count });
    const results = await Promise.all(Array.from({ length: count }, (_, i) => publisher.publish(queue, `${queue}-${i}`)));
    await publisher.close();
    expect(results.every((r) => r.outcome === 'confirmed')).toBe(true);
    return (await client.queueStatus(queue)).commitIndex - before;
  }

  it('publishes in flight together share Raft entries on the leader and through a follower, and keep their order', async () => {
    await client.declareQueue('batched');
    const leader = await cluster.leaderOf('batched', client);
    const follower = cluster.nodes.find((n) => n.id !== leader)!;
    // One entry per message would be 400 each time; batches of what arrived in one turn are far fewer.
    expect(await publishTogether(client, 'batched', 400)).toBeLessThan(100);
    // A client that only knows a follower: that node forwards each turn's publishes as one entry.
    const viaFollower = cluster.client({ nodes: [follower.address], leaderRouting: false });
    expect(await publishTogether(viaFollower, 'batched', 400)).toBeLessThan(100);
    expect((await client.queueStatus('batched')).ready).toBe(800);
    expect(await take('batched', 800)).toEqual(Array.from({ length: 800 }, (_, i) => `batched-${i % 400}`));
  });
});

describe('spec 1: routing through exchanges on a live cluster', () => {
  it('default exchange: a confirmed publish reaches the queue named by the routing key, in order', async () => {
    await client.declareQueue('plain');
    for (let i = 0; i < 20; i++) {
      const result = await client.publish('', 'plain', `m${i}`);
      expect(result.outcome).toBe('confirmed');
      expect(result.queues).toEqual(['plain']);
    }
    expect(await take('plain', 20)).toEqual(Array.from({ length: 20 }, (_, i) => `m${i}`));
  });

  it('direct, fanout, topic and headers exchanges route to the bound queues only', async () => {
    for (const q of ['d1', 'f1', 'f2', 't1', 't2', 'h1']) await client.declareQueue(q);
    await client.declareExchange('ex.direct', 'direct');
    await client.declareExchange('ex.fanout', 'fanout');
    await client.declareExchange('ex.topic', 'topic');
    await client.declareExchange('ex.headers', 'headers');
    await client.bind({ source: 'ex.direct', queue: 'd1', bindingKey: 'red' });
    await client.bind({ source: 'ex.fanout', queue: 'f1' });
    await client.bind({ source: 'ex.fanout', queue: 'f2' });
    await client.bind({ source: 'ex.topic', queue: 't1', bindingKey: 'order.*.eu' });
    await client.bind({ source: 'ex.topic', queue: 't2', bindingKey: 'order.#' });
    await client.bind({ source: 'ex.headers', queue: 'h1', arguments: { 'x-match': 'all', region: 'eu', tier: 1 } });

    expect((await client.publish('ex.direct', 'red', 'direct-red')).queues).toEqual(['d1']);
    expect((await client.publish('ex.direct', 'blue', 'direct-blue')).outcome).toBe('unroutable');
    expect((await client.publish('ex.fanout', 'anything', 'fan')).queues).toEqual(['f1', 'f2']);
    expect((await client.publish('ex.topic', 'order.created.eu', 'topic-eu')).queues).toEqual(['t1', 't2']);
    expect((await client.publish('ex.topic', 'order.created.us', 'topic-us')).queues).toEqual(['t2']);
    expect((await client.publish('ex.headers', '', 'hdr-match', { headers: { region: 'eu', tier: 1 } })).queues).toEqual(['h1']);
    expect((await client.publish('ex.headers', '', 'hdr-miss', { headers: { region: 'eu', tier: 2 } })).outcome).toBe('unroutable');

    expect(await take('d1', 1)).toEqual(['direct-red']);
    expect(await take('f1', 1)).toEqual(['fan']);
    expect(await take('f2', 1)).toEqual(['fan']);
    expect(await take('t1', 1)).toEqual(['topic-eu']);
    expect(await take('t2', 2)).toEqual(['topic-eu', 'topic-us']);
    expect(await take('h1', 1)).toEqual(['hdr-match']);
  });

  it('spec 2 outcomes: REJECTED by a full reject-publish queue, DUPLICATE for a re-sent producer sequence', async () => {
    await client.declareQueue('bounded', { maxLength: 1, overflow: 'reject-publish' });
    expect((await client.publish('', 'bounded', 'first')).outcome).toBe('confirmed');
    const rejected = await client.publish('', 'bounded', 'second');
    expect(rejected.outcome).toBe('rejected');
    expect(rejected.reason).toContain('bounded');
    await client.declareQueue('deduped');
    expect((await client.publish('', 'deduped', 'once', { producerId: 'p1', sequence: 7 })).outcome).toBe('confirmed');
    expect((await client.publish('', 'deduped', 'once', { producerId: 'p1', sequence: 7 })).outcome).toBe('duplicate');
    expect((await client.queueStatus('deduped')).ready).toBe(1);
    // Far below the producer's highest sequence the queue cannot tell whether it stored one: refused, never DUPLICATE.
    expect((await client.publish('', 'deduped', 'later', { producerId: 'p1', sequence: 5_000 })).outcome).toBe('confirmed');
    await expect(client.publish('', 'deduped', 'held up', { producerId: 'p1', sequence: 100 })).rejects.toMatchObject({
      code: 'FAILED_PRECONDITION',
      reason: 'SEQUENCE_TOO_OLD',
      retriable: false,
    });
    expect((await client.queueStatus('deduped')).ready).toBe(2);
  });

  it('mandatory: an unroutable message is returned to the publisher', async () => {
    await client.declareExchange('ex.empty', 'direct');
    const result = await client.publish('ex.empty', 'nowhere', 'lost?', { mandatory: true });
    expect(result.outcome).toBe('unroutable');
    expect(result.returned?.body.toString()).toBe('lost?');
  });

  it('alternate exchange receives what the exchange cannot route; exchange-to-exchange bindings route on', async () => {
    await client.declareQueue('unrouted');
    await client.declareQueue('audit');
    await client.declareExchange('ex.alt', 'fanout');
    await client.bind({ source: 'ex.alt', queue: 'unrouted' });
    await client.declareExchange('ex.main', 'direct', { alternateExchange: 'ex.alt' });
    await client.declareExchange('ex.audit', 'fanout');
    await client.bind({ source: 'ex.audit', queue: 'audit' });
    await client.bind({ source: 'ex.main', exchange: 'ex.audit', bindingKey: 'audited' });
    expect((await client.publish('ex.main', 'unknown-key', 'to-alt')).queues).toEqual(['unrouted']);
    expect((await client.publish('ex.main', 'audited', 'to-audit')).queues).toEqual(['audit']);
    expect(await take('unrouted', 1)).toEqual(['to-alt']);
    expect(await take('audit', 1)).toEqual(['to-audit']);
  });

  it('message properties and typed headers arrive as published', async () => {
    await client.declareQueue('props');
    await client.publish('', 'props', 'p', {
      properties: { contentType: 'text/plain', messageId: 'id-1', correlationId: 'c-1', priority: 3 },
      headers: { s: 'text', n: 42, d: 1.5, b: true, list: [1, 'two'], map: { k: 'v' } },
    });
    const consumer = client.consume('props', { prefetch: 1 });
    for await (const delivery of consumer) {
      expect(delivery.properties.contentType).toBe('text/plain');
      expect(delivery.properties.messageId).toBe('id-1');
      expect(delivery.properties.correlationId).toBe('c-1');
      expect(delivery.headers).toEqual({ s: 'text', n: 42, d: 1.5, b: true, list: [1, 'two'], map: { k: 'v' } });
      expect(delivery.deliveryCount).toBe(0);
      expect(delivery.redelivered).toBe(false);
      await delivery.ack();
      break;
    }
    await consumer.close();
  });

  it('queue status reports the leader, members and counts; cluster status lists nodes and queues', async () => {
    await client.declareQueue('counted');
    for (let i = 0; i < 5; i++) await client.publish('', 'counted', `c${i}`);
    const status = await client.queueStatus('counted');
    expect(status.members).toHaveLength(3);
    expect(status.members).toContain(status.leader);
    expect(status.ready).toBe(5);
    expect(status.bytes).toBe(10);
    expect(status.commitIndex).toBeGreaterThanOrEqual(6);
    const cluster = await client.clusterStatus();
    expect(Object.keys(cluster.nodes).sort()).toEqual(['n1', 'n2', 'n3']);
    expect(cluster.metadataLeader).not.toBe('');
    expect(cluster.queues.counted?.members).toHaveLength(3);
  });

  it('get pulls one message; manual ack mode needs a settle', async () => {
    await client.declareQueue('pull');
    await client.publish('', 'pull', 'one');
    await client.publish('', 'pull', 'two');
    const first = await client.get('pull');
    expect(first?.body.toString()).toBe('one');
    const second = await client.get('pull', { manualAck: true });
    expect(second?.body.toString()).toBe('two');
    expect((await client.queueStatus('pull')).unacked).toBe(1);
    await second?.ack();
    expect(await client.get('pull')).toBeNull();
    expect((await client.queueStatus('pull')).unacked).toBe(0);
  });
});

describe('spec 7: queue lifecycle across the cluster', () => {
  async function gone(queue: string): Promise<boolean> {
    const deadline = Date.now() + 15_000;
    while (Date.now() < deadline) {
      const error = await client.queueStatus(queue).then(
        () => null,
        (e: unknown) => e,
      );
      if (error instanceof QuorumqError && error.code === 'NOT_FOUND') return true;
      await new Promise((r) => setTimeout(r, 100));
    }
    return false;
  }

  it('auto_delete: deleted when its last consumer leaves, never before it had one', async () => {
    await client.declareQueue('auto', { autoDelete: true });
    await new Promise((r) => setTimeout(r, 500));
    expect((await client.queueStatus('auto')).name).toBe('auto');
    const consumer = client.consume('auto', { prefetch: 1 });
    await consumer.ready();
    expect((await client.queueStatus('auto')).consumers).toBe(1);
    await consumer.close();
    expect(await gone('auto')).toBe(true);
    // The name is free again: a new declare creates a new, empty queue.
    expect((await client.declareQueue('auto', { autoDelete: true })).created).toBe(true);
  });

  it('exclusive: only the declaring session may use it (others get RESOURCE_LOCKED); it goes when the session closes', async () => {
    const owner = cluster.client({ sessionKeepAliveMs: 500 });
    const other = cluster.client({ sessionKeepAliveMs: 500 });
    await owner.declareQueue('mine', { exclusive: true });
    // Publishing is not locked (as in RabbitMQ); consuming, getting, redeclaring, purging are.
    expect((await other.publish('', 'mine', 'from-other')).outcome).toBe('confirmed');
    await expect(other.get('mine')).rejects.toMatchObject({ code: 'FAILED_PRECONDITION', reason: 'RESOURCE_LOCKED' });
    await expect(other.declareQueue('mine', { exclusive: true })).rejects.toMatchObject({ reason: 'RESOURCE_LOCKED' });
    await expect(other.purgeQueue('mine')).rejects.toMatchObject({ reason: 'RESOURCE_LOCKED' });
    expect((await owner.get('mine'))?.body.toString()).toBe('from-other');
    // The owner's lease is renewed while it lives (the lease here is 2 s).
    await new Promise((r) => setTimeout(r, 3000));
    expect((await client.queueStatus('mine')).name).toBe('mine');
    await owner.close();
    expect(await gone('mine')).toBe(true);
    await other.close();
  });

  it('exclusive: when its session dies without closing, the queue goes when its lease expires', async () => {
    const crashed = cluster.client({ sessionKeepAliveMs: 60_000 });
    await crashed.declareQueue('orphan', { exclusive: true });
    // No close(), no renewal: as if the process died.
    const started = Date.now();
    expect(await gone('orphan')).toBe(true);
    expect(Date.now() - started).toBeGreaterThanOrEqual(1000);
  });

  it('exclusive: a declare without a session is refused with a reason', async () => {
    const raw = new Client(cluster.addresses[0] ?? '', credentials.createInsecure());
    const error = await new Promise<ServiceError | null>((resolve) => {
      raw.makeUnaryRequest(
        '/quorumq.v1.Broker/DeclareQueue',
        (r: Buffer) => r,
        (b: Buffer) => b,
        Buffer.from(quorumq.v1.DeclareQueueRequest.encode({ name: 'no-session', arguments: { exclusive: true } }).finish()),
        (e: ServiceError | null) => resolve(e),
      );
    });
    raw.close();
    expect(error?.code).toBe(grpcStatus.INVALID_ARGUMENT);
    expect(error?.metadata.get('quorumq-reason')).toEqual(['SESSION_REQUIRED']);
  });

  it('expires: an unused queue is deleted after its lease; delete if-empty refuses a queue with messages', async () => {
    await client.declareQueue('leased', { expiresMs: 800 });
    expect(await gone('leased')).toBe(true);
    await client.declareQueue('full');
    await client.publish('', 'full', 'x');
    await expect(client.deleteQueue('full', { ifEmpty: true })).rejects.toMatchObject({ code: 'FAILED_PRECONDITION' });
    expect((await client.deleteQueue('full')).messagesDropped).toBe(1);
    expect(await gone('full')).toBe(true);
  });
});

describe('bad input gets a clear status and the node keeps serving', () => {
  it('unknown queue and exchange: NOT_FOUND', async () => {
    await expectError(client.queueStatus('no-such-queue'), 'NOT_FOUND', 'QUEUE_NOT_FOUND');
    await expectError(client.publish('no-such-exchange', 'k', 'x'), 'NOT_FOUND', 'EXCHANGE_NOT_FOUND');
    await expectError(client.declareQueue('no-such-queue', undefined, { passive: true }), 'NOT_FOUND', 'QUEUE_NOT_FOUND');
    await expectError(client.purgeQueue('no-such-queue'), 'NOT_FOUND');
  });

  it('argument mismatch on redeclare: FAILED_PRECONDITION naming the argument', async () => {
    await client.declareQueue('args', { maxLength: 10 });
    expect((await client.declareQueue('args', { maxLength: 10 })).created).toBe(false);
    const error = await expectError(client.declareQueue('args', { maxLength: 11 }), 'FAILED_PRECONDITION', 'ARGUMENT_MISMATCH');
    expect(error.message).toContain('maxLength');
  });

  it('wrong arguments and names: INVALID_ARGUMENT', async () => {
    await expectError(client.declareQueue('bad-priority', { maxPriority: 99 }), 'INVALID_ARGUMENT');
    await expectError(client.declareQueue('bad-overflow', { overflow: 'explode' as 'drop-head' }), 'INVALID_ARGUMENT');
    await expectError(client.declareQueue(''), 'INVALID_ARGUMENT');
    await expectError(client.declareQueue('durable-off', { durable: false }), 'INVALID_ARGUMENT', 'DURABLE_REQUIRED');
    await expectError(client.declareExchange('ex.bad', 'nonsense' as 'direct'), 'INVALID_ARGUMENT');
    await expectError(client.declareQueue('too-many-replicas', { replicas: 5 }), 'INVALID_ARGUMENT');
  });

  it('a malformed request (bytes that are not the message) is refused and the node keeps serving', async () => {
    const raw = new Client(cluster.addresses[0] ?? '', credentials.createInsecure());
    const status = await new Promise<number>((resolve) => {
      raw.makeUnaryRequest(
        '/quorumq.v1.Broker/Publish',
        (bytes: Buffer) => bytes,
        (bytes: Buffer) => bytes,
        Buffer.from([0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x01]),
        (error: ServiceError | null) => resolve(error?.code ?? 0),
      );
    });
    raw.close();
    expect(status).toBe(grpcStatus.INVALID_ARGUMENT);
    await client.declareQueue('after-garbage');
    expect((await client.publish('', 'after-garbage', 'fine')).outcome).toBe('confirmed');
  });

  it('oversized message: the outcome REJECTED with a reason (spec 2), nothing stored', async () => {
    await client.declareQueue('big');
    const body = Buffer.alloc(17 * 1024 * 1024, 1);
    const result = await client.publish('', 'big', body);
    expect(result.outcome).toBe('rejected');
    expect(result.reason).toContain('exceeds max_message_bytes');
    expect((await client.queueStatus('big')).ready).toBe(0);
    expect((await client.publish('', 'big', 'small')).outcome).toBe('confirmed');
  });

  it('a settle for a delivery tag never delivered is refused without changing the queue', async () => {
    await client.declareQueue('tags');
    await client.publish('', 'tags', 'x');
    const got = await client.get('tags', { manualAck: true });
    expect(got).not.toBeNull();
    await expect(client.get('tags')).resolves.toBeNull();
    expect((await client.queueStatus('tags')).unacked).toBe(1);
  });
});
