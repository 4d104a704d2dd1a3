/**
 * End to end against three real node processes, through the SDK with default options: what
 * the broker accepts comes back whole and exact (large messages, 64-bit header values).
 */
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, credentials, Metadata, type ServiceError } from '@grpc/grpc-js';
import type { Delivery, QuorumqClient } from '@quorumq/client';
import Long from 'long';
import protobuf from 'protobufjs';

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

describe('64-bit header values (issue 12 item 8)', () => {
  const values = { above: 9007199254740993n, below: -9007199254740993n, max: 2n ** 63n - 1n, min: -(2n ** 63n) };
  const expected = { ...values, nested: [values.above, { min: values.min }] };

  async function publish(queue: string): Promise<void> {
    await client.declareQueue(queue);
    expect((await client.publish('', queue, 'x', { headers: { ...values, nested: [values.above, { min: values.min }] } })).outcome).toBe('confirmed');
  }

  it('come back exactly through get', async () => {
    await publish('int64-get');
    const delivery = await client.get('int64-get');
    expect(delivery?.headers).toEqual(expected);
  });

  it('come back exactly through consume', async () => {
    await publish('int64-consume');
    expect((await consumeOne('int64-consume')).headers).toEqual(expected);
  });

  it('come back exactly to a client that decodes int64 with Long support (as the Python client does), through Get', async () => {
    await publish('int64-raw-get');
    // A client of its own: broker.proto loaded by protobufjs with Long support, over grpc-js.
    const protoDir = resolve(dirname(fileURLToPath(import.meta.url)), '../../../proto');
    const root = new protobuf.Root();
    root.resolvePath = (_origin, target) => (target.startsWith('/') ? target : join(protoDir, target));
    root.loadSync('quorumq/v1/broker.proto');
    expect(protobuf.util.Long).toBeTruthy(); // int64 fields decode as Long objects
    const GetRequest = root.lookupType('quorumq.v1.GetRequest');
    const GetResponse = root.lookupType('quorumq.v1.GetResponse');
    const leader = await cluster.leaderOf('int64-raw-get', client);
    const address = cluster.nodes.find((n) => n.id === leader)!.address;
    const raw = new Client(address, credentials.createInsecure());
    try {
      const response = await new Promise<protobuf.Message>((done, fail) => {
        raw.makeUnaryRequest(
          '/quorumq.v1.Broker/Get',
          (request: object) => Buffer.from(GetRequest.encode(GetRequest.create(request)).finish()),
          (bytes: Buffer) => GetResponse.decode(bytes),
          { queue: 'int64-raw-get' },
          new Metadata(),
          (error: ServiceError | null, result?: protobuf.Message) => (error !== null || result === undefined ? fail(error) : done(result)),
        );
      });
      type Wire = { intValue?: Long; listValue?: { values: Wire[] }; mapValue?: { entries: Record<string, Wire> } };
      const headers = (response as unknown as { delivery: { message: { headers: Record<string, Wire> } } }).delivery.message.headers;
      for (const [key, value] of Object.entries(values)) {
        expect(Long.isLong(headers[key]!.intValue)).toBe(true);
        expect(headers[key]!.intValue!.toString()).toBe(value.toString());
      }
      expect(headers['nested']!.listValue!.values[0]!.intValue!.toString()).toBe(values.above.toString());
      expect(headers['nested']!.listValue!.values[1]!.mapValue!.entries['min']!.intValue!.toString()).toBe(values.min.toString());
    } finally {
      raw.close();
    }
  });
});

