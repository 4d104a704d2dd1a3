/**
 * PublishBatch, written by the SDK and read by the node with one codec (@quorumq/proto's
 * publish.js): byte for byte what the generated code writes, and read back as the generated
 * code reads it, keeping each message's bytes.
 */
import { encodePublishBatch, messageParts, quorumq, rawMessageOf, readPublishBatch, readPublishOutcomes, type OutgoingPublish } from '@quorumq/proto';
import { describe, expect, it } from 'vitest';

import pb = quorumq.v1;

const message: pb.Message.$Properties = {
  body: Buffer.from('hello'),
  routingKey: 'orders.eu',
  properties: { contentType: 'text/plain', priority: 2 },
  headers: { tenant: { stringValue: 'acme' } },
};

const requests: pb.PublishRequest.$Properties[] = [
  { publishId: 1, exchange: '', message, mandatory: false },
  { publishId: 2, exchange: 'ex.topic', message, mandatory: true },
  { publishId: 2 ** 40, exchange: 'обмен', message: { body: Buffer.alloc(300, 1) }, producerId: 'p-1', sequence: 0 },
  { publishId: 4, exchange: '', message: {}, producerId: 'p-1', sequence: 1_700_000_000_000_000 },
  // Plain messages (a body and a routing key), whose other fields are encoded once per key.
  { publishId: 5, exchange: '', message: { body: Buffer.from('a'), routingKey: 'q1', properties: {}, headers: {} } },
  { publishId: 6, exchange: '', message: { body: Buffer.from('b'), routingKey: 'q1' } },
  { publishId: 7, exchange: '', message: { body: Buffer.alloc(0), routingKey: 'q1', properties: {} } },
  { publishId: 8, exchange: '', message: { body: Buffer.from('c'), routingKey: '' } },
  { publishId: 9, exchange: '', message: { body: Buffer.from('d'), routingKey: 'q1', delayMs: 5, deaths: [] } },
];

const outgoing: OutgoingPublish[] = requests.map((r) => ({
  publishId: r.publishId as number,
  exchange: r.exchange ?? '',
  mandatory: r.mandatory ?? false,
  producerId: r.producerId ?? undefined,
  sequence: r.sequence == null ? undefined : (r.sequence as number),
  ...messageParts(r.message ?? {}),
}));

const plain = (p: pb.PublishRequest.$Properties): Record<string, unknown> => pb.PublishRequest.toObject(p as pb.PublishRequest);

describe('a publish batch the SDK writes', () => {
  it('is byte for byte what the generated code writes, for every combination of fields', () => {
    expect(encodePublishBatch(outgoing)).toEqual(Buffer.from(pb.PublishBatch.encode({ publishes: requests }).finish()));
    const decoded = pb.PublishBatch.decode(encodePublishBatch(outgoing));
    expect(decoded.publishes.map((p) => p.publishId)).toEqual([1, 2, 2 ** 40, 4, 5, 6, 7, 8, 9]);
    expect(decoded.publishes.map((p) => p.message?.routingKey)).toEqual(['orders.eu', 'orders.eu', '', '', 'q1', 'q1', 'q1', '', 'q1']);
    expect(decoded.publishes[2]?.sequence).toBe(0);
    expect(decoded.publishes[1]?.message?.headers?.['tenant']?.stringValue).toBe('acme');
  });

  it('an empty batch is empty', () => {
    expect(encodePublishBatch([]).byteLength).toBe(0);
  });
});

describe('a publish batch the node reads', () => {
  it('reads what the SDK wrote as the generated code does, keeping each message as sent', () => {
    const bytes = encodePublishBatch(outgoing);
    const seen: Uint8Array[] = [];
    const batch = readPublishBatch(bytes, (m) => seen.push(m));
    expect(batch.publishes.map(plain)).toEqual(pb.PublishBatch.decode(bytes).publishes.map(plain));
    // Every message was shown to the check before it was decoded, as the bytes that were sent.
    expect(seen.map((m) => Buffer.from(m))).toEqual(requests.map((r) => Buffer.from(pb.Message.encode(r.message ?? {}).finish())));
    for (const [i, publish] of batch.publishes.entries()) {
      expect(Buffer.from(rawMessageOf(publish.message ?? {}) ?? []), `publish ${i}`).toEqual(Buffer.from(seen[i]!));
    }
  });

  it('a check that throws refuses the batch', () => {
    const refuse = (): void => {
      throw new Error('too many headers');
    };
    expect(() => readPublishBatch(encodePublishBatch(outgoing), refuse)).toThrow('too many headers');
  });
});

