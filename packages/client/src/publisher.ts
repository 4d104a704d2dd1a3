import type { StatusObject } from '@grpc/grpc-js';
import { BrokerService, encodePublishBatch, messageParts, quorumq, readPublishOutcomes, type OutgoingPublish } from '@quorumq/proto';
import { QuorumqError, SdkReason, brokenStreamError, toQuorumqError } from './errors.js';
import { encodePublish, type Body, type PublishOptions } from './messages.js';
import { toPublishResult, type PublishResult } from './results.js';
import type { DuplexCall } from './h2-call.js';
import { shouldFailover, type Transport } from './transport.js';
import { wireNumber } from './longs.js';

export interface PublisherOptions {
  /** Publishes awaiting their outcome at most; `publish` waits for room beyond. Default 256. */
  readonly maxInFlight?: number;
  /**
   * Enables broker-side deduplication: the publisher numbers its messages with strictly
   * increasing sequences and re-sends unconfirmed ones, with the same sequences, after a
   * broken stream.
   */
  readonly producerId?: string;
  /**
   * The first sequence (with a producerId). Default: `Date.now() * 1000`, so that a restarted
   * producer with the same id keeps increasing.
   */
  readonly firstSequence?: number;
  /** The exchange `publish` uses when its options name none. Default '' (the default exchange). */
  readonly exchange?: string;
}

/** Options of one {@link Publisher.publish}: producerId / sequence are the publisher's. */
export interface PublisherPublishOptions extends Omit<PublishOptions, 'producerId' | 'sequence'> {
  /** Overrides the publisher's exchange for this message. */
  readonly exchange?: string;
}

interface Pending {
  readonly id: number;
  readonly request: quorumq.v1.PublishRequest.$Properties;
  /** What goes on the wire (the message's fields but its body encoded once). */
  readonly wire: OutgoingPublish;
  readonly resolve: (result: PublishResult) => void;
  readonly reject: (error: QuorumqError) => void;
  /** The stream generation it was last written on (0: not yet). */
  sentOn: number;
  /** Whether it was written on an earlier stream too (a re-send). */
  resent: boolean;
  /** Times the broker answered it with a retriable failure (UNAVAILABLE), and since when. */
  failures: number;
  failingSince: number | undefined;
}

type PublishCall = DuplexCall<readonly OutgoingPublish[]>;

/**
 * Publishes one `PublishBatch` holds at most: the broker refuses a batch of more than its
 * `maxPublishesPerBatch` (10,000 by default) whole, with RESOURCE_EXHAUSTED.
 */
export const BATCH_PUBLISHES_MAX = 1_000;
/**
 * How far behind the highest sequence it stored a queue still tells a producer's messages
 * apart (the broker's dedup reorder window): below it, the broker cannot tell whether a
 * sequence was stored and refuses it (SEQUENCE_TOO_OLD). With a producerId, `maxInFlight`
 * bounds the sequences in flight: a publish goes out only when its sequence is less than
 * `maxInFlight` past the oldest unconfirmed one, so that bounds `maxInFlight`.
 */
export const DEDUP_WINDOW = 1024;
/**
 * Publishes in a row to one queue after which a stream that carried several follows that
 * queue's leader again (see Publisher.followLeader). Measured (50,000 at 256 in flight on a
 * queue led elsewhere than the one the publisher had published 20,000 to before): forwarded
 * for good, 20,900-21,600 publishes/s and p50 9.8-10.5 ms; following, 27,100-27,500/s and
 * 7.4-7.6 ms, as a new publisher (27,000-27,900/s, 7.1-7.5 ms).
 */
export const FOLLOW_AFTER_IN_A_ROW = 64;
/** A batch is closed once its messages reach this many bytes (a larger message goes alone). */
export const BATCH_BYTES_MAX = 4 * 1024 * 1024;

