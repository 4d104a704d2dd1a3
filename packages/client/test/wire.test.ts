import { quorumq } from '@quorumq/proto';
import { describe, expect, it } from 'vitest';

import { decodePublishOutcomes, encodePublishBatch, messageParts, type OutgoingPublish } from '../src/wire.js';

import pb = quorumq.v1;

const message: pb.Message.$Properties = {
  body: Buffer.from('hello'),
  routingKey: 'orders.eu',
  properties: { contentType: 'text/plain', priority: 2 },
  headers: { tenant: { stringValue: 'acme' } },
};

describe('publish batches written by hand', () => {
  it('are byte for byte what the generated code writes, for every combination of fields', () => {
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
    expect(encodePublishBatch(outgoing)).toEqual(Buffer.from(pb.PublishBatch.encode({ publishes: requests }).finish()));
    const decoded = pb.PublishBatch.decode(encodePublishBatch(outgoing));
    expect(decoded.publishes.map((p) => p.publishId)).toEqual([1, 2, 2 ** 40, 4, 5, 6, 7, 8, 9]);
    expect(decoded.publishes.map((p) => p.message?.routingKey)).toEqual(['orders.eu', 'orders.eu', '', '', 'q1', 'q1', 'q1', '', 'q1']);
    expect(Buffer.from(decoded.publishes[5]!.message!.body!).toString()).toBe('b');
    expect(decoded.publishes[2]?.sequence).toBe(0);
    expect(decoded.publishes[1]?.message?.headers?.['tenant']?.stringValue).toBe('acme');
  });

  it('an empty batch is empty', () => {
    expect(encodePublishBatch([]).byteLength).toBe(0);
  });
});

describe('publish outcomes read by hand', () => {
  it('read what the generated code writes: ids as numbers, every field, a returned message', () => {
    const outcomes: pb.PublishResponse.$Properties[] = [
      { publishId: 1, outcome: pb.PublishOutcome.PUBLISH_OUTCOME_CONFIRMED, queues: ['orders'] },
      { publishId: 2 ** 40 + 3, outcome: pb.PublishOutcome.PUBLISH_OUTCOME_DUPLICATE, queues: ['q1', '', 'очередь'] },
      { publishId: 3, outcome: pb.PublishOutcome.PUBLISH_OUTCOME_FAILED, reason: 'queue "q" is full', statusCode: 8 },
      { publishId: 4, outcome: pb.PublishOutcome.PUBLISH_OUTCOME_UNROUTABLE, returned: message },
      {},
    ];
    const decoded = decodePublishOutcomes(Buffer.from(pb.PublishOutcomes.encode({ outcomes }).finish()));
    expect(decoded.map((o) => o.publishId)).toEqual([1, 2 ** 40 + 3, 3, 4, 0]);
    const O = pb.PublishOutcome;
    expect(decoded.map((o) => o.outcome)).toEqual([O.PUBLISH_OUTCOME_CONFIRMED, O.PUBLISH_OUTCOME_DUPLICATE, O.PUBLISH_OUTCOME_FAILED, O.PUBLISH_OUTCOME_UNROUTABLE, 0]);
    expect(decoded[1]?.queues).toEqual(['q1', '', 'очередь']);
    expect(decoded[2]).toMatchObject({ reason: 'queue "q" is full', statusCode: 8, queues: [], returned: null });
    expect(decoded[3]?.returned?.routingKey).toBe('orders.eu');
    expect(decoded[3]?.returned?.headers?.['tenant']?.stringValue).toBe('acme');
    expect(decoded[4]).toEqual({ publishId: 0, outcome: 0, reason: '', queues: [], statusCode: 0, returned: null });
  });

  it('skip fields they do not know, and refuse truncated bytes', () => {
    const known = Buffer.from(pb.PublishOutcomes.encode({ outcomes: [{ publishId: 7, outcome: 1, queues: ['q'] }] }).finish());
    // Field 15 (varint) and field 16 (length-delimited) inside the outcome, then field 2 outside.
    const inner = Buffer.concat([known.subarray(2), Buffer.from([0x78, 0x2a, 0x82, 0x01, 0x02, 0x68, 0x69])]);
    const extended = Buffer.concat([Buffer.from([0x0a, inner.length]), inner, Buffer.from([0x10, 0x01])]);
    expect(decodePublishOutcomes(extended)).toEqual([{ publishId: 7, outcome: 1, reason: '', queues: ['q'], statusCode: 0, returned: null }]);
    expect(() => decodePublishOutcomes(known.subarray(0, known.length - 1))).toThrow();
  });
});
