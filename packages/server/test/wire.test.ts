import { quorumq } from '@quorumq/proto';
import type { Command } from '@quorumq/queue';
import { describe, expect, it } from 'vitest';

import { DEFAULTS } from '../src/config.js';
import { BrokerError, Status } from '../src/errors.js';

import {
  decodePublishBatch,
  decodePublishRequest,
  decodeQueueEntry,
  decodeQueueSnapshot,
  encodeConsumeResponse,
  encodePublishOutcomes,
  encodeQueueBatch,
  encodeQueueEntry,
  encodeQueueSnapshot,
  rawMessageOf,
  stampEntry,
  type DecodedCommand,
  type EntryCommand,
} from '../src/wire.js';

import pb = quorumq.v1;

const message: pb.Message.$Properties = {
  body: Buffer.from('hello, queue'),
  routingKey: 'orders.eu',
  properties: { contentType: 'text/plain', priority: 3, expirationMs: 60_000 },
  headers: { tenant: { stringValue: 'acme' }, attempt: { intValue: 2 } },
};
const encodedMessage = Buffer.from(pb.Message.encode(message).finish());
const command: Command = { type: 'enqueue', sizeBytes: 12, exchange: 'orders', routingKeys: ['orders.eu'], priority: 3 };

/** The entry as the generated protobuf code writes it (the format before wire.ts). */
function generatedEntry(now: number, cmd: Command, msg: pb.Message.$Properties | null): Buffer {
  const body = pb.QueueEntry.encode({ command: JSON.stringify(cmd), message: msg }).finish();
  const out = Buffer.alloc(8 + body.length);
  out.writeDoubleLE(now, 0);
  out.set(body, 8);
  return out;
}

/** The only command of a plain entry. */
function single(data: Uint8Array): DecodedCommand & { now: number } {
  const decoded = decodeQueueEntry(data);
  expect(decoded.batch).toBe(false);
  expect(decoded.commands).toHaveLength(1);
  return { ...decoded.commands[0]!, now: decoded.now };
}

describe('queue entries', () => {
  it('carry an encoded message byte for byte, and decode to the same command and clock', () => {
    const data = encodeQueueEntry(command, encodedMessage, 1_700_000_000_123);
    const decoded = single(data);
    expect(decoded.now).toBe(1_700_000_000_123);
    expect(decoded.command).toEqual(command);
    expect(Buffer.from(decoded.message ?? [])).toEqual(encodedMessage);
  });

  it('are what the generated QueueEntry code writes, both ways', () => {
    const ours = encodeQueueEntry(command, message, 42);
    expect(Buffer.from(ours)).toEqual(generatedEntry(42, command, message));
    const theirs = pb.QueueEntry.decode(ours.subarray(8));
    expect(JSON.parse(theirs.command)).toEqual(command);
    expect(theirs.message?.routingKey).toBe('orders.eu');
    expect(theirs.message?.headers?.['tenant']?.stringValue).toBe('acme');
    // An entry written by the generated code (an existing log) still decodes.
    const old = single(generatedEntry(7, command, message));
    expect(old.now).toBe(7);
    expect(pb.Message.decode(old.message ?? new Uint8Array(0)).properties?.priority).toBe(3);
  });

  it('without a message, and with a multi-byte length and non-ASCII command', () => {
    const settle: Command = { type: 'ack', consumerId: `n1/ü-${'c'.repeat(200)}`, deliveryTag: 2 ** 40, multiple: true };
    const decoded = single(encodeQueueEntry(settle, null, 5));
    expect(decoded.command).toEqual(settle);
    expect(decoded.message).toBeNull();
    const big = Buffer.alloc(300_000, 7);
    const withBig = single(encodeQueueEntry(command, pb.Message.encode({ body: big }).finish(), 0));
    expect(Buffer.from(pb.Message.decode(withBig.message ?? new Uint8Array(0)).body ?? [])).toEqual(big);
  });

  it('stampEntry rewrites the clock in place', () => {
    const data = encodeQueueEntry(command, encodedMessage, 0);
    stampEntry(data, 99.5);
    expect(single(data).now).toBe(99.5);
    // A copy (not the buffer this node encoded) parses its command.
    expect(single(Buffer.from(data)).command).toEqual(command);
  });

  it('malformed bytes throw instead of decoding to something', () => {
    expect(() => decodeQueueEntry(new Uint8Array(3))).toThrow(/too short/);
    expect(() => decodeQueueEntry(Buffer.concat([Buffer.alloc(8), Buffer.from([0x1a, 0x05, 1])]))).toThrow();
    expect(() => decodeQueueEntry(Buffer.alloc(8))).toThrow(/without a command/);
  });
});