/**
 * Publishes over one `PublishStream`, with up to `maxInFlight` outcomes outstanding.
 *
 * Without a producerId, publishes in flight when the stream breaks reject with a retriable
 * QuorumqError (reason 'STREAM_BROKEN'); the next publish opens a new stream. With a producerId,
 * the publisher reopens the stream (on the next node, with back-off, for at most the client's
 * `failoverTimeoutMs`) and re-sends every unconfirmed message with its original sequence; a
 * DUPLICATE outcome for a re-sent message resolves as 'confirmed'. With a producerId, a message
 * the broker answers UNAVAILABLE (its queue's leadership moved while it held the message, or
 * the queue has no leader yet) restarts the stream the same way (every unconfirmed message
 * re-sent in order), for at most `failoverTimeoutMs` of that message failing; without one,
 * that publish rejects with the retriable error.
 */
export class Publisher {
  private readonly maxInFlight: number;
  private readonly producerId: string | undefined;
  private readonly exchange: string;
  private readonly pending = new Map<number, Pending>();
  /** Publishes waiting for room, oldest first (`slotHead` is the oldest's index). */
  private slotWaiters: Array<() => void> = [];
  private slotHead = 0;
  private readonly flushWaiters: Array<() => void> = [];
  private slotsUsed = 0;
  private nextId = 1;
  private nextSequence: number;
  /**
   * With a producerId: the sequences below this one have given their slots back. A slot is
   * given back only when every sequence before it is settled too, so the slots in use cover
   * the whole span from the oldest unconfirmed sequence to the newest: one message held up
   * (on a node that lost its leadership) while later ones are confirmed stops new publishes
   * at `maxInFlight` past it, instead of letting the producer run beyond the broker's window.
   */
  private spanStart: number;
  private call: PublishCall | undefined;
  private outbox: OutgoingPublish[] = [];
  private address = '';
  private generation = 0;
  private failures = 0;
  private failingSince: number | undefined;
  private reconnectTimer: NodeJS.Timeout | undefined;
  /** Waiting for a node's connection before opening the stream there (connectThenOpen). */
  private connecting = false;
  private preferred: string | undefined;
  private closed = false;

  /** A new stream is on its way (a back-off timer, or a connection being waited for). */
  private get restarting(): boolean {
    return this.reconnectTimer !== undefined || this.connecting;
  }
  /** Pending publishes written on the current stream (the generation's). */
  private onStream = 0;
  /**
   * The queue every publish written on the current stream went to (by the default exchange);
   * null when they went to several, or through another exchange; undefined before the first.
   */
  private streamQueue: string | null | undefined;
  /** The queue of the last publish written (null: through an exchange), and how many in a row went there. */
  private lastQueue: string | null | undefined;
  private inARow = 0;
  /**
   * The leader of `streamQueue`, when the stream's node forwards to it (PublishResponse.leader):
   * new publishes are held until those on the stream are settled, then the stream moves there.
   */
  private moveTo: string | undefined;

  constructor(private readonly transport: Transport, options: PublisherOptions = {}) {
    this.maxInFlight = options.maxInFlight ?? 256;
    if (!Number.isInteger(this.maxInFlight) || this.maxInFlight < 1) throw new TypeError('maxInFlight must be a positive integer');
    this.producerId = options.producerId === '' ? undefined : options.producerId;
    if (this.producerId !== undefined && this.maxInFlight > DEDUP_WINDOW) {
      throw new TypeError(
        `maxInFlight must be at most ${DEDUP_WINDOW} with a producerId: a queue tells re-sent messages apart only within ${DEDUP_WINDOW} sequences of the highest it stored`,
      );
    }
    this.exchange = options.exchange ?? '';
    this.nextSequence = options.firstSequence ?? Date.now() * 1000;
    this.spanStart = this.nextSequence;
  }

  /** Publishes awaiting their outcome (sent or waiting to be re-sent). */
  get inFlight(): number {
    return this.pending.size;
  }

