/**
 * The bounded workload: publishers with confirms and unique values (some with producer ids),
 * consumers that ack, reject, nack or "crash" (close without acking mid-batch), and the
 * final drain of every queue.
 */
import { connect, type Publisher, type QuorumqClient } from '@quorumq/client';

import type { Attempt, History } from './history.js';
import { Prng } from './prng.js';
import type { ClientTuning } from './target.js';

export const DLX = 'chaos.dlx';
export const QUEUES = {
  /** A plain work queue. */
  work: 'chaos.work',
  /** Dead-letters rejected messages to DLX -> DLQ (the DLX pair). */
  dlxSource: 'chaos.dlx-src',
  /** delivery limit 3, over the limit to DLX -> DLQ. */
  limited: 'chaos.limited',
  dlq: 'chaos.dlq',
} as const;
export const ALL_QUEUES: readonly string[] = [QUEUES.work, QUEUES.dlxSource, QUEUES.limited, QUEUES.dlq];
export const DEAD_LETTER_QUEUES: ReadonlySet<string> = new Set([QUEUES.dlq]);

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Declares the queues, retrying while the cluster settles. */
export async function declareTopology(client: QuorumqClient): Promise<void> {
  const deadline = Date.now() + 60_000;
  for (;;) {
    try {
      await client.declareExchange(DLX, 'fanout');
      await client.declareQueue(QUEUES.dlq);
      await client.bind({ source: DLX, queue: QUEUES.dlq });
      await client.declareQueue(QUEUES.work);
      await client.declareQueue(QUEUES.dlxSource, { deadLetterExchange: DLX, deadLetterStrategy: 'at-least-once' });
      await client.declareQueue(QUEUES.limited, { deliveryLimit: 3, deadLetterExchange: DLX, deadLetterStrategy: 'at-least-once' });
      return;
    } catch (error) {
      if (Date.now() > deadline) throw error;
      await sleep(250);
    }
  }
}

export interface PublisherSpec {
  readonly name: string;
  readonly queue: string;
  /** With a producer id the SDK re-sends unconfirmed messages and the broker deduplicates. */
  readonly producerId: boolean;
  /** Messages per second; 0 for as fast as confirms allow. */
  readonly rate: number;
  readonly maxInFlight: number;
  /** Without a producer id: how many times a failed publish of a value is tried again. */
  readonly retries: number;
  /**
   * With a producer id: replace the publisher (a new one, a new sequence range, as after an
   * application restart) once it gave up. Default true.
   */
  readonly replaceOnFailure?: boolean;
}

export interface PublisherStats {
  readonly name: string;
  issued: number;
  confirmed: number;
  failed: number;
  restarts: number;
}

export class PublisherLoop {
  private running = true;
  private inFlight = 0;
  private broken = false;
  private done: Promise<void> | null = null;
  readonly stats: PublisherStats;

  constructor(
    readonly spec: PublisherSpec,
    private readonly client: QuorumqClient,
    private readonly history: History,
  ) {
    this.stats = { name: spec.name, issued: 0, confirmed: 0, failed: 0, restarts: 0 };
  }

  start(): this {
    this.done = this.run();
    return this;
  }

  /** Stops issuing and waits for every outstanding outcome. */
  async stop(): Promise<void> {
    this.running = false;
    await this.done;
  }

  private make(): Publisher {
    return this.client.createPublisher({
      maxInFlight: this.spec.maxInFlight,
      ...(this.spec.producerId ? { producerId: `${this.history.tag}/${this.spec.name}` } : {}),
    });
  }

  private async idle(): Promise<void> {
    while (this.inFlight > 0) await sleep(5);
  }

