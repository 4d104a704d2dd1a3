/**
 * End to end against three real node processes, through the SDK with default options: what
 * the broker accepts comes back whole and exact (large messages, 64-bit header values).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Delivery, QuorumqClient } from '@quorumq/client';

import { TestCluster } from './cluster.js';

let cluster: TestCluster;
let client: QuorumqClient;

beforeAll(async () => {
  cluster = await TestCluster.start();
  client = cluster.client();
});

afterAll(async () => {
  await cluster?.close();
});

/** The first delivery of a new consumer on `queue`, acked. */
async function consumeOne(queue: string, timeoutMs = 20_000): Promise<Delivery> {
  const consumer = client.consume(queue, { prefetch: 1 });
  const timer = setTimeout(() => void consumer.cancel(), timeoutMs);
  try {
    for await (const delivery of consumer) {
      await delivery.ack();
      return delivery;
    }
    throw (await consumer.ended) ?? new Error(`no delivery from ${queue} within ${timeoutMs} ms`);
  } finally {
    clearTimeout(timer);
    await consumer.close();
  }
}

describe('messages above grpc-js default 4 MiB receive limit (issue 12 item 1)', () => {
  const body = Buffer.alloc(5 * 1024 * 1024);
  for (let i = 0; i < body.byteLength; i += 4096) body.writeUInt32BE(i, i);

  it('a 5 MiB message comes back whole through get', async () => {
    await client.declareQueue('big-get');
    expect((await client.publish('', 'big-get', body)).outcome).toBe('confirmed');
    const delivery = await client.get('big-get');
    expect(delivery).not.toBeNull();
    expect(delivery!.body.equals(body)).toBe(true);
    expect((await client.queueStatus('big-get')).ready).toBe(0);
  });

  it('a 5 MiB message comes back whole through consume', async () => {
    await client.declareQueue('big-consume');
    expect((await client.publish('', 'big-consume', body)).outcome).toBe('confirmed');
    const delivery = await consumeOne('big-consume');
    expect(delivery.body.equals(body)).toBe(true);
  });
});