describe('batch entries', () => {
  const settle: Command = { type: 'ack', consumerId: 'n1/c-1', deliveryTag: 3, multiple: false };
  const other = Buffer.from(pb.Message.encode({ body: Buffer.alloc(2000, 9), routingKey: 'q' }).finish());
  const commands: EntryCommand[] = [
    { command, message: encodedMessage },
    { command: settle, message: null },
    { command: { ...command, routingKeys: ['ü'] }, message: other },
    { command, message },
  ];

  it('hold every command in order, with its message byte for byte, under one clock', () => {
    for (const data of [encodeQueueBatch(commands, 77), Buffer.from(encodeQueueBatch(commands, 77))]) {
      // The buffer this node encoded skips the JSON; a copy (a follower's) parses it.
      const decoded = decodeQueueEntry(data);
      expect(decoded.batch).toBe(true);
      expect(decoded.now).toBe(77);
      expect(decoded.commands.map((c) => c.command)).toEqual([command, settle, { ...command, routingKeys: ['ü'] }, command]);
      expect(Buffer.from(decoded.commands[0]!.message ?? [])).toEqual(encodedMessage);
      expect(decoded.commands[1]!.message).toBeNull();
      expect(Buffer.from(decoded.commands[2]!.message ?? [])).toEqual(other);
      expect(pb.Message.decode(decoded.commands[3]!.message ?? new Uint8Array(0)).headers?.['tenant']?.stringValue).toBe('acme');
    }
  });

  it('are what the generated code writes for QueueEntry { batch }', () => {
    const generated = pb.QueueEntry.encode({
      batch: commands.map((c) => ({ command: JSON.stringify(c.command), message: c.message instanceof Uint8Array ? pb.Message.decode(c.message) : c.message })),
    }).finish();
    expect(Buffer.from(encodeQueueBatch(commands, 0)).subarray(8)).toEqual(Buffer.from(generated));
    // An entry the generated code wrote decodes too.
    const prefixed = Buffer.concat([Buffer.alloc(8), generated]);
    expect(decodeQueueEntry(prefixed).commands.map((c) => c.command.type)).toEqual(['enqueue', 'ack', 'enqueue', 'enqueue']);
  });

  it('refuse a batch inside a batch, stray fields and truncated elements', () => {
    const inner = encodeQueueBatch([commands[1]!], 0).subarray(8);
    expect(inner.length).toBeLessThan(128);
    const nested = Buffer.concat([Buffer.alloc(8), Buffer.from([0x22, inner.length]), inner]);
    expect(() => decodeQueueEntry(nested)).toThrow(/holds a batch/);
    const stray = Buffer.concat([Buffer.from(encodeQueueBatch(commands.slice(1, 2), 0)), Buffer.from([0x12, 0x02, 0x7b, 0x7d])]);
    expect(() => decodeQueueEntry(stray)).toThrow(/other than its batch/);
    const whole = Buffer.from(encodeQueueBatch(commands, 0));
    expect(() => decodeQueueEntry(whole.subarray(0, whole.length - 10))).toThrow();
  });
});

describe('queue snapshots', () => {
  it('round-trip ids and message bytes, readable by the generated QueueSnapshot code', () => {
    const machine = Buffer.from([1, 2, 3, 4]);
    const other = Buffer.from(pb.Message.encode({ body: Buffer.from('second') }).finish());
    const data = encodeQueueSnapshot(machine, [
      [17, encodedMessage],
      [2 ** 40, other],
    ]);
    const ours = decodeQueueSnapshot(data);
    expect(Buffer.from(ours.machine)).toEqual(machine);
    expect([...ours.messages.keys()]).toEqual([17, 2 ** 40]);
    expect(Buffer.from(ours.messages.get(17) ?? [])).toEqual(encodedMessage);
    const theirs = pb.QueueSnapshot.decode(data);
    expect(theirs.messages.map((m) => m.id)).toEqual([17, 2 ** 40]);
    expect(theirs.messages[1]?.message?.body?.toString()).toBe('second');
    // And a snapshot written by the generated code reads back.
    const generated = pb.QueueSnapshot.encode({ machine, messages: [{ id: 3, message }] }).finish();
    expect(pb.Message.decode(decodeQueueSnapshot(generated).messages.get(3) ?? new Uint8Array(0)).routingKey).toBe('orders.eu');
  });

  it('restored messages do not share the snapshot buffer', () => {
    const data = Buffer.from(encodeQueueSnapshot(new Uint8Array(0), [[1, encodedMessage]]));
    const restored = decodeQueueSnapshot(data);
    data.fill(0);
    expect(Buffer.from(restored.messages.get(1) ?? [])).toEqual(encodedMessage);
  });
});

