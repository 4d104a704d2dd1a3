import { randomUUID } from 'node:crypto';
import type { StatusObject } from '@grpc/grpc-js';
import { Metadata, status as grpcStatus } from '@grpc/grpc-js';
import { BrokerService, quorumq } from '@quorumq/proto';
import { QuorumqError, SdkReason, brokenStreamError, toQuorumqError } from './errors.js';
import { DeliveryImpl, type Delivery } from './delivery.js';
import { wireNumber } from './longs.js';
import type { DuplexCall } from './h2-call.js';
import { shouldFailover, type Transport } from './transport.js';

export interface ConsumeOptions {
  /** Unacked deliveries at most; 0 = unlimited. Default 100. */
  readonly prefetch?: number;
  /** Consumer priority (higher first). */
  readonly priority?: number;
  /** Unique per stream; generated when omitted. Kept across resubscriptions. */
  readonly consumerTag?: string;
  /** Called with the broker's consumer events (consumer timeout, queue deleted, ...). */
  readonly onEvent?: (event: ConsumerEvent) => void;
  /** Callback form only: called when the handler throws (the message was nacked). */
  readonly onError?: (error: unknown, delivery: Delivery) => void;
}

/** The broker ended a delivery (deliveryTag > 0) or the subscription. */
export interface ConsumerEvent {
  readonly kind: string;
  readonly message: string;
  readonly deliveryTag: number;
}

/** The handler of the callback form of `consume`. */
export type DeliveryHandler = (delivery: Delivery) => unknown;

type ConsumeCall = DuplexCall<quorumq.v1.ConsumeRequest.$Properties>;

/** A settlement made in this turn, and its caller waiting until it is written to the stream. */
interface PendingSettle {
  readonly settle: quorumq.v1.Settle.$Properties;
  readonly sent: () => void;
}

interface Waiter {
  readonly resolve: (result: IteratorResult<Delivery>) => void;
  readonly reject: (error: unknown) => void;
}

/**
 * A subscription to a queue over one `Consume` stream, iterated with `for await`.
 *
 * When the stream breaks (the node died, the leader moved), the consumer reconnects —
 * to the queue's leader when known, else the next node — and resubscribes by itself, for at
 * most the client's `failoverTimeoutMs` without success. The broker returns every message that
 * was unsettled on the broken stream to the queue, so:
 *   - deliveries received but not yet yielded are dropped (they come again);
 *   - settling a delivery from the broken stream (ack / nack / reject) is silently ignored.
 * Expect redeliveries (`redelivered: true`) after a reconnection.
 */
export class Consumer implements AsyncIterable<Delivery> {
  readonly queue: string;
  readonly consumerTag: string;
  private prefetch: number;
  private readonly priority: number;
  private readonly onEvent: ((event: ConsumerEvent) => void) | undefined;
  private readonly buffer: DeliveryImpl[] = [];
  /** Deliveries of the current stream not yet settled, by tag. */
  private readonly unsettled = new Map<number, DeliveryImpl>();
  /** Settlements of this turn, not yet sent (see flushSettles). */
  private outgoing: PendingSettle[] = [];
  /** Callers of settlements handed to the stream whose write has not completed yet. */
  private readonly writing = new Set<() => void>();
  private readonly waiters: Waiter[] = [];
  private readonly readyWaiters: Array<{ resolve: () => void; reject: (error: unknown) => void }> = [];
  private readonly settledWaiters: Array<() => void> = [];
  private call: ConsumeCall | undefined;
  /** Resolves when the current stream has closed (its status arrived). */
  private callClosed: Promise<void> = Promise.resolve();
  /** Set by the first cancel / close / drain / failure: resolves once the stream has closed. */
  private closing: Promise<void> | undefined;
  private address = '';
  private generation = 0;
  private subscribedOnce = false;
  private subscribed = false;
  private failures = 0;
  private failingSince: number | undefined;
  private preferred: string | undefined;
  private reconnectTimer: NodeJS.Timeout | undefined;
  private draining = false;
  private done = false;
  private failure: QuorumqError | undefined;
  private failureReported = false;
  private resolveEnded!: (error: QuorumqError | undefined) => void;
  /** Resolves when the consumer has ended: undefined after cancel / close / drain, else the fatal error. */
  readonly ended: Promise<QuorumqError | undefined>;
  /** How many times the consumer resubscribed after a broken stream. */
  resubscriptions = 0;

