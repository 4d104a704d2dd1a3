/**
 * End to end against three real node processes: what one request may expand into is bounded
 * (issue 12 item 5), bytes that are not a request are the client's fault (item 6), a body
 * over max_message_bytes is the outcome REJECTED on both publish paths (item 7), and a
 * publish batch larger than one Raft entry confirms every publish (item 16).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, credentials, status as grpcStatus, type ClientReadableStream, type ServiceError, type StatusObject } from '@grpc/grpc-js';
import { QuorumqError, type QuorumqClient } from '@quorumq/client';
import { BrokerService, quorumq } from '@quorumq/proto';

import { TestCluster } from './cluster.js';

import pb = quorumq.v1;

let cluster: TestCluster;
let client: QuorumqClient;
let raw: Client;

beforeAll(async () => {
  cluster = await TestCluster.start();
  client = cluster.client();
  raw = new Client(cluster.addresses[0] ?? '', credentials.createInsecure());
});

afterAll(async () => {
  raw?.close();
  await cluster?.close();
});

const identity = (bytes: Buffer): Buffer => bytes;

/** Sends `bytes` as the request of a unary method; the status it ends with. */
function unaryStatus(path: string, bytes: Buffer): Promise<Partial<ServiceError>> {
  return new Promise((resolve) => {
    raw.makeUnaryRequest(path, identity, identity, bytes, (error: ServiceError | null) => resolve(error ?? { code: grpcStatus.OK }));
  });
}

/** Sends `messages` on a client stream (then half-closes); the messages it got back and its status. */
function streamExchange(path: string, messages: Buffer[], requestStream = true): Promise<{ responses: Buffer[]; status: StatusObject }> {
  return new Promise((resolve) => {
    const responses: Buffer[] = [];
    const listen = (call: ClientReadableStream<Buffer>): void => {
      call.on('data', (response: Buffer) => responses.push(response));
      call.on('error', () => undefined);
      call.on('status', (status: StatusObject) => resolve({ responses, status }));
    };
    if (!requestStream) {
      listen(raw.makeServerStreamRequest(path, identity, identity, messages[0] ?? Buffer.alloc(0)));
      return;
    }
    const call = raw.makeBidiStreamRequest(path, identity, identity);
    listen(call);
    for (const message of messages) call.write(message);
    call.end();
  });
}

/** A PublishBatch of `count` tiny publishes to `queue`, written by hand (no objects per publish). */
function tinyBatch(queue: string, count: number): Buffer {
  const name = Buffer.from(queue);
  // PublishRequest { message: Message { body: "x", routing_key: queue } }
  const message = Buffer.concat([Buffer.from([0x0a, 0x01, 0x78, 0x12, name.length]), name]);
  const publish = Buffer.concat([Buffer.from([0x1a, message.length]), message]);
  const element = Buffer.concat([Buffer.from([0x0a, publish.length]), publish]);
  const batch = Buffer.allocUnsafe(element.length * count);
  for (let i = 0; i < count; i++) element.copy(batch, i * element.length);
  return batch;
}

const reasonOf = (status: Partial<StatusObject>): unknown => status.metadata?.get('quorumq-reason')[0];

describe('item 6: a request that cannot be read is INVALID_ARGUMENT, on every Broker method', () => {
  // A length prefix far past the end, and a field of wire type 7 (no such type).
  const garbage = [Buffer.from([0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x01, 0x02]), Buffer.from([0x0f, 0x01, 0x02, 0x03])];

  it('unary and server-streaming methods answer INVALID_ARGUMENT with a message', async () => {
    const methods = Object.values(BrokerService).filter((m) => !m.requestStream);
    expect(methods.length).toBeGreaterThan(10);
    for (const method of methods) {
      for (const bytes of garbage) {
        const status = method.responseStream ? (await streamExchange(method.path, [bytes], false)).status : await unaryStatus(method.path, bytes);
        expect({ path: method.path, code: status.code }).toEqual({ path: method.path, code: grpcStatus.INVALID_ARGUMENT });
        expect(status.details).toContain('malformed');
        expect(reasonOf(status)).toBe('MALFORMED_REQUEST');
      }
    }
  });

  it('client-streaming methods (PublishStream, Consume) end with INVALID_ARGUMENT', async () => {
    for (const method of [BrokerService.publishStream, BrokerService.consume]) {
      for (const bytes of garbage) {
        const { status } = await streamExchange(method.path, [bytes]);
        expect({ path: method.path, code: status.code }).toEqual({ path: method.path, code: grpcStatus.INVALID_ARGUMENT });
        expect(status.details).toContain('malformed');
      }
    }
    await client.declareQueue('after-garbage');
    expect((await client.publish('', 'after-garbage', 'fine')).outcome).toBe('confirmed');
  });
});