describe('publish requests keep the client bytes', () => {
  it('a batch: each request decodes as the generated code does, and its message bytes are kept', () => {
    const requests: pb.PublishRequest.$Properties[] = [
      { publishId: 1, exchange: 'orders', message, mandatory: true },
      { publishId: 2, exchange: '', message: { body: Buffer.from('x'), routingKey: 'q' }, producerId: 'p', sequence: 9 },
      { publishId: 2 ** 40, exchange: 'обмен', producerId: 'p', sequence: 0 },
      { publishId: 0, message: {} },
    ];
    // A field this version does not know (15, varint) inside the last request is skipped.
    const encoded = pb.PublishBatch.encode({ publishes: requests }).finish();
    expect(Buffer.from(encoded.subarray(encoded.length - 4))).toEqual(Buffer.from([0x0a, 0x02, 0x1a, 0x00]));
    const bytes = Buffer.concat([encoded.subarray(0, encoded.length - 4), Buffer.from([0x0a, 0x04, 0x1a, 0x00, 0x78, 0x01])]);
    const batch = decodePublishBatch(bytes);
    const plain = (p: pb.PublishRequest.$Properties): Record<string, unknown> => pb.PublishRequest.toObject(p as pb.PublishRequest);
    expect(batch.publishes.map(plain)).toEqual(pb.PublishBatch.decode(bytes).publishes.map(plain));
    const first = batch.publishes[0]?.message;
    expect(first).toBeTruthy();
    expect(Buffer.from(rawMessageOf(first ?? {}) ?? [])).toEqual(encodedMessage);
    expect(pb.Message.decode(rawMessageOf(batch.publishes[1]?.message ?? {}) ?? new Uint8Array(0)).routingKey).toBe('q');
  });

  it('a message field sent twice (protobuf merges them) is not taken as the bytes of the message', () => {
    const one = pb.PublishRequest.encode({ publishId: 1, message: { body: Buffer.from('a') } }).finish();
    const two = pb.PublishRequest.encode({ message: { routingKey: 'k' } }).finish();
    const request = decodePublishRequest(Buffer.concat([one, two]));
    expect(request.message?.routingKey).toBe('k');
    expect(request.message?.body?.toString()).toBe('a');
    expect(rawMessageOf(request.message ?? {})).toBeUndefined();
  });

  it('a unary publish keeps its bytes; a request without a message has none', () => {
    const request = decodePublishRequest(Buffer.from(pb.PublishRequest.encode({ publishId: 4, message }).finish()));
    expect(Buffer.from(rawMessageOf(request.message ?? {}) ?? [])).toEqual(encodedMessage);
    expect(decodePublishRequest(Buffer.from(pb.PublishRequest.encode({ publishId: 5 }).finish())).message).toBeNull();
    expect(() => decodePublishBatch(Buffer.from([0x0a, 0x09, 0x01]))).toThrow();
  });
});

