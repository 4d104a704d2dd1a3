import { quorumq } from '@quorumq/proto';
import { decodeMessage, type DeathRecord, type DeathSummary, type ReceivedProperties } from './messages.js';
import type { DecodedHeaders } from './headers.js';
import { wireNumber } from './longs.js';

export interface AckOptions {
  /** Also settle every earlier unsettled delivery of the same consumer. */
  readonly multiple?: boolean;
}

export interface NackOptions {
  /** true (default): back to the queue; false: dead-lettered (or dropped). */
  readonly requeue?: boolean;
  /** With requeue: back-off before the message is visible again. */
  readonly delayMs?: number;
  readonly multiple?: boolean;
}

export interface RejectOptions {
  /** false (default): dead-lettered (or dropped); true: back to the queue. */
  readonly requeue?: boolean;
}

/** A message handed to the application by a consumer or by `get`. */
export interface Delivery {
  readonly queue: string;
  readonly consumerTag: string;
  readonly deliveryTag: number;
  /** How many times the message was delivered, this delivery included. */
  readonly deliveryCount: number;
  readonly redelivered: boolean;
  readonly exchange: string;
  /** The first of `routingKeys` (the key it was published with). */
  readonly routingKey: string;
  readonly routingKeys: readonly string[];
  readonly body: Buffer;
  readonly properties: ReceivedProperties;
  readonly headers: DecodedHeaders;
  readonly deaths: readonly DeathRecord[];
  readonly firstDeath?: DeathSummary;
  readonly lastDeath?: DeathSummary;
  /** Spec 9: true when the message was published as a tombstone (its key deleted; an empty body may be one too). */
  readonly tombstone: boolean;
  /** True once acked / nacked / rejected (also by a `multiple` settlement, or when moot). */
  readonly settled: boolean;
  /**
   * Acknowledges the message: the broker forgets it. On a consumer, resolves once the
   * settlement was written to the consume stream (sent; the broker commits it after, and a
   * later `consumer.close()` resolves only after the broker ended the stream); at once when
   * it is moot (the delivery's stream broke: the broker returns the message). From `get`
   * with `manualAck`, resolves once the broker answered SettleGet (committed).
   */
  ack(options?: AckOptions): Promise<void>;
  /** Negative acknowledgement: requeue (default, optionally after `delayMs`) or dead-letter. Resolves as {@link ack}. */
  nack(options?: NackOptions): Promise<void>;
  /** Rejects the message: dead-letter (default) or requeue. Resolves as {@link ack}. */
  reject(options?: RejectOptions): Promise<void>;
}

/** What a delivery calls to settle itself. */
export type Settler = (delivery: DeliveryImpl, settle: quorumq.v1.Settle.$Properties) => Promise<void>;

export class DeliveryImpl implements Delivery {
  readonly queue: string;
  readonly consumerTag: string;
  readonly deliveryTag: number;
  readonly deliveryCount: number;
  readonly redelivered: boolean;
  readonly exchange: string;
  readonly routingKey: string;
  readonly routingKeys: readonly string[];
  readonly body: Buffer;
  readonly properties: ReceivedProperties;
  readonly headers: DecodedHeaders;
  readonly deaths: readonly DeathRecord[];
  readonly firstDeath?: DeathSummary;
  readonly lastDeath?: DeathSummary;
  readonly tombstone: boolean;
  /** Set by the owner. */
  settledFlag: boolean;

  constructor(
    wire: quorumq.v1.Delivery.$Properties,
    /** The consumer stream generation (or 0 for `get`) the delivery came on. */
    readonly generation: number,
    private readonly settler: Settler,
    settled = false,
  ) {
    const message = decodeMessage(wire.message);
    this.queue = wire.queue ?? '';
    this.consumerTag = wire.consumerTag ?? '';
    this.deliveryTag = wireNumber(wire.deliveryTag);
    this.deliveryCount = wire.deliveryCount ?? 0;
    this.redelivered = wire.redelivered ?? false;
    this.exchange = wire.exchange ?? '';
    this.routingKeys = wire.routingKeys !== null && wire.routingKeys !== undefined && wire.routingKeys.length > 0
      ? [...wire.routingKeys]
      : message.routingKey === '' ? [] : [message.routingKey];
    this.routingKey = this.routingKeys[0] ?? message.routingKey;
    this.body = message.body;
    this.properties = message.properties;
    this.headers = message.headers;
    this.deaths = message.deaths;
    if (message.firstDeath !== undefined) this.firstDeath = message.firstDeath;
    if (message.lastDeath !== undefined) this.lastDeath = message.lastDeath;
    this.tombstone = message.tombstone === true;
    this.settledFlag = settled;
  }

  get settled(): boolean {
    return this.settledFlag;
  }

  ack(options: AckOptions = {}): Promise<void> {
    return this.settle({ kind: quorumq.v1.SettleKind.SETTLE_KIND_ACK, multiple: options.multiple ?? false });
  }

  nack(options: NackOptions = {}): Promise<void> {
    const requeue = options.requeue ?? true;
    const settle: quorumq.v1.Settle.$Properties = { kind: quorumq.v1.SettleKind.SETTLE_KIND_NACK, requeue, multiple: options.multiple ?? false };
    if (options.delayMs !== undefined && options.delayMs > 0) settle.delayMs = Math.trunc(options.delayMs);
    return this.settle(settle);
  }

  reject(options: RejectOptions = {}): Promise<void> {
    return this.settle({ kind: quorumq.v1.SettleKind.SETTLE_KIND_REJECT, requeue: options.requeue ?? false });
  }

  private settle(settle: quorumq.v1.Settle.$Properties): Promise<void> {
    // Settling twice (or a delivery already covered by a `multiple` settlement) is a no-op.
    if (this.settledFlag) return Promise.resolve();
    return this.settler(this, { ...settle, deliveryTag: this.deliveryTag });
  }
}
