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
