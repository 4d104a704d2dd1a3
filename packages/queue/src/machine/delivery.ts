/**
 * Choosing consumers and handing out ready messages within their credit (spec 3):
 * higher consumer priority first, round-robin among equals; with single active consumer
 * only the active one receives.
 */
import { deadLetter, isExpired } from './deadletter.js';
import { assert } from './errors.js';
import { creditOf, deliverTo, takeNextReady, type ConsumerState, type MessageHeader, type QueueState } from './state.js';
import type { DeliveredMessage, Effect } from './types.js';

/** Bounds the work of one apply; the rest is delivered by the next command or tick. */
export const DELIVERIES_PER_APPLY_MAX = 4096;

export function pickConsumer(state: QueueState): ConsumerState | undefined {
  if (state.args.singleActiveConsumer) {
    const active = state.activeConsumerId === null ? undefined : state.consumers.get(state.activeConsumerId);
    return active !== undefined && creditOf(active) > 0 ? active : undefined;
  }
  let best: ConsumerState | undefined;
  for (const consumer of state.consumers.values()) {
    if (creditOf(consumer) <= 0) continue;
    if (best === undefined || consumer.priority > best.priority || (consumer.priority === best.priority && consumer.lastServedSeq < best.lastServedSeq)) {
      best = consumer;
    }
  }
  return best;
}

/** The next ready message that has not expired; expired ones are dead-lettered on the way. */
export function takeLiveReady(state: QueueState, now: number, effects: Effect[]): MessageHeader | undefined {
  for (;;) {
    const message = takeNextReady(state);
    if (message === undefined || !isExpired(message, now)) return message;
    deadLetter(state, message, 'expired', now, effects);
  }
}

export function describeDelivery(message: MessageHeader, deliveryTag: number): DeliveredMessage {
  return {
    messageId: message.id,
    deliveryTag,
    deliveryCount: message.deliveryCount,
    redelivered: message.deliveryCount > 0,
    sizeBytes: message.sizeBytes,
    exchange: message.exchange,
    routingKeys: message.routingKeys,
    deaths: message.deaths,
  };
}

/** Returns true when it stopped at the per-apply bound with work left (ask for a tick). */
export function deliverAvailable(state: QueueState, now: number, effects: Effect[]): boolean {
  for (let delivered = 0; delivered < DELIVERIES_PER_APPLY_MAX; delivered += 1) {
    if (state.totals.ready.count === 0) return false;
    const consumer = pickConsumer(state);
    if (consumer === undefined) return false;
    const message = takeLiveReady(state, now, effects);
    if (message === undefined) return false;
    const tag = deliverTo(state, message, consumer, now);
    state.serveSeq += 1;
    consumer.lastServedSeq = state.serveSeq;
    effects.push({ type: 'deliver', consumerId: consumer.id, ...describeDelivery(message, tag) });
    assert(consumer.prefetch === 0 || consumer.unacked.size <= consumer.prefetch, 'delivered beyond credit');
  }
  return state.totals.ready.count > 0 && pickConsumer(state) !== undefined;
}

/** Single active consumer hand-over: highest priority, then oldest subscription. */
export function electActiveConsumer(state: QueueState): void {
  if (!state.args.singleActiveConsumer) return;
  if (state.activeConsumerId !== null && state.consumers.has(state.activeConsumerId)) return;
  let best: ConsumerState | undefined;
  for (const consumer of state.consumers.values()) {
    if (best === undefined || consumer.priority > best.priority || (consumer.priority === best.priority && consumer.registeredIndex < best.registeredIndex)) {
      best = consumer;
    }
  }
  state.activeConsumerId = best?.id ?? null;
}