  /**
   * Publishes one message; resolves with its outcome (rejects with a QuorumqError for FAILED).
   * When `maxInFlight` publishes are outstanding, waits for room first (in call order).
   */
  publish(routingKey: string, body: Body, options: PublisherPublishOptions = {}): Promise<PublishResult> {
    if (this.closed) return Promise.reject(closedError());
    let request: quorumq.v1.PublishRequest.$Properties;
    try {
      request = encodePublish(options.exchange ?? this.exchange, routingKey, body, options);
    } catch (error) {
      return Promise.reject(error);
    }
    // Not an async function: with room, the publish goes out without an extra promise.
    const wait = this.acquire();
    if (wait === undefined) return this.send(request);
    return wait.then(() => {
      if (this.closed) {
        this.release();
        throw closedError();
      }
      return this.send(request);
    });
  }

  /** Sends a publish that has its slot. */
  private send(request: quorumq.v1.PublishRequest.$Properties): Promise<PublishResult> {
    return new Promise<PublishResult>((resolve, reject) => {
      const id = this.nextId++;
      // `request` is this publish's own object: it is completed in place.
      request.publishId = id;
      if (this.producerId !== undefined) {
        request.producerId = this.producerId;
        request.sequence = this.nextSequence++;
      }
      const parts = messageParts(request.message ?? {});
      const wire: OutgoingPublish = {
        publishId: id,
        exchange: request.exchange ?? '',
        mandatory: request.mandatory ?? false,
        producerId: request.producerId ?? undefined,
        sequence: request.sequence == null ? undefined : wireNumber(request.sequence),
        body: parts.body,
        rest: parts.rest,
      };
      const entry: Pending = { id, request, wire, resolve, reject, sentOn: 0, resent: false, failures: 0, failingSince: undefined };
      this.pending.set(id, entry);
      if (this.call !== undefined) this.write(entry);
      else if (!this.restarting) this.open();
    });
  }

  /** Waits until every publish made so far has its outcome. */
  flush(): Promise<void> {
    if (this.pending.size === 0) return Promise.resolve();
    return new Promise((resolve) => this.flushWaiters.push(resolve));
  }

  /** Flushes, then ends the stream. Later publishes reject. */
  async close(): Promise<void> {
    if (this.closed) return;
    await this.flush();
    this.shutdown();
  }

  /** Ends the stream now; outstanding publishes reject with a retriable error. */
  destroy(): void {
    this.shutdown();
    this.failAll(brokenStreamError('the publisher was destroyed'));
  }

  private shutdown(): void {
    this.closed = true;
    if (this.reconnectTimer !== undefined) clearTimeout(this.reconnectTimer);
    this.reconnectTimer = undefined;
    const call = this.call;
    this.call = undefined;
    this.generation += 1;
    if (call !== undefined) {
      call.end();
      // Give the broker a moment to end the call itself, then cancel it.
      setTimeout(() => call.cancel(), 1_000).unref();
    }
    const waiters = this.slotWaiters.slice(this.slotHead);
    this.slotWaiters = [];
    this.slotHead = 0;
    for (const wake of waiters) wake();
  }

  private acquire(): Promise<void> | undefined {
    if (this.slotsUsed < this.maxInFlight && this.slotHead === this.slotWaiters.length) {
      this.slotsUsed += 1;
      return undefined;
    }
    return new Promise((resolve) => this.slotWaiters.push(resolve));
  }

  /** Frees a slot, handing it to the longest waiter if any. */
  private release(): void {
    // A head index instead of shift(): O(1) however many publishes wait.
    const next = this.slotHead < this.slotWaiters.length ? this.slotWaiters[this.slotHead++] : undefined;
    if (this.slotHead === this.slotWaiters.length) {
      this.slotWaiters = [];
      this.slotHead = 0;
    } else if (this.slotHead > 1024 && this.slotHead * 2 > this.slotWaiters.length) {
      this.slotWaiters = this.slotWaiters.slice(this.slotHead);
      this.slotHead = 0;
    }
    if (next !== undefined) next();
    else this.slotsUsed -= 1;
  }

