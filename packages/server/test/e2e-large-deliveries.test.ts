/**
 * Everything the broker accepts reaches the SDK (issue 12, items 1 and 15): deliveries leave
 * in batches cut by bytes, a prefetch of 0 is capped at max_prefetch, and an auto-ack get
 * whose response could not be sent returns its message instead of losing it.
 */
import http2 from 'node:http2';
import { quorumq } from '@quorumq/proto';
import type { QuorumqClient } from '@quorumq/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { TestCluster, waitFor } from './cluster.js';

import pb = quorumq.v1;

let cluster: TestCluster;
let client: QuorumqClient;

beforeAll(async () => {
  cluster = await TestCluster.start({ env: { QUORUMQ_MAX_PREFETCH: '300' } });
  client = cluster.client();
});

afterAll(async () => {
  await cluster?.close();
});

/** Publishes `count` messages of about `bytes` each (a publisher with a producer id re-sends safely after a failover). */
async function fill(queue: string, count: number, bytes: number): Promise<void> {
  const publisher = client.createPublisher({ maxInFlight: 16, producerId: `fill-${queue}` });
  const body = Buffer.alloc(bytes, 7);
  await Promise.all(Array.from({ length: count }, (_, i) => publisher.publish(queue, Buffer.concat([Buffer.from(`${i}:`), body]))));
  await publisher.close();
}

/** Consumes until `count` distinct messages came (a redelivery after a failover counts once), acking each; returns their indexes. */
async function consumeAll(queue: string, count: number, prefetch: number): Promise<number[]> {
  const seen = new Set<number>();
  const consumer = client.consume(queue, { prefetch });
  const timer = setTimeout(() => void consumer.cancel(), 100_000);
  for await (const delivery of consumer) {
    seen.add(Number(delivery.body.subarray(0, delivery.body.indexOf(':')).toString()));
    void delivery.ack();
    if (seen.size === count) break;
  }
  clearTimeout(timer);
  await consumer.close();
  return [...seen];
}

describe('deliveries cut by bytes', () => {
  it('60 x 100 KB with prefetch 100 reach a default SDK consumer (one turn held 6 MB)', async () => {
    await client.declareQueue('big.prefetch');
    await fill('big.prefetch', 60, 100_000);
    const seen = await consumeAll('big.prefetch', 60, 100);
    expect(seen.sort((a, b) => a - b)).toEqual(Array.from({ length: 60 }, (_, i) => i));
    await waitFor(async () => (await client.queueStatus('big.prefetch')).unacked === 0);
    expect((await client.queueStatus('big.prefetch')).ready).toBe(0);
  });

  it('a consumer with prefetch 0 on 700 x 100 KB (70 MB) gets every message', async () => {
    await client.declareQueue('big.unlimited');
    await fill('big.unlimited', 700, 100_000);
    const seen = await consumeAll('big.unlimited', 700, 0);
    expect(seen.length).toBe(700);
  });
});

describe('prefetch 0 is capped at max_prefetch', () => {
  it('a consumer that never acks holds at most max_prefetch (300 here) deliveries', async () => {
    await client.declareQueue('capped');
    await fill('capped', 400, 10);
    const consumer = client.consume('capped', { prefetch: 0 });
    let received = 0;
    const reading = (async () => {
      for await (const _delivery of consumer) received += 1;
    })();
    await waitFor(async () => received >= 300);
    // Give the broker time to hand out more, if it wrongly would.
    await new Promise((r) => setTimeout(r, 500));
    const status = await client.queueStatus('capped');
    expect(status.unacked).toBe(300);
    expect(status.ready).toBe(100);
    expect(received).toBe(300);
    await consumer.close();
    await reading.catch(() => undefined);
  });
});

describe('an auto-ack get whose response could not be sent', () => {
  it('returns the message to the queue instead of losing it', async () => {
    await client.declareQueue('get.unsent');
    await client.publish('', 'get.unsent', Buffer.alloc(200_000, 1));
    const leader = await cluster.leaderOf('get.unsent', client);
    const address = cluster.nodes.find((n) => n.id === leader)!.address;
    // A raw HTTP/2 client whose flow-control window is 0: the node cannot send the
    // response's data; then the client gives up (RST_STREAM), as a client whose deadline passed.
    const session = http2.connect(`http://${address}`, { settings: { initialWindowSize: 0 } });
    const request = pb.GetRequest.encode({ queue: 'get.unsent', manualAck: false }).finish();
    const frame = Buffer.alloc(5 + request.length);
    frame.writeUInt32BE(request.length, 1);
    frame.set(request, 5);
    const stream = session.request({ ':method': 'POST', ':path': '/quorumq.v1.Broker/Get', 'content-type': 'application/grpc', te: 'trailers' });
    stream.on('error', () => undefined);
    stream.end(frame);
    // The get took the message (it is held), and the response cannot leave.
    await waitFor(async () => (await client.queueStatus('get.unsent')).unacked === 1);
    stream.close(http2.constants.NGHTTP2_CANCEL);
    session.close();
    await waitFor(async () => {
      const status = await client.queueStatus('get.unsent');
      return status.ready === 1 && status.unacked === 0;
    });
    const again = await client.get('get.unsent');
    expect(again?.body.length).toBe(200_000);
  });
});
