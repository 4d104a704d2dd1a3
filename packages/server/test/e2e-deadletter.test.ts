/**
 * Dead-lettering, TTL, delays and the seed 004 topologies end to end: three real node
 * processes, the SDK, and real time (short TTLs).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Delivery, QuorumqClient } from '@quorumq/client';

import { TestCluster, waitFor } from './cluster.js';

let cluster: TestCluster;
let client: QuorumqClient;

beforeAll(async () => {
  cluster = await TestCluster.start();
  client = cluster.client();
});

afterAll(async () => {
  await cluster?.close();
});

/** The next `count` deliveries of `queue`, acked, or fewer if none come within `timeoutMs`. */
async function take(queue: string, count: number, timeoutMs = 20_000): Promise<Delivery[]> {
  const taken: Delivery[] = [];
  const consumer = client.consume(queue, { prefetch: 10 });
  const timer = setTimeout(() => void consumer.cancel(), timeoutMs);
  for await (const delivery of consumer) {
    taken.push(delivery);
    await delivery.ack();
    if (taken.length >= count) break;
  }
  clearTimeout(timer);
  await consumer.close();
  return taken;
}

describe('spec 4 and 5: delivery limit and dead-lettering across queues (different Raft groups)', () => {
  it('a message returned past delivery_limit is dead-lettered with reason delivery_limit and its death record', async () => {
    await client.declareExchange('dlx.limit', 'fanout');
    await client.declareQueue('limit.dlq');
    await client.bind({ source: 'dlx.limit', queue: 'limit.dlq' });
    await client.declareQueue('limit', { deliveryLimit: 2, deadLetterExchange: 'dlx.limit' });
    await client.publish('', 'limit', 'poison');

    const counts: number[] = [];
    const consumer = client.consume('limit', { prefetch: 1 });
    const timer = setTimeout(() => void consumer.cancel(), 20_000);
    for await (const delivery of consumer) {
      counts.push(delivery.deliveryCount);
      expect(delivery.redelivered).toBe(delivery.deliveryCount > 0);
      await delivery.nack({ requeue: true });
      if (counts.length === 3) break;
    }
    clearTimeout(timer);
    await consumer.close();
    expect(counts).toEqual([0, 1, 2]);

    const [dead] = await take('limit.dlq', 1);
    expect(dead?.body.toString()).toBe('poison');
    expect(dead?.deaths.map((d) => [d.queue, d.reason, d.count])).toEqual([['limit', 'delivery_limit', 1]]);
    expect(dead?.firstDeath).toEqual({ reason: 'delivery_limit', queue: 'limit', exchange: '' });
    // The RabbitMQ header form of the same records.
    const xDeath = dead?.headers['x-death'] as Array<Record<string, unknown>>;
    expect(xDeath[0]).toMatchObject({ count: 1, reason: 'delivery_limit', queue: 'limit' });
    expect(dead?.headers['x-first-death-reason']).toBe('delivery_limit');
    await waitFor(async () => (await client.queueStatus('limit')).deadLettering === 0);
    expect((await client.queueStatus('limit')).ready).toBe(0);
  });

  it('reject without requeue dead-letters with reason rejected; the DLX routing key replaces the original', async () => {
    await client.declareExchange('dlx.rej', 'direct');
    await client.declareQueue('rej.dlq');
    await client.bind({ source: 'dlx.rej', queue: 'rej.dlq', bindingKey: 'rejected-here' });
    await client.declareQueue('rej', { deadLetterExchange: 'dlx.rej', deadLetterRoutingKey: 'rejected-here' });
    await client.publish('', 'rej', 'no thanks');
    const consumer = client.consume('rej', { prefetch: 1 });
    for await (const delivery of consumer) {
      await delivery.reject();
      break;
    }
    await consumer.close();
    const [dead] = await take('rej.dlq', 1);
    expect(dead?.routingKeys).toEqual(['rejected-here']);
    expect(dead?.deaths[0]).toMatchObject({ queue: 'rej', reason: 'rejected', count: 1, routingKeys: ['rej'] });
  });
});

describe('spec 6: TTL expires every message on time, wherever it is, into the DLQ', () => {
  it('queue TTL and a shorter per-message expiration both expire, behind a message that does not', async () => {
    await client.declareExchange('dlx.ttl', 'fanout');
    await client.declareQueue('ttl.dlq');
    await client.bind({ source: 'dlx.ttl', queue: 'ttl.dlq' });
    await client.declareQueue('ttl', { messageTtlMs: 1500, deadLetterExchange: 'dlx.ttl' });
    const started = Date.now();
    await client.publish('', 'ttl', 'queue-ttl');
    await client.publish('', 'ttl', 'short', { properties: { expirationMs: 300 } });
    const dead = await take('ttl.dlq', 2);
    const elapsed = Date.now() - started;
    // The short one expired first although it was behind the other (not only at the head).
    expect(dead.map((d) => d.body.toString())).toEqual(['short', 'queue-ttl']);
    expect(elapsed).toBeGreaterThanOrEqual(1400);
    expect(elapsed).toBeLessThan(1500 + 3000);
    const short = dead[0];
    expect(short?.deaths[0]).toMatchObject({ queue: 'ttl', reason: 'expired', originalExpirationMs: 300 });
    // Dead-lettered without its expiration property, so it does not expire again in the DLQ.
    expect(short?.properties.expirationMs).toBeUndefined();
  });

  it('a delayed message is invisible until its delay passed; nack with a delay backs off', async () => {
    await client.declareQueue('delayed');
    const started = Date.now();
    await client.publish('', 'delayed', 'later', { delayMs: 700 });
    expect((await client.queueStatus('delayed')).delayed).toBe(1);
    const consumer = client.consume('delayed', { prefetch: 1 });
    const seen: number[] = [];
    for await (const delivery of consumer) {
      seen.push(Date.now() - started);
      if (seen.length === 1) await delivery.nack({ requeue: true, delayMs: 600 });
      else {
        await delivery.ack();
        break;
      }
    }
    await consumer.close();
    expect(seen[0]).toBeGreaterThanOrEqual(650);
    expect((seen[1] ?? 0) - (seen[0] ?? 0)).toBeGreaterThanOrEqual(550);
  });
});