  private settle(entry: Pending, outcome: { result?: PublishResult; error?: QuorumqError }): void {
    if (!this.pending.delete(entry.id)) return;
    if (entry.sentOn === this.generation && this.call !== undefined) this.onStream -= 1;
    if (this.moveTo !== undefined && this.onStream === 0) this.move();
    if (this.producerId === undefined) this.release();
    else this.releaseSpan();
    if (outcome.error !== undefined) entry.reject(outcome.error);
    else if (outcome.result !== undefined) entry.resolve(outcome.result);
    if (this.pending.size === 0) for (const wake of this.flushWaiters.splice(0)) wake();
  }

  /** With a producerId: gives back the slots of the settled sequences below the oldest unsettled one. */
  private releaseSpan(): void {
    // `pending` is in publish order, which is sequence order.
    const oldest = this.pending.values().next();
    const start = oldest.done === true ? this.nextSequence : (oldest.value.wire.sequence ?? this.nextSequence);
    for (; this.spanStart < start; this.spanStart += 1) this.release();
  }

  private failAll(error: QuorumqError): void {
    for (const entry of [...this.pending.values()]) this.settle(entry, { error });
  }

  /**
   * Queues a publish for the stream; everything queued in one callback (with its microtasks)
   * leaves as one batch. A microtask, not an immediate: gRPC's HTTP/2 session sends what was
   * written in an immediate only in the next event-loop turn.
   */
  private write(entry: Pending): void {
    // Held while the stream moves (written on the next one, in order).
    if (this.call === undefined || this.moveTo !== undefined) return;
    if (entry.sentOn !== this.generation) {
      if (entry.sentOn !== 0) entry.resent = true;
      entry.sentOn = this.generation;
      this.onStream += 1;
    }
    const queue = entry.wire.exchange === '' ? (entry.request.message?.routingKey ?? '') : null;
    if (queue !== null && queue === this.lastQueue) this.inARow += 1;
    else {
      this.lastQueue = queue;
      this.inARow = 1;
    }
    if (this.streamQueue === undefined) this.streamQueue = queue;
    // A stream that carried several queues is one queue's again once that many publishes in
    // a row went to it: a publisher that went on from one queue to another follows the new
    // one's leader, one that alternates stays where it is.
    else if (this.streamQueue !== queue) this.streamQueue = this.inARow >= FOLLOW_AFTER_IN_A_ROW ? queue : null;
    if (this.outbox.length === 0) queueMicrotask(() => this.flushOutbox());
    this.outbox.push(entry.wire);
  }

  /** Writes the outbox as batches of at most BATCH_PUBLISHES_MAX publishes and about BATCH_BYTES_MAX bytes. */
  private flushOutbox(): void {
    const publishes = this.outbox;
    this.outbox = [];
    const call = this.call;
    if (call === undefined) return;
    let start = 0;
    let bytes = 0;
    for (let i = 0; i < publishes.length; i++) {
      const p = publishes[i]!;
      const size = (p.body?.byteLength ?? 0) + p.rest.byteLength;
      if (i > start && (i - start >= BATCH_PUBLISHES_MAX || bytes + size > BATCH_BYTES_MAX)) {
        call.write(publishes.slice(start, i));
        start = i;
        bytes = 0;
      }
      bytes += size;
    }
    if (start < publishes.length) call.write(start === 0 ? publishes : publishes.slice(start));
  }

  private open(): void {
    this.reconnectTimer = undefined;
    if (this.closed) return;
    let address: string;
    try {
      address = this.preferred ?? this.leaderOfFirstPending() ?? this.transport.currentAddress();
      this.preferred = undefined;
      if (!this.transport.isStreamConnected(address)) {
        this.connectThenOpen(address);
        return;
      }
    } catch (error) {
      this.failAll(toQuorumqError(error));
      return;
    }
    this.openAt(address);
  }

  /**
   * Opens the stream at `address` once its connection is up. Nothing is sent before, so a
   * node that does not connect (down, or paused: Transport.connected) is passed over for the
   * next one without failing a publish, with or without a producerId.
   */
  private connectThenOpen(address: string): void {
    this.connecting = true;
    this.transport.streamConnected(address).then(
      () => {
        this.connecting = false;
        if (!this.closed) this.openAt(address);
      },
      (thrown: unknown) => {
        this.connecting = false;
        if (!this.closed) this.retryElsewhere(toQuorumqError(thrown, address), address);
      },
    );
  }

