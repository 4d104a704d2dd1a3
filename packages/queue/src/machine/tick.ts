/**
 * Time-driven work, run by the replicated `tick` command (spec 6): release delayed
 * messages, expire messages wherever they wait, time out deliveries, forget idle
 * producers and expire an unused queue. `scheduleNextTick` asks the leader for the next
 * tick through an effect, so that every deadline is met within one tick.
 */
import { deadLetter, isExpired, pendingDeadLetterEffects } from './deadletter.js';
import { release, type MessageHeader, type QueueState } from './state.js';
import type { Effect } from './types.js';
import { forgetIdleProducers } from './dedup.js';
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

/** Spec 3: a delivery unacked longer than consumer_timeout is returned and counted. */
function timeOutDeliveries(state: QueueState, now: number, effects: Effect[]): void {
  const timeoutMs = state.args.consumerTimeoutMs;
  if (timeoutMs === null) return;
  for (const consumer of state.consumers.values()) {
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

/** Spec 7 `expires`: unused (no consumers, no get, no redeclare) for that long. */
function maybeExpireQueue(state: QueueState, now: number, effects: Effect[]): void {
  const expiresMs = state.args.expiresMs;
  if (expiresMs === null || state.consumers.size > 0) return;
  if (state.lastUsedAt + expiresMs <= now) effects.push({ type: 'deleteQueue', reason: 'expires' });
}

function earliestDeadline(state: QueueState): number {
  let earliest = Number.POSITIVE_INFINITY;
  earliest = Math.min(earliest, state.expiryHeap.peekDeadline() ?? earliest, state.delayedHeap.peekDeadline() ?? earliest);
  const timeoutMs = state.args.consumerTimeoutMs;
  if (timeoutMs !== null) {
    for (const consumer of state.consumers.values()) {
      // Unacked is in tag order and tags are handed out as time goes on: the first is oldest.
      for (const messageId of consumer.unacked.values()) {
        const message = state.messages.get(messageId);
        if (message !== undefined) earliest = Math.min(earliest, message.deliveredAt + timeoutMs);
        break;
      }
    }
  }
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
 * dead-letters still awaiting confirmation and the next tick. Safe to run twice.
 */
export function leaderEffects(state: QueueState, now: number): Effect[] {
  if (state.deleted) return [];
  const effects = pendingDeadLetterEffects(state);
  const earliest = earliestDeadline(state);
  if (earliest !== Number.POSITIVE_INFINITY) effects.push({ type: 'scheduleTick', at: Math.max(earliest, now) });
  return effects;
}