  constructor(
    private readonly transport: Transport,
    queue: string,
    options: ConsumeOptions,
    private readonly refreshTopology: () => Promise<void>,
  ) {
    this.queue = queue;
    this.consumerTag = options.consumerTag !== undefined && options.consumerTag !== '' ? options.consumerTag : `ctag-${randomUUID()}`;
    this.prefetch = options.prefetch ?? 100;
    this.priority = options.priority ?? 0;
    this.onEvent = options.onEvent;
    this.ended = new Promise((resolve) => {
      this.resolveEnded = resolve;
    });
    void this.connect();
  }

  /** The node the current stream goes to. */
  get node(): string {
    return this.address;
  }

  /** Whether the consumer has ended (cancelled, drained or failed). */
  get isDone(): boolean {
    return this.done;
  }

  /** Resolves once the broker confirmed the (current) subscription; rejects if the consumer failed first. */
  ready(): Promise<void> {
    if (this.subscribed) return Promise.resolve();
    if (this.failure !== undefined) return Promise.reject(this.failure);
    if (this.done) return Promise.reject(new QuorumqError('the consumer was cancelled', { code: 'CANCELLED', reason: SdkReason.CONSUMER_CANCELLED, retriable: false }));
    return new Promise((resolve, reject) => this.readyWaiters.push({ resolve, reject }));
  }

  /** Changes the prefetch of the subscription (sent as a Credit; kept across resubscriptions). */
  setPrefetch(prefetch: number): void {
    this.prefetch = prefetch;
    if (this.call !== undefined && this.subscribed) this.call.write({ credit: { prefetch } });
  }

  [Symbol.asyncIterator](): AsyncIterator<Delivery> {
    return {
      next: () => this.next(),
      return: async () => {
        await this.cancel();
        return { done: true, value: undefined };
      },
    };
  }

  private next(): Promise<IteratorResult<Delivery>> {
    const delivery = this.buffer.shift();
    if (delivery !== undefined) return Promise.resolve({ done: false, value: delivery });
    if (this.done || this.draining) {
      if (this.failure !== undefined && !this.failureReported) {
        this.failureReported = true;
        return Promise.reject(this.failure);
      }
      return Promise.resolve({ done: true, value: undefined });
    }
    return new Promise((resolve, reject) => this.waiters.push({ resolve, reject }));
  }

  /**
   * Ends the subscription: the iteration completes, messages received but not yet yielded
   * are dropped, settlements already made are sent, and the broker returns every unsettled
   * message to the queue (settling them afterwards is a no-op). Resolves once the broker has
   * ended the stream (or, after the client's `callTimeoutMs` without an end, the SDK
   * cancelled it).
   */
  cancel(): Promise<void> {
    return this.finish(undefined);
  }

  /** Same as {@link cancel}. */
  close(): Promise<void> {
    return this.cancel();
  }

  /**
   * Stops yielding deliveries, waits until every delivery already yielded is settled (or moot
   * because the stream broke), then ends the subscription as {@link cancel} does.
   * Received-but-unyielded deliveries go back to the queue.
   */
  async drain(): Promise<void> {
    if (this.done) return this.closing;
    this.draining = true;
    for (const d of this.buffer.splice(0)) this.unsettled.delete(d.deliveryTag);
    this.endIteration();
    while (this.unsettled.size > 0 && !this.done) {
      await new Promise<void>((resolve) => this.settledWaiters.push(resolve));
    }
    await this.finish(undefined);
  }

  private endIteration(): void {
    for (const waiter of this.waiters.splice(0)) {
      if (this.failure !== undefined && !this.failureReported) {
        this.failureReported = true;
        waiter.reject(this.failure);
      } else {
        waiter.resolve({ done: true, value: undefined });
      }
    }
  }

  /** Ends the consumer; resolves once its stream has closed. */
  private finish(error: QuorumqError | undefined): Promise<void> {
    if (this.closing !== undefined) return this.closing;
    // Settlements made before the end still go out, ahead of the stream's end.
    if (error === undefined) this.flushSettles();
    this.done = true;
    this.failure = error;
    if (this.reconnectTimer !== undefined) clearTimeout(this.reconnectTimer);
    this.reconnectTimer = undefined;
    this.generation += 1;
    const call = this.call;
    this.call = undefined;
    this.closing = this.callClosed;
    if (call !== undefined) {
      // Half-close: the broker ends the subscription and the stream. A broker that does not
      // end it in time is cut off.
      call.end();
      const timer = setTimeout(() => call.cancel(), this.transport.callTimeoutMs);
      timer.unref();
      void this.closing.then(() => clearTimeout(timer));
    }
    this.buffer.length = 0;
    for (const d of this.unsettled.values()) d.settledFlag = true;
    this.unsettled.clear();
    this.endIteration();
    const readyError = error ?? new QuorumqError('the consumer was cancelled', { code: 'CANCELLED', reason: SdkReason.CONSUMER_CANCELLED, retriable: false });
    for (const waiter of this.readyWaiters.splice(0)) waiter.reject(readyError);
    for (const wake of this.settledWaiters.splice(0)) wake();
    void this.closing.then(() => {
      this.releaseSettles();
      this.resolveEnded(error);
    });
    return this.closing;
  }