describe("the publish stream's answers the SDK reads (readPublishOutcomes)", () => {
  const responses: pb.PublishResponse.$Properties[] = [
    { publishId: 1, outcome: pb.PublishOutcome.PUBLISH_OUTCOME_CONFIRMED, queues: ['orders'] },
    { publishId: 2 ** 40, outcome: pb.PublishOutcome.PUBLISH_OUTCOME_CONFIRMED, queues: ['a', 'b', 'очередь'], leader: '127.0.0.1:7003' },
    { publishId: 3, outcome: pb.PublishOutcome.PUBLISH_OUTCOME_UNROUTABLE, returned: message },
    { publishId: 4, outcome: pb.PublishOutcome.PUBLISH_OUTCOME_REJECTED, reason: 'queue full', statusCode: 8 },
    { publishId: 5, outcome: pb.PublishOutcome.PUBLISH_OUTCOME_FAILED, reason: 'disk alarm on n2', statusCode: 14, errorReason: 'DISK_ALARM' },
    { publishId: 0, outcome: pb.PublishOutcome.PUBLISH_OUTCOME_UNSPECIFIED },
  ];
  const bytes = Buffer.from(pb.PublishOutcomes.encode({ outcomes: responses }).finish());
  const asObject = (o: pb.PublishOutcomes): Record<string, unknown> => pb.PublishOutcomes.toObject(o, { defaults: true, longs: Number });

  it('reads every field as the generated code does', () => {
    const read = readPublishOutcomes(bytes);
    expect(asObject(read)).toEqual(asObject(pb.PublishOutcomes.decode(bytes)));
    expect(read.outcomes.map((r) => r.publishId)).toEqual([1, 2 ** 40, 3, 4, 5, 0]);
    expect(read.outcomes[1]?.queues).toEqual(['a', 'b', 'очередь']);
    expect(read.outcomes[2]?.returned?.headers?.['tenant']?.stringValue).toBe('acme');
    expect(read.outcomes[4]?.errorReason).toBe('DISK_ALARM');
    expect(readPublishOutcomes(Buffer.alloc(0)).outcomes).toEqual([]);
  });

  it('skips fields it does not know, in a response and around them, as a newer node may send', () => {
    // Field 15 (varint) and field 16 (bytes) inside the first response, field 9 (fixed32) beside the responses.
    const one = Buffer.from(pb.PublishResponse.encode(responses[0]!).finish());
    const unknownInside = Buffer.concat([one, Buffer.from([0x78, 0x2a, 0x82, 0x01, 0x02, 0x68, 0x69])]);
    const withUnknown = Buffer.concat([Buffer.from([0x0a, unknownInside.length]), unknownInside, Buffer.from([0x4d, 1, 2, 3, 4]), bytes]);
    const read = readPublishOutcomes(withUnknown);
    expect(read.outcomes).toHaveLength(responses.length + 1);
    expect(read.outcomes[0]?.publishId).toBe(1);
    expect(read.outcomes[0]?.queues).toEqual(['orders']);
    expect(asObject(read).outcomes).toEqual((asObject(pb.PublishOutcomes.decode(withUnknown)) as { outcomes: unknown }).outcomes);
  });

  it('throws on truncated bytes and on a string that is not UTF-8, as the generated code does', () => {
    expect(() => readPublishOutcomes(bytes.subarray(0, bytes.length - 3))).toThrow(RangeError);
    const notUtf8 = Buffer.from([0x0a, 0x06, 0x08, 0x01, 0x2a, 0x02, 0xc3, 0x28]);
    expect(() => pb.PublishOutcomes.decode(notUtf8)).toThrow();
    expect(() => readPublishOutcomes(notUtf8)).toThrow();
  });
});