  private openAt(address: string): void {
    let call: PublishCall;
    try {
      const method = BrokerService.publishStream;
      // Batches are written by hand (@quorumq/proto's publish.js): bodies are copied straight
      // into them; outcomes are read by hand too (readPublishOutcomes).
      call = this.transport.openStream(address, method.path, encodePublishBatch, readPublishOutcomes);
    } catch (error) {
      this.failAll(toQuorumqError(error));
      return;
    }
    this.generation += 1;
    const generation = this.generation;
    this.outbox = [];
    this.onStream = 0;
    this.streamQueue = undefined;
    this.moveTo = undefined;
    this.call = call;
    this.address = address;
    call.on('data', (batch: quorumq.v1.PublishOutcomes) => {
      if (generation !== this.generation) return;
      this.failures = 0;
      this.failingSince = undefined;
      for (const response of batch.outcomes) this.onResponse(response, address);
    });
    // 'status' ends every call; 'error' repeats it for non-OK ones.
    call.on('error', () => undefined);
    call.on('status', (status: StatusObject) => {
      if (generation !== this.generation) return;
      this.onBroken(status, address);
    });
    for (const entry of this.pending.values()) this.write(entry);
  }

  private onResponse(response: quorumq.v1.PublishResponse.$Properties, address: string): void {
    const entry = this.pending.get(wireNumber(response.publishId));
    if (entry === undefined) return;
    let result: PublishResult;
    try {
      result = toPublishResult(response, address);
    } catch (error) {
      const failure = toQuorumqError(error, address);
      if (!this.resendLater(entry, failure, address)) this.settle(entry, { error: failure });
      return;
    }
    entry.failures = 0;
    entry.failingSince = undefined;
    // A re-sent message the broker had already committed: it is confirmed.
    if (result.outcome === 'duplicate' && entry.resent) result = { ...result, outcome: 'confirmed' };
    const leader = response.leader ?? '';
    if (leader !== '') this.followLeader(result.queues, leader, address);
    this.settle(entry, { result });
  }

  /**
   * The stream's node forwarded a publish to `queues`' leader (a hop through the broker per
   * batch). When every publish on the stream goes to that one queue, the stream moves to the
   * leader: new publishes wait until those written are settled (so order holds and nothing is
   * sent twice), then go out on a stream opened there.
   */
  private followLeader(queues: readonly string[], leader: string, address: string): void {
    if (queues.length !== 1 || !this.transport.leaderRouting) return;
    const queue = queues[0]!;
    this.transport.learnLeader(queue, leader);
    const target = this.transport.resolveNode(leader);
    if (target === undefined || target === address || this.moveTo !== undefined || this.closed) return;
    if (this.streamQueue !== queue || this.call === undefined || address !== this.address) return;
    this.moveTo = target;
  }

  /** Ends the stream whose publishes are all settled, and opens one at `moveTo`. */
  private move(): void {
    const target = this.moveTo;
    const call = this.call;
    this.moveTo = undefined;
    if (target === undefined || call === undefined || this.closed) return;
    this.call = undefined;
    this.generation += 1;
    call.end();
    setTimeout(() => call.cancel(), 1_000).unref();
    this.preferred = target;
    if (this.pending.size > 0 && !this.restarting) this.open();
  }

