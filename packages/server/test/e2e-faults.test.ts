/**
 * Faults against real node processes: a confirm needs a majority, kill -9 of a queue's
 * leader during a stream of confirmed publishes loses nothing (and with producer ids
 * duplicates nothing), and a whole-cluster kill -9 and restart recovers every committed
 * message and all topology.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { QuorumqError, type QuorumqClient } from '@quorumq/client';

import { TestCluster } from './cluster.js';

let cluster: TestCluster | null = null;

afterEach(async () => {
  await cluster?.close();
  cluster = null;
});

/** Drains a queue: every body it holds now, acked, stopping after `idleMs` without a delivery. */
async function drain(client: QuorumqClient, queue: string, idleMs = 3000, maxMs = 60_000): Promise<string[]> {
  const bodies: string[] = [];
  const consumer = client.consume(queue, { prefetch: 200 });
  let idle = setTimeout(() => void consumer.cancel(), idleMs);
  const hard = setTimeout(() => void consumer.cancel(), maxMs);
  for await (const delivery of consumer) {
    clearTimeout(idle);
    bodies.push(delivery.body.toString());
    await delivery.ack();
    idle = setTimeout(() => void consumer.cancel(), idleMs);
  }
  clearTimeout(idle);
  clearTimeout(hard);
  return bodies;
}