describe('item 5: what one request may expand into is bounded', () => {
  it('a PublishBatch of 1,000,000 tiny publishes is refused whole with RESOURCE_EXHAUSTED, and the node keeps serving', async () => {
    await client.declareQueue('amplified');
    const { responses, status } = await streamExchange(BrokerService.publishStream.path, [tinyBatch('amplified', 1_000_000)]);
    expect(status.code).toBe(grpcStatus.RESOURCE_EXHAUSTED);
    expect(reasonOf(status)).toBe('BATCH_TOO_LARGE');
    expect(status.details).toContain('max_publishes_per_batch (10000)');
    expect(responses).toEqual([]);
    expect((await client.queueStatus('amplified')).ready).toBe(0);
    expect((await client.publish('', 'amplified', 'after')).outcome).toBe('confirmed');
    expect((await client.queueStatus('amplified')).ready).toBe(1);
  });

  it('a refused batch ends the stream only after the outcomes of the publishes before it', async () => {
    await client.declareQueue('before-refusal');
    const first = BrokerService.publishStream.requestSerialize({
      publishes: [1, 2, 3].map((publishId) => ({ publishId, message: { body: Buffer.from(`m${publishId}`), routingKey: 'before-refusal' } })),
    });
    const { responses, status } = await streamExchange(BrokerService.publishStream.path, [first, tinyBatch('before-refusal', 10_001)]);
    expect(status.code).toBe(grpcStatus.RESOURCE_EXHAUSTED);
    const outcomes = responses.flatMap((r) => pb.PublishOutcomes.decode(r).outcomes);
    expect(outcomes.map((o) => [Number(o.publishId), o.outcome]).sort()).toEqual([1, 2, 3].map((id) => [id, pb.PublishOutcome.PUBLISH_OUTCOME_CONFIRMED]));
    expect((await client.queueStatus('before-refusal')).ready).toBe(3);
  });

  it('headers: too many values, too deep, too many bytes are refused with RESOURCE_EXHAUSTED naming the limit', async () => {
    await client.declareQueue('headers-bounded');
    const many = Object.fromEntries(Array.from({ length: 1_025 }, (_, i) => [`h${i}`, i]));
    await expectError(client.publish('', 'headers-bounded', 'x', { headers: many }), 'RESOURCE_EXHAUSTED', 'TOO_MANY_HEADERS');
    const nestedList = { deep: [[[[[[[[[['too deep']]]]]]]]]] };
    await expectError(client.publish('', 'headers-bounded', 'x', { headers: nestedList }), 'RESOURCE_EXHAUSTED', 'HEADERS_TOO_DEEP');
    const nestedMap = { a: { b: { c: { d: { e: { f: { g: { h: { i: { j: 'too deep' } } } } } } } } } };
    await expectError(client.publish('', 'headers-bounded', 'x', { headers: nestedMap }), 'RESOURCE_EXHAUSTED', 'HEADERS_TOO_DEEP');
    const wide = { ['k'.repeat(1024 * 1024)]: 'v' };
    await expectError(client.publish('', 'headers-bounded', 'x', { headers: wide }), 'RESOURCE_EXHAUSTED', 'HEADERS_TOO_LARGE');
    // A list of 1,025 values counts each of them.
    await expectError(client.publish('', 'headers-bounded', 'x', { headers: { list: Array.from({ length: 1_025 }, (_, i) => i) } }), 'RESOURCE_EXHAUSTED', 'TOO_MANY_HEADERS');
    // Within the limits, all of it is kept.
    const fits = { ...Object.fromEntries(Array.from({ length: 1_000 }, (_, i) => [`h${i}`, i])), deep: [[[[[[['ok']]]]]]] };
    expect((await client.publish('', 'headers-bounded', 'x', { headers: fits })).outcome).toBe('confirmed');
    const got = await client.get('headers-bounded');
    expect(got?.headers).toEqual(fits);
    expect((await client.queueStatus('headers-bounded')).ready).toBe(0);
  });

  it('a stream publish whose headers break a limit refuses its batch', async () => {
    await client.declareQueue('stream-headers');
    const publisher = client.createPublisher();
    const many = Object.fromEntries(Array.from({ length: 2_000 }, (_, i) => [`h${i}`, i]));
    await expectError(publisher.publish('stream-headers', 'x', { headers: many }), 'RESOURCE_EXHAUSTED', 'TOO_MANY_HEADERS');
    publisher.destroy();
    expect((await client.publish('', 'stream-headers', 'after')).outcome).toBe('confirmed');
  });

  it('a consume message of more settles than max_settles_per_request ends the stream with RESOURCE_EXHAUSTED', async () => {
    await client.declareQueue('settles-bounded');
    const subscribe = BrokerService.consume.requestSerialize({ subscribe: { queue: 'settles-bounded' } });
    const settles = BrokerService.consume.requestSerialize({
      settles: { settles: Array.from({ length: 10_001 }, (_, i) => ({ deliveryTag: i + 1, kind: pb.SettleKind.SETTLE_KIND_ACK })) },
    });
    const leader = await cluster.leaderOf('settles-bounded', client);
    const node = new Client(cluster.nodes.find((n) => n.id === leader)!.address, credentials.createInsecure());
    const status = await new Promise<StatusObject>((resolve) => {
      const call = node.makeBidiStreamRequest(BrokerService.consume.path, identity, identity);
      call.on('data', () => undefined);
      call.on('error', () => undefined);
      call.on('status', resolve);
      call.write(subscribe);
      setTimeout(() => call.write(settles), 200);
    });
    node.close();
    expect(status.code).toBe(grpcStatus.RESOURCE_EXHAUSTED);
    expect(status.details).toContain('max_settles_per_request (10000)');
    // The consumer left with its stream.
    for (let i = 0; i < 50 && (await client.queueStatus('settles-bounded')).consumers !== 0; i++) await new Promise((r) => setTimeout(r, 100));
    expect((await client.queueStatus('settles-bounded')).consumers).toBe(0);
  });

  it('binding arguments are bounded like headers', async () => {
    await client.declareExchange('bounded.headers', 'headers');
    await client.declareQueue('bound-args');
    const many = Object.fromEntries(Array.from({ length: 1_025 }, (_, i) => [`a${i}`, i]));
    await expectError(client.bind({ source: 'bounded.headers', queue: 'bound-args', bindingKey: '', arguments: many }), 'RESOURCE_EXHAUSTED', 'TOO_MANY_HEADERS');
  });
});

