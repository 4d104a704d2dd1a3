import { quorumq } from '@quorumq/proto';
import { describe, expect, it } from 'vitest';

import { encodeMessageBytes, encodePublishBatch, type OutgoingPublish } from '../src/wire.js';

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
    ];
    const outgoing: OutgoingPublish[] = requests.map((r) => ({
      publishId: r.publishId as number,
      exchange: r.exchange ?? '',
      mandatory: r.mandatory ?? false,
      producerId: r.producerId ?? undefined,
      sequence: r.sequence == null ? undefined : (r.sequence as number),
      message: encodeMessageBytes(r.message ?? {}),
    }));
    expect(encodePublishBatch(outgoing)).toEqual(Buffer.from(pb.PublishBatch.encode({ publishes: requests }).finish()));
    const decoded = pb.PublishBatch.decode(encodePublishBatch(outgoing));
    expect(decoded.publishes.map((p) => p.publishId)).toEqual([1, 2, 2 ** 40, 4]);
    expect(decoded.publishes[2]?.sequence).toBe(0);
    expect(decoded.publishes[1]?.message?.headers?.['tenant']?.stringValue).toBe('acme');
  });

  it('an empty batch is empty', () => {
    expect(encodePublishBatch([]).byteLength).toBe(0);
  });
});