  private async connect(): Promise<void> {
    this.reconnectTimer = undefined;
    if (this.done) return;
    let address = this.preferred ?? this.transport.leaderOf(this.queue);
    this.preferred = undefined;
    if (address === undefined && this.transport.leaderRouting) {
      await this.refreshTopology().catch(() => undefined);
      if (this.done) return;
      address = this.transport.leaderOf(this.queue);
    }
    address ??= this.transport.currentAddress();
    if (!this.transport.isStreamConnected(address)) {
      // Subscribe only over a connection that is up: a paused node is passed over
      // (Transport.connected) instead of holding the subscription for ever.
      try {
        await this.transport.streamConnected(address);
      } catch (thrown) {
        if (this.done) return;
        const error = toQuorumqError(thrown, address);
        if (error.code !== 'UNAVAILABLE') {
          this.finish(error);
          return;
        }
        this.onBroken({ code: grpcStatus.UNAVAILABLE, details: error.message, metadata: new Metadata() }, address);
        return;
      }
      if (this.done) return;
    }
    let call: ConsumeCall;
    try {
      const method = BrokerService.consume;
      call = this.transport.openStream(address, method.path, method.requestSerialize, method.responseDeserialize);
    } catch (error) {
      this.finish(toQuorumqError(error));
      return;
    }
    this.generation += 1;
    this.releaseSettles();
    const generation = this.generation;
    this.call = call;
    this.address = address;
    this.subscribed = false;
    let closed!: () => void;
    this.callClosed = new Promise((resolve) => {
      closed = resolve;
    });
    call.on('data', (response: quorumq.v1.ConsumeResponse) => {
      if (generation === this.generation) this.onResponse(response, generation, address);
    });
    call.on('error', () => undefined);
    call.on('status', (status: StatusObject) => {
      closed();
      if (generation === this.generation) this.onBroken(status, address);
    });
    call.write({ subscribe: { queue: this.queue, prefetch: this.prefetch, priority: this.priority, consumerTag: this.consumerTag } });
  }

  private onResponse(response: quorumq.v1.ConsumeResponse, generation: number, address: string): void {
    if (response.subscribed !== null && response.subscribed !== undefined) {
      this.subscribed = true;
      this.failures = 0;
      this.failingSince = undefined;
      if (this.subscribedOnce) this.resubscriptions += 1;
      this.subscribedOnce = true;
      const leader = response.subscribed.leader ?? '';
      if (leader !== '') this.transport.learnLeader(this.queue, leader);
      this.transport.markHealthy(address);
      for (const waiter of this.readyWaiters.splice(0)) waiter.resolve();
      return;
    }
    if (response.delivery !== null && response.delivery !== undefined) {
      this.onDelivery(response.delivery, generation);
      return;
    }
    if (response.deliveries !== null && response.deliveries !== undefined) {
      for (const wire of response.deliveries.deliveries ?? []) this.onDelivery(wire, generation);
      return;
    }
    if (response.event !== null && response.event !== undefined) {
      const event: ConsumerEvent = {
        kind: response.event.kind ?? '',
        message: response.event.message ?? '',
        deliveryTag: wireNumber(response.event.deliveryTag),
      };
      if (event.deliveryTag > 0) {
        // The broker took this delivery back (e.g. consumer timeout): settling it is moot.
        const delivery = this.unsettled.get(event.deliveryTag);
        if (delivery !== undefined) {
          delivery.settledFlag = true;
          this.unsettled.delete(event.deliveryTag);
          const index = this.buffer.indexOf(delivery);
          if (index >= 0) this.buffer.splice(index, 1);
          this.notifySettled();
        }
      }
      this.onEvent?.(event);
    }
  }

  private onDelivery(wire: quorumq.v1.Delivery.$Properties, generation: number): void {
    const delivery = new DeliveryImpl(wire, generation, (d, settle) => this.settle(d, settle));
    if (this.draining) return; // goes back to the queue when the stream ends
    this.unsettled.set(delivery.deliveryTag, delivery);
    const waiter = this.waiters.shift();
    if (waiter !== undefined) waiter.resolve({ done: false, value: delivery });
    else this.buffer.push(delivery);
  }