  private async run(): Promise<void> {
    const { spec, history } = this;
    let publisher = this.make();
    let n = 0;
    const retry: Attempt[] = [];
    let tokens = 0;
    let last = Date.now();
    const burst = Math.max(1, spec.rate / 5);
    while (this.running) {
      if (this.broken) {
        // A failure: back off a little. A producer-id publisher that gave up (no node took
        // its stream within the failover timeout) is replaced once its outcomes are in.
        await sleep(100);
        if (spec.producerId && spec.replaceOnFailure !== false) {
          await this.idle();
          publisher.destroy();
          publisher = this.make();
          this.stats.restarts += 1;
        }
        this.broken = false;
      }
      if (this.inFlight >= spec.maxInFlight) {
        await sleep(2);
        continue;
      }
      if (spec.rate > 0) {
        const now = Date.now();
        tokens = Math.min(burst, tokens + ((now - last) * spec.rate) / 1000);
        last = now;
        if (tokens < 1) {
          await sleep(Math.max(1, Math.ceil((1000 * (1 - tokens)) / spec.rate)));
          continue;
        }
        tokens -= 1;
      }
      const again = retry.shift();
      const attempt = again !== undefined ? history.attempt(again.value, again.queue, again.producerId) : history.attempt(`${history.tag}/${spec.name}/${n++}`, spec.queue, spec.producerId);
      this.inFlight += 1;
      this.stats.issued += 1;
      publisher.publish(spec.queue, attempt.value).then(
        (result) => {
          if (attempt.outcomes.length < 10) attempt.outcomes.push(`${result.outcome}@${Date.now() - history.createdAt}`);
          if (result.outcome === 'confirmed' || result.outcome === 'duplicate') {
            history.confirm(attempt);
            this.stats.confirmed += 1;
          } else {
            attempt.failures += 1;
            this.stats.failed += 1;
          }
        },
        (error: unknown) => {
          if (attempt.outcomes.length < 10) attempt.outcomes.push(`error ${(error as { code?: string }).code ?? String(error)}@${Date.now() - history.createdAt}`);
          attempt.failures += 1;
          this.stats.failed += 1;
          this.broken = true;
          if (!spec.producerId && attempt.tries <= spec.retries && this.running) retry.push(attempt);
        },
      ).finally(() => {
        this.inFlight -= 1;
      });
    }
    await this.idle();
    await publisher.close().catch(() => undefined);
  }
}

export type ConsumerMode = 'ack' | 'reject' | 'nack' | 'crash';

export interface ConsumerSpec {
  readonly name: string;
  readonly queue: string;
  readonly mode: ConsumerMode;
  readonly prefetch: number;
}

export interface ConsumerStats {
  readonly name: string;
  deliveries: number;
  acks: number;
  rejects: number;
  nacks: number;
  crashes: number;
  abandoned: number;
  errors: number;
  resubscriptions: number;
}

export class ConsumerLoop {
  private running = true;
  private client: QuorumqClient | null = null;
  private done: Promise<void> | null = null;
  readonly stats: ConsumerStats;
  private readonly rng: Prng;

  constructor(
    readonly spec: ConsumerSpec,
    private readonly addresses: readonly string[],
    private readonly history: History,
    seed: number,
    private readonly tuning: ClientTuning = {},
  ) {
    this.rng = new Prng(seed);
    this.stats = { name: spec.name, deliveries: 0, acks: 0, rejects: 0, nacks: 0, crashes: 0, abandoned: 0, errors: 0, resubscriptions: 0 };
  }

  start(): this {
    this.done = this.run();
    return this;
  }

  async stop(): Promise<void> {
    this.running = false;
    await this.client?.close().catch(() => undefined);
    await this.done;
  }

  private async run(): Promise<void> {
    const { spec, history, stats } = this;
    while (this.running) {
      const client = connect({ nodes: [...this.addresses], failoverTimeoutMs: 20_000, callTimeoutMs: 5000, ...this.tuning });
      this.client = client;
      const crashAfter = spec.mode === 'crash' ? this.rng.int(6, 40) : Number.POSITIVE_INFINITY;
      let batch = 0;
      const consumer = client.consume(spec.queue, { prefetch: spec.prefetch });
      try {
        for await (const delivery of consumer) {
          stats.deliveries += 1;
          const value = history.delivered(spec.queue, delivery.body.toString(), delivery.deliveryCount, delivery.deaths.length > 0);
          if (value === null) {
            void delivery.ack().catch(() => undefined);
            continue;
          }
          const ack = (): void => {
            history.acked(spec.queue, value);
            stats.acks += 1;
            void delivery.ack().catch(() => undefined);
          };
          if (spec.mode === 'reject' && this.rng.chance(0.2)) {
            stats.rejects += 1;
            history.settled(spec.queue, value, 'r');
            void delivery.reject().catch(() => undefined);
          } else if (spec.mode === 'nack' && this.rng.chance(0.4)) {
            stats.nacks += 1;
            history.settled(spec.queue, value, 'n');
            void delivery.nack({ requeue: true }).catch(() => undefined);
          } else if (spec.mode === 'crash') {
            batch += 1;
            if (batch <= crashAfter / 2) ack();
            else {
              stats.abandoned += 1;
              history.settled(spec.queue, value, 'h');
            }
            if (batch >= crashAfter) break;
          } else {
            ack();
          }
          if (!this.running) break;
        }
      } catch {
        stats.errors += 1;
      }
      stats.resubscriptions += consumer.resubscriptions;
      if (spec.mode === 'crash' && batch >= crashAfter) stats.crashes += 1;
      // A crash: the client goes away with deliveries unacked; the broker takes them back.
      await client.close().catch(() => undefined);
      if (this.running) await sleep(spec.mode === 'crash' ? 200 : 500);
    }
  }
}