describe('publish requests are bounded before they are decoded (issue 12 item 5)', () => {
  const limits = { ...DEFAULTS, maxPublishesPerBatch: 100, maxHeadersPerMessage: 10, maxHeaderDepth: 2, maxHeaderBytes: 1000 };
  const publishOf = (headers: Record<string, pb.HeaderValue.$Properties>): pb.PublishRequest.$Properties => ({ message: { body: Buffer.from('x'), headers } });
  const refusal = (decode: () => unknown): { code: Status; reason: string } | null => {
    try {
      decode();
      return null;
    } catch (error) {
      expect(error).toBeInstanceOf(BrokerError);
      return { code: (error as BrokerError).code, reason: (error as BrokerError).reason };
    }
  };
  const exhausted = (reason: string) => ({ code: Status.RESOURCE_EXHAUSTED, reason });
  const unary = (publish: pb.PublishRequest.$Properties) => () => decodePublishRequest(Buffer.from(pb.PublishRequest.encode(publish).finish()), limits);
  const batch = (publishes: pb.PublishRequest.$Properties[]) => () => decodePublishBatch(Buffer.from(pb.PublishBatch.encode({ publishes }).finish()), limits);
  const flat = (n: number) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`h${i}`, { intValue: i }]));
  const list = (depth: number): pb.HeaderValue.$Properties => (depth === 0 ? { stringValue: 'leaf' } : { listValue: { values: [list(depth - 1)] } });
  const table = (depth: number): pb.HeaderValue.$Properties => (depth === 0 ? { boolValue: true } : { mapValue: { entries: { k: table(depth - 1) } } });

  it('a batch of more than maxPublishesPerBatch publishes is refused whole', () => {
    expect(refusal(batch(Array.from({ length: 100 }, () => publishOf({}))))).toBeNull();
    expect(refusal(batch(Array.from({ length: 101 }, () => publishOf({}))))).toEqual(exhausted('BATCH_TOO_LARGE'));
  });

  it('header values are counted at any depth, death records and their routing keys too', () => {
    expect(refusal(unary(publishOf(flat(10))))).toBeNull();
    expect(refusal(unary(publishOf(flat(11))))).toEqual(exhausted('TOO_MANY_HEADERS'));
    // One header holding a list of 10 values: 11.
    const values = Array.from({ length: 10 }, (_, i) => ({ intValue: i }));
    expect(refusal(unary(publishOf({ l: { listValue: { values } } })))).toEqual(exhausted('TOO_MANY_HEADERS'));
    expect(refusal(unary(publishOf({ m: { mapValue: { entries: flat(10) } } })))).toEqual(exhausted('TOO_MANY_HEADERS'));
    const deaths = [{ queue: 'q', reason: 'rejected', routingKeys: Array.from({ length: 9 }, (_, i) => `k${i}`) }];
    expect(refusal(unary({ message: { body: Buffer.from('x'), deaths } }))).toBeNull();
    expect(refusal(unary({ message: { body: Buffer.from('x'), deaths, headers: flat(1) } }))).toEqual(exhausted('TOO_MANY_HEADERS'));
    expect(refusal(batch([publishOf({}), publishOf(flat(11))]))).toEqual(exhausted('TOO_MANY_HEADERS'));
  });

  it('tables and arrays nest at most maxHeaderDepth deep', () => {
    expect(refusal(unary(publishOf({ l: list(2), t: table(2) })))).toBeNull();
    expect(refusal(unary(publishOf({ l: list(3) })))).toEqual(exhausted('HEADERS_TOO_DEEP'));
    expect(refusal(unary(publishOf({ t: table(3) })))).toEqual(exhausted('HEADERS_TOO_DEEP'));
  });

  it('headers take at most maxHeaderBytes', () => {
    expect(refusal(unary(publishOf({ k: { stringValue: 'v'.repeat(900) } })))).toBeNull();
    expect(refusal(unary(publishOf({ ['k'.repeat(1000)]: { stringValue: 'v' } })))).toEqual(exhausted('HEADERS_TOO_LARGE'));
  });

  it('a message field sent twice is checked each time', () => {
    const one = Buffer.from(pb.PublishRequest.encode(publishOf(flat(2))).finish());
    const two = Buffer.from(pb.PublishRequest.encode(publishOf(flat(11))).finish());
    expect(refusal(() => decodePublishRequest(Buffer.concat([one, two]), limits))).toEqual(exhausted('TOO_MANY_HEADERS'));
  });

  it('within the limits, requests decode as before', () => {
    const publish = publishOf({ l: list(2), t: table(2), ...flat(3) });
    const decoded = decodePublishRequest(Buffer.from(pb.PublishRequest.encode(publish).finish()), limits);
    expect(pb.PublishRequest.toObject(decoded)).toEqual(pb.PublishRequest.toObject(pb.PublishRequest.decode(pb.PublishRequest.encode(publish).finish())));
  });
});