  /**
   * With a producerId, a message the broker could not settle (UNAVAILABLE: the outcome is
   * unknown, or nothing was done) is re-sent with its sequence, and the broker's
   * deduplication keeps one copy. Not on its own: the broker tells sequences apart only
   * within a window behind the highest it stored (DEDUP_REORDER_WINDOW), and the messages
   * sent after this one keep being stored. So the stream is restarted, as when it breaks:
   * after a back-off every unconfirmed message is re-sent in order on a new stream. False
   * when the message must fail instead (no producerId, another error, or it has been failing
   * for `failoverTimeoutMs`).
   */
  private resendLater(entry: Pending, error: QuorumqError, address: string): boolean {
    if (this.producerId === undefined || this.closed || !shouldFailover(error)) return false;
    const now = Date.now();
    entry.failingSince ??= now;
    entry.failures += 1;
    const wait = this.transport.backoff(entry.failures - 1);
    if (now + wait - entry.failingSince >= this.transport.failoverTimeoutMs) return false;
    if (this.restarting || this.call === undefined) return true; // restarting already
    this.moveTo = undefined;
    // Outcomes still coming on this stream are dropped: their messages are re-sent, and a
    // DUPLICATE for one counts as confirmed.
    const call = this.call;
    this.call = undefined;
    this.generation += 1;
    call.end();
    setTimeout(() => call.cancel(), 1_000).unref();
    if (error.leader !== undefined && error.leader !== address) this.preferred = error.leader;
    this.reconnectTimer = setTimeout(() => this.open(), wait);
    return true;
  }

  private onBroken(status: StatusObject, address: string): void {
    this.call = undefined;
    this.generation += 1;
    this.moveTo = undefined;
    if (this.closed) return;
    const error = status.code === 0
      ? brokenStreamError(`the publish stream to ${address} ended`, address)
      : toQuorumqError(status, address);
    const broken = shouldFailover(error);
    this.transport.markFailed(address);
    // The node the stream broke at is no longer taken for the queue's leader (it may be
    // down): the next stream opens at the leader the error names, or at the next node.
    const queue = this.queueOfFirstPending();
    if (queue !== undefined) this.transport.forgetLeader(queue, address);
    if (error.leader !== undefined && error.leader !== address) this.preferred = error.leader;
    if (!broken) {
      this.failAll(error);
      return;
    }
    if (this.producerId === undefined) {
      this.failAll(brokenStreamError(`the publish stream to ${address} broke: ${error.message}`, address, error));
      return;
    }
    // Re-send the unconfirmed messages on another node.
    this.retryElsewhere(error, address);
  }

  /** Opens the stream again, at the next node (a round over all of them backs off), until `failoverTimeoutMs`. */
  private retryElsewhere(error: QuorumqError, address: string): void {
    this.transport.markFailed(address);
    const queue = this.queueOfFirstPending();
    if (queue !== undefined) this.transport.forgetLeader(queue, address);
    if (this.pending.size === 0) return;
    this.failures += 1;
    this.failingSince ??= Date.now();
    const nodes = this.transport.nodes.length;
    const wait = this.failures % nodes === 0 ? this.transport.backoff(this.failures / nodes - 1) : 0;
    if (Date.now() + wait - this.failingSince >= this.transport.failoverTimeoutMs) {
      this.failures = 0;
      this.failingSince = undefined;
      this.failAll(brokenStreamError(`no node accepted the publish stream: ${error.message}`, address, error));
      return;
    }
    this.reconnectTimer = setTimeout(() => this.open(), wait);
  }

  /**
   * A publish to the default exchange goes to the queue named by its routing key: open the
   * stream at that queue's leader when known (no forwarding hop in the broker).
   */
  private leaderOfFirstPending(): string | undefined {
    const queue = this.queueOfFirstPending();
    return queue === undefined ? undefined : this.transport.leaderOf(queue);
  }

  /** The queue the first unsettled publish goes to, when it goes to the default exchange. */
  private queueOfFirstPending(): string | undefined {
    for (const entry of this.pending.values()) {
      if ((entry.request.exchange ?? '') !== '') return undefined;
      return entry.request.message?.routingKey ?? '';
    }
    return undefined;
  }

  /** The node the current stream goes to ('' before the first publish). */
  get node(): string {
    return this.address;
  }
}

function closedError(): QuorumqError {
  return new QuorumqError('the publisher is closed', { code: 'CANCELLED', reason: SdkReason.PUBLISHER_CLOSED, retriable: false });
}