describe('spec 2: a confirm requires a majority', () => {
  it('with two of three nodes down publishes do not confirm; after one returns they do', async () => {
    cluster = await TestCluster.start({ env: { QUORUMQ_REQUEST_TIMEOUT_MS: '2000' } });
    const client = cluster.client({ failoverTimeoutMs: 4000 });
    await client.declareQueue('majority');
    expect((await client.publish('', 'majority', 'before')).outcome).toBe('confirmed');
    await cluster.kill('n2');
    await cluster.kill('n3');
    const started = Date.now();
    const error = await client.publish('', 'majority', 'no quorum').then(
      () => null,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(QuorumqError);
    expect((error as QuorumqError).retriable).toBe(true);
    expect(['UNAVAILABLE', 'DEADLINE_EXCEEDED']).toContain((error as QuorumqError).code);
    expect(Date.now() - started).toBeGreaterThanOrEqual(1500);

    await cluster.restart('n2');
    const deadline = Date.now() + 30_000;
    let confirmed = false;
    while (!confirmed && Date.now() < deadline) {
      confirmed = await client.publish('', 'majority', 'after').then(
        (r) => r.outcome === 'confirmed',
        () => false,
      );
    }
    expect(confirmed).toBe(true);
    const bodies = await drain(client, 'majority');
    expect(bodies).toContain('before');
    expect(bodies).toContain('after');
  });
});

describe('spec 2 and 10: kill -9 of a queue leader loses nothing confirmed', () => {
  it('a publisher with a producer id streams through the kill: every confirmed message is consumed exactly once', async () => {
    cluster = await TestCluster.start();
    const client = cluster.client({ failoverTimeoutMs: 30_000 });
    await client.declareQueue('orders');
    const leader = await cluster.leaderOf('orders', client);
    const publisher = client.createPublisher({ maxInFlight: 64, producerId: 'orders-api' });
    const confirmed = new Set<string>();
    const failed: unknown[] = [];
    const total = 1500;
    const pending: Promise<void>[] = [];
    for (let i = 0; i < total; i++) {
      if (i === 500) void cluster.kill(leader);
      pending.push(
        publisher.publish('orders', `v${i}`).then(
          (r) => {
            if (r.outcome === 'confirmed' || r.outcome === 'duplicate') confirmed.add(`v${i}`);
          },
          (e: unknown) => {
            failed.push(e);
          },
        ),
      );
    }
    await Promise.all(pending);
    await publisher.close();
    expect(confirmed.size).toBeGreaterThan(total * 0.9);

    await cluster.restart(leader);
    const consumed = await drain(client, 'orders');
    const lost = [...confirmed].filter((v) => !consumed.includes(v));
    expect(lost).toEqual([]);
    // Producer dedup: nothing is enqueued twice.
    expect(consumed.length).toBe(new Set(consumed).size);
  });

  it('spec 8: a move goes on through a kill -9 of its queue\'s leader, and the SDK follows it to the end', async () => {
    cluster = await TestCluster.start();
    const client = cluster.client({ failoverTimeoutMs: 30_000 });
    await client.declareQueue('parked');
    await client.declareQueue('retried');
    await client.declareExchange('replay', 'direct');
    await client.bind({ source: 'replay', queue: 'retried', bindingKey: 'again' });
    const total = 300;
    const publisher = client.createPublisher({ maxInFlight: 100 });
    await Promise.all(Array.from({ length: total }, (_, i) => publisher.publish('parked', `m${i}`)));
    await publisher.close();
    const leader = await cluster.leaderOf('parked', client);
    let killed: Promise<void> | null = null;
    const progress: number[] = [];
    const final = await client.move({
      sourceQueue: 'parked',
      destinationExchange: 'replay',
      routingKey: 'again',
      onProgress: (p) => {
        progress.push(p.moved);
        // Part way through, the node running the move dies.
        if (killed === null && p.moved > 0 && p.moved < total) killed = cluster!.kill(leader);
      },
    });
    expect(killed).not.toBeNull();
    expect(final).toMatchObject({ moved: total, total, done: true });
    expect(await cluster.leaderOf('parked', client)).not.toBe(leader);
    expect((await client.queueStatus('parked')).ready).toBe(0);
    // At least once: every message reached the destination (one in flight at the kill may twice).
    const moved = await drain(client, 'retried');
    expect(new Set(moved)).toEqual(new Set(Array.from({ length: total }, (_, i) => `m${i}`)));
    expect(moved.length).toBeLessThanOrEqual(total + 64);
  });

  it('after kill -9 of every node and a restart, every confirmed message and all topology are back', async () => {
    cluster = await TestCluster.start();
    const client = cluster.client();
    await client.declareExchange('events', 'topic');
    await client.declareQueue('audit', { deliveryLimit: 7 });
    await client.bind({ source: 'events', queue: 'audit', bindingKey: 'user.#' });
    const values = Array.from({ length: 300 }, (_, i) => `e${i}`);
    for (const value of values) expect((await client.publish('events', 'user.signup', value)).outcome).toBe('confirmed');
    await Promise.all(cluster.nodes.map((n) => cluster?.kill(n.id)));
    for (const node of cluster.nodes) cluster.startNode(node.id);
    await cluster.waitHealthy();

    // Topology survived: the declare is idempotent with the same arguments, a mismatch is refused.
    expect((await client.declareQueue('audit', { deliveryLimit: 7 })).created).toBe(false);
    await expect(client.declareQueue('audit', { deliveryLimit: 8 })).rejects.toMatchObject({ code: 'FAILED_PRECONDITION' });
    expect((await client.publish('events', 'user.login', 'after-restart')).queues).toEqual(['audit']);
    const consumed = await drain(client, 'audit');
    expect(consumed).toEqual([...values, 'after-restart']);
  });
});

describe('spec 2: the disk alarm refuses publishes instead of failing later', () => {
  it('below disk_free_limit a publish gets RESOURCE_EXHAUSTED / DISK_ALARM; admin calls and status still work', async () => {
    // A limit no disk meets: every node is in alarm from its first check.
    cluster = await TestCluster.start({ env: { QUORUMQ_DISK_FREE_LIMIT_BYTES: String(2 ** 52) } });
    const client = cluster.client();
    await client.declareQueue('alarmed');
    const error = await client.publish('', 'alarmed', 'x').then(
      () => null,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(QuorumqError);
    expect((error as QuorumqError).code).toBe('RESOURCE_EXHAUSTED');
    expect((error as QuorumqError).reason).toBe('DISK_ALARM');
    expect((error as QuorumqError).retriable).toBe(true);
    const status = await client.clusterStatus();
    expect(Object.values(status.nodes).some((n) => n.diskAlarm)).toBe(true);
    expect((await client.queueStatus('alarmed')).ready).toBe(0);
  });
});

describe('graceful shutdown hands leadership off first', () => {
  it('SIGTERM to a queue leader moves its leadership to a peer; publishes keep confirming; restart rejoins', async () => {
    cluster = await TestCluster.start();
    const client = cluster.client({ failoverTimeoutMs: 15_000 });
    await client.declareQueue('handoff');
    const leader = await cluster.leaderOf('handoff', client);
    const stopping = cluster.stop(leader);
    await stopping;
    const next = await cluster.leaderOf('handoff', client);
    expect(next).not.toBe(leader);
    expect((await client.publish('', 'handoff', 'after-stop')).outcome).toBe('confirmed');
    await cluster.restart(leader);
    const status = await client.queueStatus('handoff');
    expect(status.members).toContain(leader);
    expect(status.ready).toBe(1);
  });
});

