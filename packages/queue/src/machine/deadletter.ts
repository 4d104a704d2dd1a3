/**
 * Dead-lettering (spec 5): record the death, route to the dead-letter exchange with the
 * DLX routing-key rule, and either forget the message (at-most-once) or hold it until
 * the targets confirmed it (at-least-once, the default).
 */
import { isTombstone } from './compaction.js';
import { recordDeath, type DeadLetterReason } from './deaths.js';
import { holdForDeadLetter, remove, type MessageHeader, type QueueState } from './state.js';
import type { Effect } from './types.js';

export function deadLetter(state: QueueState, message: MessageHeader, reason: DeadLetterReason, now: number, effects: Effect[]): void {
  if (reason === 'expired' && state.compaction !== null && isTombstone(state, message.id)) {
    // Spec 9: a tombstone's retention (or TTL) ended; it is dropped, never dead-lettered.
    state.compaction.tombstonesExpired += 1;
    remove(state, message, 'compacted');
    effects.push({ type: 'drop', messageId: message.id, reason: 'compacted' });
    return;
  }
  const exchange = state.args.deadLetterExchange;
  if (exchange === null) {
    // Spec 4: without a DLX the message is dropped; the effect lets the server count it.
    remove(state, message, reason);
    effects.push({ type: 'drop', messageId: message.id, reason });
    return;
  }
  message.deaths = recordDeath(message.deaths, {
    queue: state.name,
    reason,
    exchange: message.exchange,
    routingKeys: message.routingKeys,
    time: now,
    originalExpirationMs: reason === 'expired' && message.expirationMs >= 0 ? message.expirationMs : null,
  });
  // Spec 5: without a DLX routing key the message keeps its original routing keys.
  const routingKey = state.args.deadLetterRoutingKey;
  const routingKeys = routingKey === null ? [...message.routingKeys] : [routingKey];
  const confirmRequired = state.args.deadLetterStrategy === 'at-least-once';
  effects.push({ type: 'deadLetter', messageId: message.id, reason, exchange, routingKeys, deaths: message.deaths, confirmRequired });
  if (confirmRequired) holdForDeadLetter(state, message);
  else remove(state, message, reason);
}

/**
 * Spec 9: a newer message of the key replaces this one: dead-lettered as `compacted` when
 * the queue asks for it (`compactionDeadLetter`), else dropped (counted).
 */
export function compact(state: QueueState, message: MessageHeader, now: number, effects: Effect[]): void {
  if (state.compaction !== null) state.compaction.replaced += 1;
  if (state.args.compactionDeadLetter === true) {
    deadLetter(state, message, 'compacted', now, effects);
    return;
  }
  remove(state, message, 'compacted');
  effects.push({ type: 'drop', messageId: message.id, reason: 'compacted' });
}

/** At-least-once: the targets committed the message, so it may leave the source. */
export function confirmDeadLetter(state: QueueState, messageId: number): void {
  const message = state.messages.get(messageId);
  // A confirm may arrive twice (effects run twice); the second one finds nothing.
  if (message === undefined || message.place !== 'deadLettering') return;
  const reason = message.deaths?.last.reason;
  remove(state, message, reason ?? 'rejected');
}

/** Effects a new leader must re-issue: dead-letters still waiting for confirmation. */
export function pendingDeadLetterEffects(state: QueueState): Effect[] {
  const effects: Effect[] = [];
  const exchange = state.args.deadLetterExchange;
  if (exchange === null) return effects;
  for (const message of state.messages.values()) {
    if (message.place !== 'deadLettering' || message.deaths === null) continue;
    const routingKey = state.args.deadLetterRoutingKey;
    effects.push({
      type: 'deadLetter',
      messageId: message.id,
      reason: message.deaths.last.reason,
      exchange,
      routingKeys: routingKey === null ? [...message.routingKeys] : [routingKey],
      deaths: message.deaths,
      confirmRequired: true,
    });
  }
  return effects;
}

/** Expiry is dead-lettering with reason `expired`, wherever the message waits. */
export function isExpired(message: MessageHeader, now: number): boolean {
  return message.expiresAt >= 0 && message.expiresAt <= now;
}
