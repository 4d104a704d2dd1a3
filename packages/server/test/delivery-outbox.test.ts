import { EventEmitter } from 'node:events';
import { quorumq } from '@quorumq/proto';
import { describe, expect, it } from 'vitest';

import { DeliveryOutbox, type DeliveryStream } from '../src/delivery-outbox.js';
import type { OutgoingDelivery } from '../src/wire.js';

import pb = quorumq.v1;

/** A stream that takes `room` writes, then reports a full buffer until drained. */
class FakeStream extends EventEmitter implements DeliveryStream {
  cancelled = false;
  destroyed = false;
  readonly written: pb.ConsumeResponse.$Properties[] = [];
  constructor(public room = Infinity) {
    super();
  }
  write(response: pb.ConsumeResponse.$Properties): boolean {
    this.written.push(response);
    this.room -= 1;
    return this.room > 0;
  }
  drain(room: number): void {
    this.room = room;
    this.emit('drain');
  }
}

const delivery = (tag: number, bodyBytes: number): OutgoingDelivery => ({ queue: 'q', consumerTag: 'c', deliveryTag: tag, encodedMessage: new Uint8Array(bodyBytes) });
const turn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));
const tagsOf = (response: pb.ConsumeResponse.$Properties): number[] =>
  response.delivery != null ? [Number(response.delivery.deliveryTag)] : (response.deliveries?.deliveries ?? []).map((d) => Number(d.deliveryTag));

describe('a consumer outbox', () => {
  it('sends one turn of deliveries at its end, in messages of at most the batch bytes', async () => {
    const stream = new FakeStream();
    const outbox = new DeliveryOutbox(stream, 1000);
    for (let tag = 1; tag <= 10; tag++) outbox.push(delivery(tag, 300));
    expect(stream.written).toHaveLength(0);
    await turn();
    // 300 + 128 bytes counted each: two per message.
    expect(stream.written.map(tagsOf)).toEqual([[1, 2], [3, 4], [5, 6], [7, 8], [9, 10]]);
    expect(outbox.size).toBe(0);
  });

  it('sends a delivery larger than the batch alone', async () => {
    const stream = new FakeStream();
    const outbox = new DeliveryOutbox(stream, 1000);
    outbox.push(delivery(1, 100));
    outbox.push(delivery(2, 5000));
    outbox.push(delivery(3, 100));
    await turn();
    expect(stream.written.map(tagsOf)).toEqual([[1], [2], [3]]);
  });

  it('stops writing while the stream does not drain, and goes on in order after drain', async () => {
    const stream = new FakeStream(2);
    const outbox = new DeliveryOutbox(stream, 1);
    for (let tag = 1; tag <= 6; tag++) outbox.push(delivery(tag, 10));
    await turn();
    expect(stream.written.map(tagsOf)).toEqual([[1], [2]]);
    expect(outbox.size).toBe(4);
    // More deliveries while full wait too; nothing is written before drain.
    outbox.push(delivery(7, 10));
    await turn();
    expect(stream.written).toHaveLength(2);
    stream.drain(100);
    expect(stream.written.flatMap(tagsOf)).toEqual([1, 2, 3, 4, 5, 6, 7]);
    expect(outbox.size).toBe(0);
  });

  it('drops what waits once the stream is cancelled', async () => {
    const stream = new FakeStream(1);
    const outbox = new DeliveryOutbox(stream, 1);
    outbox.push(delivery(1, 10));
    outbox.push(delivery(2, 10));
    await turn();
    stream.cancelled = true;
    stream.drain(10);
    expect(stream.written.flatMap(tagsOf)).toEqual([1]);
    expect(outbox.size).toBe(0);
  });
});
