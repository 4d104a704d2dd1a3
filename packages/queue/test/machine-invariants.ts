/**
 * Whole-state checks for the property test: every message is in exactly one place
 * (ready, delayed, delivered, deadLettering or moving), every delivered one tracked by
 * its consumer or get holder (get holders non-empty, disjoint from consumers), per-place
 * totals match a recount,
 * a move's counts balance, and the enqueued count balances live + gone.
 */
import { expect } from 'vitest';
import type { Effect, Place, QueueState, Reply } from '../src/machine/index.js';

function occurrencesInReady(state: QueueState): Map<number, number> {
  const seen = new Map<number, number>();
  for (const level of state.ready) {
    for (const id of [...level.returned, ...level.fresh.toArray()]) {
      const message = state.messages.get(id);
      // Entries of messages that left lazily are allowed; live ready ones count.
      if (message?.place === 'ready') seen.set(id, (seen.get(id) ?? 0) + 1);
    }
  }
  return seen;
}

export function checkInvariants(state: QueueState): void {
  const inReady = occurrencesInReady(state);
  const totals: Record<Place, { count: number; bytes: number }> = {
    ready: { count: 0, bytes: 0 },
    delayed: { count: 0, bytes: 0 },
    delivered: { count: 0, bytes: 0 },
    deadLettering: { count: 0, bytes: 0 },
    moving: { count: 0, bytes: 0 },
  };
  for (const message of state.messages.values()) {
    totals[message.place].count += 1;
    totals[message.place].bytes += message.sizeBytes;
    if (message.place === 'ready') expect(inReady.get(message.id), `ready ${message.id} once in the ready index`).toBe(1);
    else expect(inReady.has(message.id)).toBe(false);
    if (message.place === 'delivered') {
      const consumer = state.consumers.get(message.consumerId ?? '') ?? state.getHolders.get(message.consumerId ?? '');
      expect(consumer?.unacked.get(message.deliveryTag), `delivered ${message.id} tracked by its consumer`).toBe(message.id);
    } else {
      expect(message.consumerId).toBeNull();
    }
    if (message.place === 'delayed') expect(message.notBefore).toBeGreaterThan(0);
  }
  // Get holders: never also a consumer, never empty (they go with their last delivery).
  for (const holder of state.getHolders.values()) {
    expect(state.consumers.has(holder.id), `get holder ${holder.id} is also a consumer`).toBe(false);
    expect(holder.unacked.size, `get holder ${holder.id} holds nothing`).toBeGreaterThan(0);
    for (const tag of holder.unacked.keys()) expect(tag).toBeLessThan(holder.nextDeliveryTag);
  }
  if (state.args.singleActiveConsumer && state.activeConsumerId !== null) expect(state.getHolders.has(state.activeConsumerId)).toBe(false);
  let unacked = 0;
  for (const consumer of [...state.consumers.values(), ...state.getHolders.values()]) {
    for (const [tag, id] of consumer.unacked) {
      const message = state.messages.get(id);
      expect(message?.place).toBe('delivered');
      expect(message?.consumerId).toBe(consumer.id);
      expect(message?.deliveryTag).toBe(tag);
      unacked += 1;
    }
  }
  expect(unacked).toBe(totals.delivered.count);
  expect(state.totals).toEqual(totals);
  const gone = Object.values(state.gone).reduce((sum, n) => sum + n, 0);
  expect(state.enqueued).toBe(state.messages.size + gone);
  const move = state.move;
  if (move === null || move.done) expect(totals.moving.count, 'moving messages without an active move').toBe(0);
  if (move !== null && !state.deleted) {
    expect(totals.moving.count).toBeLessThanOrEqual(move.window);
    expect(move.handedOut).toBeLessThanOrEqual(move.count);
    expect(move.moved + move.failed + totals.moving.count, 'every handed-out message moved, failed or in flight').toBe(move.handedOut);
  }
  if (state.args.singleActiveConsumer && state.consumers.size > 0) expect(state.consumers.has(state.activeConsumerId ?? '')).toBe(true);
  checkKeyIndex(state);
}

/**
 * Spec 9: the key index lists exactly the live keyed messages, ascending, each below or at
 * its key's latest id, with the tombstone count; without a minimum lag, at most one message
 * per key waits (ready or delayed), and it is the key's latest.
 */
export function checkKeyIndex(state: QueueState): void {
  const compaction = state.compaction;
  if (compaction === null) {
    expect(state.args.compactionKey).toBeUndefined();
    return;
  }
  let listed = 0;
  let tombstones = 0;
  for (const [key, record] of compaction.keys) {
    expect(record.live.length, `key ${key} without live messages`).toBeGreaterThan(0);
    let previous = -1;
    let waiting = 0;
    for (const keyed of record.live) {
      expect(keyed.id).toBeGreaterThan(previous);
      expect(keyed.id).toBeLessThanOrEqual(record.latestId);
      previous = keyed.id;
      expect(compaction.keyOf.get(keyed.id)).toBe(key);
      const message = state.messages.get(keyed.id);
      expect(message, `keyed message ${keyed.id} is live`).toBeDefined();
      if (message?.place === 'ready' || message?.place === 'delayed') {
        waiting += 1;
        if ((state.args.compactionMinLagMs ?? 0) === 0) expect(keyed.id, `the waiting message of key ${key} is its latest`).toBe(record.latestId);
      }
      if (keyed.tombstone) tombstones += 1;
      listed += 1;
    }
    if ((state.args.compactionMinLagMs ?? 0) === 0) expect(waiting, `waiting messages of key ${key}`).toBeLessThanOrEqual(1);
  }
  expect(compaction.keyOf.size).toBe(listed);
  expect(compaction.tombstones).toBe(tombstones);
}

/** Nothing is handed to a consumer after its expiry or before its delay. */
export function checkDeliveries(state: QueueState, now: number, effects: readonly Effect[], reply: Reply): void {
  const ids = effects.flatMap((e) => (e.type === 'deliver' ? [e.messageId] : []));
  if (reply.type === 'message' && reply.message.deliveryTag > 0) ids.push(reply.message.messageId);
  for (const id of ids) {
    const message = state.messages.get(id);
    if (message === undefined) continue;
    expect(message.expiresAt === -1 || message.expiresAt > now, `message ${id} delivered after expiry`).toBe(true);
    expect(message.notBefore <= now, `message ${id} delivered before its delay`).toBe(true);
  }
  // Pushed deliveries go to subscribed consumers only, never to a get holder.
  for (const effect of effects) if (effect.type === 'deliver') expect(state.consumers.has(effect.consumerId), `pushed to ${effect.consumerId}`).toBe(true);
  if (state.args.singleActiveConsumer) {
    for (const effect of effects) if (effect.type === 'deliver') expect(effect.consumerId).toBe(state.activeConsumerId);
  }
}