describe('item 7: a body over max_message_bytes is the outcome REJECTED (spec 2), on both paths', () => {
  const body = Buffer.alloc(16 * 1024 * 1024 + 1, 1);

  it('unary Publish', async () => {
    await client.declareQueue('too-large-unary');
    const result = await client.publish('', 'too-large-unary', body);
    expect(result.outcome).toBe('rejected');
    expect(result.reason).toContain('max_message_bytes (16777216)');
    expect(result.queues).toEqual([]);
    expect((await client.queueStatus('too-large-unary')).ready).toBe(0);
    expect((await client.publish('', 'too-large-unary', 'small')).outcome).toBe('confirmed');
  });

  it('PublishStream', async () => {
    await client.declareQueue('too-large-stream');
    const publisher = client.createPublisher();
    const [large, small] = await Promise.all([publisher.publish('too-large-stream', body), publisher.publish('too-large-stream', 'small')]);
    await publisher.close();
    expect(large?.outcome).toBe('rejected');
    expect(large?.reason).toContain('max_message_bytes (16777216)');
    expect(small?.outcome).toBe('confirmed');
    expect((await client.queueStatus('too-large-stream')).ready).toBe(1);
  });
});

describe('item 16: a batch larger than one Raft entry confirms every publish', () => {
  it('one PublishBatch of 10,000 publishes (more than the 4,096 commands of an entry): every outcome CONFIRMED', async () => {
    await client.declareQueue('big-batch');
    const leader = await cluster.leaderOf('big-batch', client);
    for (const address of [cluster.nodes.find((n) => n.id === leader)!.address, cluster.nodes.find((n) => n.id !== leader)!.address]) {
      const node = new Client(address, credentials.createInsecure());
      const before = (await client.queueStatus('big-batch')).ready;
      const outcomes = await new Promise<{ outcomes: pb.PublishResponse.$Properties[]; status: StatusObject }>((resolve) => {
        const got: pb.PublishResponse.$Properties[] = [];
        const call = node.makeBidiStreamRequest(BrokerService.publishStream.path, BrokerService.publishStream.requestSerialize, BrokerService.publishStream.responseDeserialize);
        call.on('data', (response: pb.PublishOutcomes) => got.push(...response.outcomes));
        call.on('error', () => undefined);
        call.on('status', (status: StatusObject) => resolve({ outcomes: got, status }));
        call.write({ publishes: Array.from({ length: 10_000 }, (_, i) => ({ publishId: i + 1, message: { body: Buffer.from(`m${i}`), routingKey: 'big-batch' } })) });
        call.end();
      });
      node.close();
      expect(outcomes.status.code).toBe(grpcStatus.OK);
      expect(outcomes.outcomes).toHaveLength(10_000);
      expect(outcomes.outcomes.filter((o) => o.outcome !== pb.PublishOutcome.PUBLISH_OUTCOME_CONFIRMED).map((o) => o.reason).slice(0, 3)).toEqual([]);
      expect(new Set(outcomes.outcomes.map((o) => Number(o.publishId))).size).toBe(10_000);
      expect((await client.queueStatus('big-batch')).ready).toBe(before + 10_000);
    }
  });

  it('a PublishBatch of 100,000 publishes is refused at once with a clear status, none left to time out', async () => {
    await client.declareQueue('huge-batch');
    const { responses, status } = await streamExchange(BrokerService.publishStream.path, [tinyBatch('huge-batch', 100_000)]);
    expect(status.code).toBe(grpcStatus.RESOURCE_EXHAUSTED);
    expect(reasonOf(status)).toBe('BATCH_TOO_LARGE');
    expect(status.details).toContain('a publish batch of 100000 publishes exceeds max_publishes_per_batch (10000)');
    expect(responses).toEqual([]);
    expect((await client.queueStatus('huge-batch')).ready).toBe(0);
  });

  it('a publisher with more in flight than a batch may hold splits its batches: all confirmed', async () => {
    await client.declareQueue('sdk-split');
    const publisher = client.createPublisher({ maxInFlight: 25_000 });
    const results = await Promise.all(Array.from({ length: 25_000 }, (_, i) => publisher.publish('sdk-split', `m${i}`)));
    await publisher.close();
    expect(results.filter((r) => r.outcome !== 'confirmed')).toEqual([]);
    expect((await client.queueStatus('sdk-split')).ready).toBe(25_000);
  });
});

async function expectError(promise: Promise<unknown>, code: string, reason: string): Promise<void> {
  const error = await promise.then(
    () => null,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(QuorumqError);
  expect({ code: (error as QuorumqError).code, reason: (error as QuorumqError).reason }).toEqual({ code, reason });
  expect((error as QuorumqError).message.length).toBeGreaterThan(10);
}