describe('consume responses', () => {
  const fields = { queue: 'q', consumerTag: 'c1', deliveryTag: 7, deliveryCount: 1, redelivered: false, exchange: 'orders', routingKeys: ['orders.eu'] };

  it('a delivery with stored bytes decodes as if the message had been encoded', () => {
    const single = pb.ConsumeResponse.decode(encodeConsumeResponse({ delivery: { ...fields, encodedMessage } as pb.Delivery.$Properties }));
    const expected = pb.ConsumeResponse.decode(pb.ConsumeResponse.encode({ delivery: { ...fields, message } }).finish());
    expect(pb.ConsumeResponse.toObject(single)).toEqual(pb.ConsumeResponse.toObject(expected));
  });

  it('a batch mixes stored bytes and decoded messages, in order', () => {
    const withDeaths = { ...message, headers: { 'x-first-death-reason': { stringValue: 'rejected' } } };
    const bytes = encodeConsumeResponse({
      deliveries: {
        deliveries: [{ ...fields, encodedMessage } as pb.Delivery.$Properties, { ...fields, deliveryTag: 8, message: withDeaths }],
      },
    });
    const decoded = pb.ConsumeResponse.decode(bytes);
    expect(decoded.response).toBe('deliveries');
    const [a, b] = decoded.deliveries?.deliveries ?? [];
    expect(a?.deliveryTag).toBe(7);
    expect(a?.message?.headers?.['tenant']?.stringValue).toBe('acme');
    expect(b?.deliveryTag).toBe(8);
    expect(b?.message?.headers?.['x-first-death-reason']?.stringValue).toBe('rejected');
  });

  it('is byte for byte what the generated code writes, with or without optional fields', () => {
    const variants = [
      fields,
      { ...fields, deliveryTag: 0, deliveryCount: 0, redelivered: true, exchange: '', routingKeys: ['', 'ключ'] },
      { ...fields, queue: 'очередь', consumerTag: '', deliveryTag: 2 ** 50, routingKeys: [] },
    ];
    for (const variant of variants) {
      const ours = encodeConsumeResponse({ deliveries: { deliveries: [{ ...variant, encodedMessage } as pb.Delivery.$Properties] } });
      const theirs = pb.ConsumeResponse.encode({ deliveries: { deliveries: [{ ...variant, message }] } }).finish();
      expect(ours).toEqual(Buffer.from(theirs));
      const single = encodeConsumeResponse({ delivery: { ...variant, encodedMessage } as pb.Delivery.$Properties });
      expect(single).toEqual(Buffer.from(pb.ConsumeResponse.encode({ delivery: { ...variant, message } }).finish()));
    }
  });

  it('other responses encode as the generated code does', () => {
    const subscribed = { subscribed: { consumerTag: 'c1', queue: 'q', leader: 'n2' } };
    expect(encodeConsumeResponse(subscribed)).toEqual(Buffer.from(pb.ConsumeResponse.encode(subscribed).finish()));
  });
});

describe('publish outcomes', () => {
  it('are byte for byte what the generated code writes, with and without a returned message', () => {
    const outcomes: pb.PublishResponse.$Properties[] = [
      { publishId: 1, outcome: pb.PublishOutcome.PUBLISH_OUTCOME_CONFIRMED, queues: ['orders'] },
      { publishId: 2 ** 40, outcome: pb.PublishOutcome.PUBLISH_OUTCOME_CONFIRMED, queues: ['q1', '', 'очередь'] },
      { publishId: 3, outcome: pb.PublishOutcome.PUBLISH_OUTCOME_REJECTED, reason: 'queue "q" is full', queues: [], statusCode: Status.RESOURCE_EXHAUSTED },
      { publishId: 4, outcome: pb.PublishOutcome.PUBLISH_OUTCOME_UNROUTABLE, reason: 'no queue is bound', returned: message },
      { publishId: 0, outcome: pb.PublishOutcome.PUBLISH_OUTCOME_FAILED, reason: 'x'.repeat(300), statusCode: Status.UNAVAILABLE },
      {},
    ];
    const ours = encodePublishOutcomes({ outcomes });
    expect(ours).toEqual(Buffer.from(pb.PublishOutcomes.encode({ outcomes }).finish()));
    const decoded = pb.PublishOutcomes.decode(ours);
    expect(decoded.outcomes.map((o) => o.publishId)).toEqual([1, 2 ** 40, 3, 4, 0, 0]);
    expect(decoded.outcomes[1]?.queues).toEqual(['q1', '', 'очередь']);
    expect(decoded.outcomes[3]?.returned?.headers?.['tenant']?.stringValue).toBe('acme');
    expect(encodePublishOutcomes({ outcomes: [] }).byteLength).toBe(0);
  });
});
