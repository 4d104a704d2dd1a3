import { quorumq } from '@quorumq/proto';
import { describe, expect, it } from 'vitest';

import { DEFAULTS } from '../src/config.js';
import { BrokerError, Status } from '../src/errors.js';

import { decodePublishBatch, decodePublishRequest, encodeConsumeResponse, rawMessageOf } from '../src/wire.js';

import pb = quorumq.v1;

const message: pb.Message.$Properties = {
  body: Buffer.from('hello, queue'),
  routingKey: 'orders.eu',
  properties: { contentType: 'text/plain', priority: 3, expirationMs: 60_000 },
  headers: { tenant: { stringValue: 'acme' }, attempt: { intValue: 2 } },
};
const encodedMessage = Buffer.from(pb.Message.encode(message).finish());

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
    // A copy of a message (changed or not) is not the client's bytes.
    expect(rawMessageOf({ ...first, routingKey: 'elsewhere' })).toBeUndefined();
    expect(rawMessageOf(pb.Message.decode(encodedMessage))).toBeUndefined();
  });

  it('a field past the end of its publish, or of the batch, is refused', () => {
    const inner = Buffer.from(pb.PublishRequest.encode({ publishId: 1, exchange: 'orders' }).finish());
    // The exchange's length claims one byte more than the publish holds (the next publish's first).
    const overrun = Buffer.from(inner);
    overrun[3] = overrun[3]! + 1;
    const next = Buffer.from(pb.PublishBatch.encode({ publishes: [{ publishId: 2 }] }).finish());
    expect(() => decodePublishBatch(Buffer.concat([Buffer.from([0x0a, overrun.length]), overrun, next]))).toThrow(RangeError);
    expect(() => decodePublishBatch(Buffer.concat([Buffer.from([0x0a, inner.length + 1]), inner]))).toThrow(RangeError);
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
