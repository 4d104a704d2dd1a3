/**
 * The deliveries waiting to go out on one consumer stream. What the leader delivers in one
 * event-loop turn leaves at the turn's end, in gRPC messages of at most `batchBytes` each (one
 * delivery alone may be larger: it is at most `max_message_bytes` plus its envelope), and only
 * while the stream drains: once a write reports a full buffer, the rest waits for 'drain'.
 *
 * A waiting delivery refers to the replica's stored bytes (no copy), so a consumer that does
 * not read costs the node a small object per delivery its prefetch allows, not a second copy
 * of every body in the HTTP/2 buffers.
 */
import { quorumq } from '@quorumq/proto';

import type { OutgoingDelivery } from './wire.js';

import pb = quorumq.v1;

/** The part of a server stream the outbox writes to. */
export interface DeliveryStream {
  readonly cancelled: boolean;
  readonly destroyed: boolean;
  write(response: pb.ConsumeResponse.$Properties): boolean;
  once(event: 'drain', listener: () => void): unknown;
}

/** Bytes of deliveries one gRPC message carries at most (unless one delivery is larger). */
export const DELIVERY_BATCH_BYTES = 1024 * 1024;

/** Bytes counted for a delivery beside its message's bytes: its fields and framing. */
const DELIVERY_OVERHEAD_BYTES = 128;

export class DeliveryOutbox {
  private pending: OutgoingDelivery[] = [];
  /** The first delivery of `pending` not yet written. */
  private head = 0;
  private scheduled = false;
  private waitingForDrain = false;

  constructor(
    private readonly stream: DeliveryStream,
    private readonly batchBytes = DELIVERY_BATCH_BYTES,
  ) {}

  /** Deliveries not yet written to the stream. */
  get size(): number {
    return this.pending.length - this.head;
  }

  push(delivery: OutgoingDelivery): void {
    this.pending.push(delivery);
    if (this.scheduled || this.waitingForDrain) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      this.flush();
    });
  }

  /** Writes what waits, batch by batch, until it is all written or the stream is full. */
  private flush(): void {
    const stream = this.stream;
    while (this.head < this.pending.length) {
      if (stream.cancelled || stream.destroyed) {
        this.clear();
        return;
      }
      const first = this.head;
      let bytes = 0;
      do {
        bytes += sizeOf(this.pending[this.head]!);
        this.head += 1;
      } while (this.head < this.pending.length && bytes + sizeOf(this.pending[this.head]!) <= this.batchBytes);
      const written =
        this.head - first === 1
          ? stream.write({ delivery: this.pending[first]! })
          : stream.write({ deliveries: { deliveries: this.pending.slice(first, this.head) } });
      if (!written) {
        this.waitingForDrain = true;
        stream.once('drain', () => {
          this.waitingForDrain = false;
          this.flush();
        });
        break;
      }
    }
    if (this.head === this.pending.length) this.clear();
    else if (this.head > 1024 && this.head * 2 > this.pending.length) {
      this.pending = this.pending.slice(this.head);
      this.head = 0;
    }
  }

  private clear(): void {
    this.pending = [];
    this.head = 0;
  }
}

function sizeOf(delivery: OutgoingDelivery): number {
  const body = delivery.encodedMessage?.byteLength ?? delivery.message?.body?.length ?? 0;
  return body + DELIVERY_OVERHEAD_BYTES;
}