describe("a publisher's stream (issue 16)", () => {
  /** Two queues led by different nodes, as [leader id, queue name] pairs. */
  async function twoQueuesLedApart(prefix: string): Promise<[[string, string], [string, string]]> {
    const byLeader = new Map<string, string>();
    for (let i = 0; byLeader.size < 2 && i < 12; i++) {
      await client.declareQueue(`${prefix}-${i}`);
      byLeader.set(await cluster.leaderOf(`${prefix}-${i}`, client), `${prefix}-${i}`);
    }
    expect(byLeader.size).toBe(2);
    return [...byLeader.entries()] as [[string, string], [string, string]];
  }

  it("moves to the queue's leader when the node it opened at forwards, in order and without loss", async () => {
    await client.declareQueue('routed');
    const leader = await cluster.leaderOf('routed', client);
    const leaderAddress = cluster.nodes.find((n) => n.id === leader)!.address;
    // A fresh client whose first node is not the leader, and that has asked nothing yet.
    const others = cluster.addresses.filter((a) => a !== leaderAddress);
    const fresh = cluster.client({ nodes: [...others, leaderAddress] });
    const publisher = fresh.createPublisher({ maxInFlight: 16 });
    expect((await publisher.publish('routed', 'm0')).outcome).toBe('confirmed');
    // The first publish was forwarded, and its outcome named the leader.
    expect(fresh.leaderOf('routed')).toBe(leaderAddress);
    const results = await Promise.all(Array.from({ length: 200 }, (_, i) => publisher.publish('routed', `m${i + 1}`)));
    expect(results.every((r) => r.outcome === 'confirmed')).toBe(true);
    expect(publisher.node).toBe(leaderAddress);
    await publisher.close();
    const bodies: string[] = [];
    for (let i = 0; i < 201; i++) {
      const got = await client.get('routed');
      expect(got).not.toBeNull();
      bodies.push(got!.body.toString());
    }
    expect(bodies).toEqual(Array.from({ length: 201 }, (_, i) => `m${i}`));
    expect(await client.get('routed')).toBeNull();
    await fresh.close();
  });

  it("opens at the queue's leader when a declare or a purge named it: no publish is forwarded", async () => {
    await client.declareQueue('named');
    const leader = await cluster.leaderOf('named', client);
    const leaderAddress = cluster.nodes.find((n) => n.id === leader)!.address;
    const others = cluster.addresses.filter((a) => a !== leaderAddress);
    for (const learn of ['declare', 'purge'] as const) {
      // A fresh client whose first node is not the leader.
      const fresh = cluster.client({ nodes: [...others, leaderAddress] });
      if (learn === 'declare') await fresh.declareQueue('named');
      else await fresh.purgeQueue('named');
      expect(fresh.leaderOf('named')).toBe(leaderAddress);
      const publisher = fresh.createPublisher({ maxInFlight: 16 });
      const results = await Promise.all(Array.from({ length: 32 }, (_, i) => publisher.publish('named', `${learn}${i}`)));
      expect(results.every((r) => r.outcome === 'confirmed')).toBe(true);
      // Its stream opened at the leader (a forwarded publish's outcome would have moved it there too, later).
      expect(publisher.node).toBe(leaderAddress);
      await publisher.close();
      await fresh.close();
    }
  });

  it("follows the next queue's leader when it goes on from one queue to another, in order and without loss", async () => {
    const [[leaderA, queueA], [leaderB, queueB]] = await twoQueuesLedApart('onward');
    const addressOf = (id: string): string => cluster.nodes.find((n) => n.id === id)!.address;
    const fresh = cluster.client({ nodes: cluster.addresses });
    const publisher = fresh.createPublisher({ maxInFlight: 8 });
    for (let i = 0; i < 40; i++) expect((await publisher.publish(queueA, `a${i}`)).outcome).toBe('confirmed');
    expect(publisher.node).toBe(addressOf(leaderA));
    // Then only queue B: the stream carried A, so it follows B after 64 of them in a row (FOLLOW_AFTER_IN_A_ROW).
    const results = await Promise.all(Array.from({ length: 200 }, (_, i) => publisher.publish(queueB, `b${i}`)));
    expect(results.every((r) => r.outcome === 'confirmed')).toBe(true);
    expect(publisher.node).toBe(addressOf(leaderB));
    await publisher.close();
    const bodies: string[] = [];
    for (let got = await client.get(queueB); got !== null; got = await client.get(queueB)) bodies.push(got.body.toString());
    expect(bodies).toEqual(Array.from({ length: 200 }, (_, i) => `b${i}`));
    await fresh.close();
  });

  it('stays where it is when its publishes go to queues with different leaders', async () => {
    const [[, queueA], [, queueB]] = await twoQueuesLedApart('spread');
    const fresh = cluster.client({ nodes: cluster.addresses });
    const first = fresh.createPublisher({ maxInFlight: 8 });
    const opened: string[] = [];
    for (let i = 0; i < 20; i++) {
      await Promise.all([first.publish(queueA, `a${i}`), first.publish(queueB, `b${i}`)]);
      opened.push(first.node);
    }
    expect(new Set(opened).size).toBe(1);
    await first.close();
    await fresh.close();
  });
});