/**
 * Drains `queue`: acks everything until the queue reports nothing ready, unacked, delayed or
 * dead-lettering twice in a row with no delivery for `idleMs`; gives up at `deadline` or
 * after `stallMs` without a delivery.
 */
export interface DrainResult {
  readonly queue: string;
  readonly consumed: number;
  /** Whether the queue reported itself empty; false: the deadline passed first. */
  readonly emptied: boolean;
  /** The last status seen: ready, unacked, delayed, deadLettering. */
  readonly last: { ready: number; unacked: number; delayed: number; deadLettering: number } | null;
  readonly ms: number;
}

export interface DrainOptions {
  readonly idleMs?: number;
  readonly stallMs?: number;
  readonly tuning?: ClientTuning;
}

export async function drainQueue(addresses: readonly string[], queue: string, history: History, deadline: number, options: DrainOptions = {}): Promise<DrainResult> {
  const idleMs = options.idleMs ?? 1500;
  const stallMs = options.stallMs ?? 60_000;
  const started = Date.now();
  let lastStatus: DrainResult['last'] = null;
  const client = connect({ nodes: [...addresses], failoverTimeoutMs: 20_000, ...options.tuning });
  let count = 0;
  let last = Date.now();
  const consumer = client.consume(queue, { prefetch: 500 });
  // Acks go in batches (ack with multiple); a value counts as consumed when its ack is sent.
  let unacked: { value: string | null; delivery: { ack(o?: { multiple?: boolean }): Promise<void> } }[] = [];
  const flush = (): void => {
    const batch = unacked;
    unacked = [];
    const tail = batch[batch.length - 1];
    if (tail === undefined) return;
    for (const item of batch) if (item.value !== null) history.acked(queue, item.value);
    void tail.delivery.ack({ multiple: true }).catch(() => undefined);
  };
  const timer = setInterval(flush, 100);
  const iterate = (async () => {
    for await (const delivery of consumer) {
      const value = history.delivered(queue, delivery.body.toString(), delivery.deliveryCount, delivery.deaths.length > 0);
      unacked.push({ value, delivery });
      if (unacked.length >= 100) flush();
      count += 1;
      last = Date.now();
    }
  })().catch(() => undefined);
  let empty = 0;
  let progressAt = Date.now();
  let progressMark = -1;
  while (Date.now() < deadline) {
    await sleep(300);
    if (count !== progressMark) {
      progressMark = count;
      progressAt = Date.now();
    }
    if (Date.now() - progressAt > stallMs) break;
    if (Date.now() - last < idleMs) continue;
    const status = await client.queueStatus(queue).catch(() => null);
    if (status !== null) lastStatus = { ready: status.ready, unacked: status.unacked, delayed: status.delayed, deadLettering: status.deadLettering };
    if (status !== null && status.leader !== '' && status.ready + status.unacked + status.delayed + status.deadLettering === 0) empty += 1;
    else empty = 0;
    if (empty >= 2) break;
  }
  clearInterval(timer);
  flush();
  await sleep(200);
  await consumer.cancel().catch(() => undefined);
  await iterate;
  await client.close().catch(() => undefined);
  return { queue, consumed: count, emptied: empty >= 2, last: lastStatus, ms: Date.now() - started };
}