  /**
   * Sends the settlements made in this event-loop turn as one SettleBatch, in order, except
   * that plain acks of every delivery up to a tag with nothing unsettled below it become one
   * `multiple` ack (the broker then commits one entry instead of one per ack).
   */
  private flushSettles(): void {
    const pending = this.outgoing;
    this.outgoing = [];
    if (pending.length === 0) return;
    if (this.call === undefined) {
      for (const p of pending) p.sent();
      return;
    }
    const settles = pending.map((p) => p.settle);
    let lowestUnsettled = Number.POSITIVE_INFINITY;
    for (const tag of this.unsettled.keys()) if (tag < lowestUnsettled) lowestUnsettled = tag;
    const plainAck = (s: quorumq.v1.Settle.$Properties): boolean => s.kind === quorumq.v1.SettleKind.SETTLE_KIND_ACK && s.multiple !== true;
    const foldable = settles.filter((s) => plainAck(s) && wireNumber(s.deliveryTag) < lowestUnsettled);
    let batch = settles;
    if (foldable.length >= 2) {
      const upTo = Math.max(...foldable.map((s) => wireNumber(s.deliveryTag)));
      batch = [
        ...settles.filter((s) => !foldable.includes(s)),
        { kind: quorumq.v1.SettleKind.SETTLE_KIND_ACK, deliveryTag: upTo, multiple: true },
      ];
    }
    const sent = (): void => {
      for (const p of pending) {
        this.writing.delete(p.sent);
        p.sent();
      }
    };
    for (const p of pending) this.writing.add(p.sent);
    if (batch.length === 1) this.call.write({ settle: batch[0] }, sent);
    else this.call.write({ settles: { settles: batch } }, sent);
  }

  /**
   * Resolves every settlement not written yet: its stream is gone (the broker returns its
   * messages to the queue, so the settlement is moot) or was ended.
   */
  private releaseSettles(): void {
    const pending = this.outgoing;
    this.outgoing = [];
    for (const p of pending) p.sent();
    for (const sent of [...this.writing]) sent();
    this.writing.clear();
  }

  /**
   * Queues a settlement for this turn's batch; resolves once the batch was written to the
   * stream (handed to the connection), or at once when the settlement is moot.
   */
  private settle(delivery: DeliveryImpl, settle: quorumq.v1.Settle.$Properties): Promise<void> {
    delivery.settledFlag = true;
    // A delivery from a stream that broke since: the broker already returned it. Drop.
    if (delivery.generation !== this.generation || this.call === undefined || this.done) return Promise.resolve();
    if (settle.multiple === true) {
      for (const [tag, d] of this.unsettled) {
        if (tag <= delivery.deliveryTag) {
          d.settledFlag = true;
          this.unsettled.delete(tag);
        }
      }
    }
    this.unsettled.delete(delivery.deliveryTag);
    if (this.outgoing.length === 0) setImmediate(() => this.flushSettles());
    const written = new Promise<void>((sent) => this.outgoing.push({ settle, sent }));
    this.notifySettled();
    return written;
  }

  private notifySettled(): void {
    if (this.unsettled.size === 0) for (const wake of this.settledWaiters.splice(0)) wake();
  }

  private onBroken(status: StatusObject, address: string): void {
    this.call = undefined;
    this.subscribed = false;
    this.generation += 1;
    this.releaseSettles();
    // Everything from the broken stream is moot: the broker returns it to the queue.
    this.buffer.length = 0;
    for (const d of this.unsettled.values()) d.settledFlag = true;
    this.unsettled.clear();
    this.notifySettled();
    if (this.done) return;
    if (this.draining) {
      this.finish(undefined);
      return;
    }
    const error = status.code === 0
      ? brokenStreamError(`the consume stream to ${address} ended`, address)
      : toQuorumqError(status, address);
    if (!shouldFailover(error)) {
      this.finish(error);
      return;
    }
    this.transport.markFailed(address);
    this.transport.forgetLeader(this.queue, address);
    if (error.leader !== undefined && error.leader !== address) {
      this.preferred = error.leader;
      this.transport.learnLeader(this.queue, error.leader);
    }
    this.failures += 1;
    this.failingSince ??= Date.now();
    const nodes = this.transport.nodes.length;
    const wait = this.failures % nodes === 0 ? this.transport.backoff(this.failures / nodes - 1) : 0;
    if (Date.now() + wait - this.failingSince >= this.transport.failoverTimeoutMs) {
      this.finish(brokenStreamError(`could not resubscribe to ${this.queue}: ${error.message}`, address, error));
      return;
    }
    this.reconnectTimer = setTimeout(() => void this.connect(), wait);
  }
}
