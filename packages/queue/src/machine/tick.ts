/**
 * Time-driven work, run by the replicated `tick` command (spec 6): release delayed
 * messages, expire messages wherever they wait, time out deliveries, forget idle
 * producers and expire an unused queue. `scheduleNextTick` asks the leader for the next
 * tick through an effect, so that every deadline is met within one tick.
 */
import { deadLetter, isExpired, pendingDeadLetterEffects } from './deadletter.js';
import { release, type DeliveryHolder, type MessageHeader, type QueueState } from './state.js';
import type { Effect } from './types.js';
import { forgetIdleProducers } from './dedup.js';
import { pendingMoveEffects } from './move.js';
import { returnMessage } from './returns.js';

export function runTick(state: QueueState, now: number, effects: Effect[]): void {
  state.tickAt = -1;
  expireDue(state, now, effects);
  releaseDue(state, now);
  timeOutDeliveries(state, now, effects);
  forgetIdleProducers(state, now);
  maybeExpireQueue(state, now, effects);
}

/** Messages in ready or delayed expire on time; a delivered one expires when it returns. */
function expireDue(state: QueueState, now: number, effects: Effect[]): void {
  for (;;) {
    const deadline = state.expiryHeap.peekDeadline();
    if (deadline === undefined || deadline > now) return;
    const message = state.messages.get(state.expiryHeap.pop() ?? -1);
    if (message === undefined || message.expiresAt !== deadline || !isExpired(message, now)) continue;
    if (message.place === 'ready' || message.place === 'delayed') deadLetter(state, message, 'expired', now, effects);
  }
}

function releaseDue(state: QueueState, now: number): void {
  for (;;) {
    const deadline = state.delayedHeap.peekDeadline();
    if (deadline === undefined || deadline > now) return;
    const message = state.messages.get(state.delayedHeap.pop() ?? -1);
    if (message !== undefined && message.place === 'delayed' && message.notBefore === deadline) release(state, message);
  }
}

/** Subscribed consumers, then get holders: everyone holding unacked deliveries, in a fixed order. */
function holders(state: QueueState): DeliveryHolder[] {
  return [...state.consumers.values(), ...state.getHolders.values()];
}

/**
 * Spec 3: a delivery unacked longer than consumer_timeout is returned and counted, a get
 * holder's too (which then goes, once it holds nothing).
 */
function timeOutDeliveries(state: QueueState, now: number, effects: Effect[]): void {
  const timeoutMs = state.args.consumerTimeoutMs;
  if (timeoutMs === null) return;
  for (const consumer of holders(state)) {
    const due: MessageHeader[] = [];
    for (const messageId of consumer.unacked.values()) {
      const message = state.messages.get(messageId);
      if (message !== undefined && message.deliveredAt + timeoutMs <= now) due.push(message);
    }
    for (const message of due) {
      effects.push({ type: 'consumerTimedOut', consumerId: consumer.id, deliveryTag: message.deliveryTag });
      returnMessage(state, message, now, now, effects);
    }
  }
}

/**
 * Spec 7 `expires`: unused (no consumers, no get, no redeclare) for that long. Get holders
 * are not consumers: a get renews the lease, holding its message does not.
 */
function maybeExpireQueue(state: QueueState, now: number, effects: Effect[]): void {
  const expiresMs = state.args.expiresMs;
  if (expiresMs === null || state.consumers.size > 0) return;
  if (state.lastUsedAt + expiresMs <= now) effects.push({ type: 'deleteQueue', reason: 'expires' });
}

/** Unacked is in tag order and tags are handed out as time goes on: the first is oldest. */
function oldestDeliveryAt(state: QueueState, holder: DeliveryHolder): number {
  for (const messageId of holder.unacked.values()) {
    const message = state.messages.get(messageId);
    return message === undefined ? Number.POSITIVE_INFINITY : message.deliveredAt;
  }
  return Number.POSITIVE_INFINITY;
}

function earliestDeadline(state: QueueState): number {
  let earliest = Number.POSITIVE_INFINITY;
  earliest = Math.min(earliest, state.expiryHeap.peekDeadline() ?? earliest, state.delayedHeap.peekDeadline() ?? earliest);
  const timeoutMs = state.args.consumerTimeoutMs;
  if (timeoutMs !== null) {
    for (const consumer of state.consumers.values()) earliest = Math.min(earliest, oldestDeliveryAt(state, consumer) + timeoutMs);
    for (const holder of state.getHolders.values()) earliest = Math.min(earliest, oldestDeliveryAt(state, holder) + timeoutMs);
  }
  // Get holders do not count: only subscribed consumers keep an unused queue alive.
  if (state.args.expiresMs !== null && state.consumers.size === 0) earliest = Math.min(earliest, state.lastUsedAt + state.args.expiresMs);
  return earliest;
}

/** Asks for a tick at the earliest deadline, unless one at or before it is already asked. */
export function scheduleNextTick(state: QueueState, now: number, effects: Effect[]): void {
  const earliest = earliestDeadline(state);
  if (earliest === Number.POSITIVE_INFINITY) return;
  const at = Math.max(earliest, now);
  if (state.tickAt !== -1 && state.tickAt <= at && state.tickAt > now) return;
  state.tickAt = at;
  effects.push({ type: 'scheduleTick', at });
}

/**
 * What a newly elected leader must (re)issue, since effects run on the leader only: the
 * dead-letters still awaiting confirmation, the moves still in flight and the next tick.
 * Safe to run twice.
 */
export function leaderEffects(state: QueueState, now: number): Effect[] {
  if (state.deleted) return [];
  const effects = [...pendingDeadLetterEffects(state), ...pendingMoveEffects(state)];
  const earliest = earliestDeadline(state);
  if (earliest !== Number.POSITIVE_INFINITY) effects.push({ type: 'scheduleTick', at: Math.max(earliest, now) });
  return effects;
}