describe('seed 004: the three-tier retry topology works as written', () => {
  const TIERS = [
    { name: 'retry.t1', ttlMs: 300 },
    { name: 'retry.t2', ttlMs: 600 },
    { name: 'retry.t3', ttlMs: 900 },
  ];

  it('a message that always fails goes t1 -> t2 -> t3 and then parks in the DLQ with its history', async () => {
    await client.declareExchange('pesanan', 'topic');
    await client.declareExchange('pesanan.dlx', 'direct');
    await client.declareQueue('pesanan.email', { deadLetterExchange: 'pesanan.dlx', deadLetterRoutingKey: 'pesanan.email', deliveryLimit: 5 });
    await client.bind({ source: 'pesanan', queue: 'pesanan.email', bindingKey: 'pesanan.*.dibuat' });
    for (const tier of TIERS) {
      await client.declareQueue(tier.name, { messageTtlMs: tier.ttlMs, deadLetterExchange: 'pesanan', deadLetterRoutingKey: 'pesanan.jakarta.dibuat' });
      await client.bind({ source: 'pesanan.dlx', queue: tier.name, bindingKey: tier.name });
    }
    await client.declareQueue('pesanan.email.dlq');
    await client.bind({ source: 'pesanan.dlx', queue: 'pesanan.email.dlq', bindingKey: 'habis' });
    await client.bind({ source: 'pesanan.dlx', queue: 'pesanan.email.dlq', bindingKey: 'pesanan.email' });

    expect((await client.publish('pesanan', 'pesanan.jakarta.dibuat', 'kirim email')).queues).toEqual(['pesanan.email']);
    const attempts: number[] = [];
    const consumer = client.consume('pesanan.email', { prefetch: 1 });
    const timer = setTimeout(() => void consumer.cancel(), 30_000);
    for await (const delivery of consumer) {
      // The article's consumer: attempts so far = the sum of the x-death counts.
      const n = delivery.deaths.reduce((sum, d) => sum + d.count, 0);
      attempts.push(n);
      const target = n < TIERS.length ? (TIERS[n]?.name ?? 'habis') : 'habis';
      await client.publish('pesanan.dlx', target, delivery.body, {
        deaths: delivery.deaths,
        ...(delivery.firstDeath ? { firstDeath: delivery.firstDeath } : {}),
        ...(delivery.lastDeath ? { lastDeath: delivery.lastDeath } : {}),
      });
      await delivery.ack();
      if (target === 'habis') break;
    }
    clearTimeout(timer);
    await consumer.close();
    expect(attempts).toEqual([0, 1, 2, 3]);
    const [parked] = await take('pesanan.email.dlq', 1);
    expect(parked?.body.toString()).toBe('kirim email');
    expect(parked?.deaths.map((d) => [d.queue, d.reason, d.count])).toEqual([
      ['retry.t3', 'expired', 1],
      ['retry.t2', 'expired', 1],
      ['retry.t1', 'expired', 1],
    ]);
  });
});

describe('spec 8: move messages from a DLQ back, one by one, at least once', () => {
  it('moves what the DLQ held when the move started to the destination exchange and reports progress', async () => {
    await client.declareQueue('replay.dlq');
    await client.declareQueue('replay.work');
    await client.declareExchange('replay.x', 'direct');
    await client.bind({ source: 'replay.x', queue: 'replay.work', bindingKey: 'again' });
    for (let i = 0; i < 5; i++) await client.publish('', 'replay.dlq', `parked-${i}`);
    const progress: number[] = [];
    const final = await client.move({
      sourceQueue: 'replay.dlq',
      destinationExchange: 'replay.x',
      routingKey: 'again',
      onProgress: (p) => progress.push(p.moved),
    });
    expect(final).toMatchObject({ moved: 5, total: 5, done: true });
    expect(progress.length).toBeGreaterThan(0);
    expect((await client.queueStatus('replay.dlq')).ready).toBe(0);
    expect((await take('replay.work', 5)).map((d) => d.body.toString())).toEqual([0, 1, 2, 3, 4].map((i) => `parked-${i}`));
  });

  it('a move to an unknown exchange is NOT_FOUND and moves nothing', async () => {
    await client.declareQueue('replay.none');
    await client.publish('', 'replay.none', 'stays');
    await expect(client.move({ sourceQueue: 'replay.none', destinationExchange: 'no-such-exchange' })).rejects.toMatchObject({ code: 'NOT_FOUND' });
    expect((await client.queueStatus('replay.none')).ready).toBe(1);
  });
});
