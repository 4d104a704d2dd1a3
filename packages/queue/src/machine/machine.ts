/**
 * The quorum-queue state machine: `apply(meta, command, state) -> { state, reply, effects }`,
 * after rabbit_fifo. Pure and deterministic: the only clock is `meta.now`, the only ids
 * are the increasing log positions its driver passes as `meta.index` (a Raft index, or in
 * the broker a position within a batch entry: see the server's queue-replica.ts). `apply`
 * takes ownership of `state` and mutates it in place for speed; a command that fails
 * validation leaves it untouched.
 */
import { enqueueKey, replaceableOf, trackKeyed } from './compaction.js';
import { compact, confirmDeadLetter, deadLetter, isExpired } from './deadletter.js';
import { deliverAvailable, describeDelivery, electActiveConsumer, takeLiveReady } from './delivery.js';
import { assert } from './errors.js';
import {
  admit,
  Consumer,
  deliverTo,
  GetHolder,
  holderOf,
  pruneStaleIndexEntries,
  remove,
  removeAll,
  type DeliveryHolder,
  type MessageHeader,
  type QueueState,
} from './state.js';
import type { NewMessage } from './store.js';
import { DEDUP_REORDER_WINDOW, forgetIdleProducers, rememberSequence, sequenceStatus, type SequenceStatus } from './dedup.js';
import { cancelMove, confirmMoved, failMoved, moveAvailable, startMove } from './move.js';
import { returnMessage } from './returns.js';
import { runTick, scheduleNextTick } from './tick.js';
import type { ApplyResult, Command, ConsumerId, Effect, EnqueueCommand, Meta, Reply } from './types.js';
import { errorReply, validateCommand } from './validate.js';

const OK: Reply = { type: 'ok' };

export function apply(leaderMeta: Meta, command: Command, state: QueueState): ApplyResult<QueueState> {
  const problem = validateCommand(state, command);
  if (problem !== null) return { state, reply: problem, effects: [] };
  assert(leaderMeta.index > state.lastIndex, () => `index ${leaderMeta.index} applied after ${state.lastIndex}`);
  // A new leader's clock may be behind the old one's; time inside the machine never goes back.
  const meta: Meta = { ...leaderMeta, now: Math.max(leaderMeta.now, state.clockMs) };
  state.clockMs = meta.now;
  state.lastIndex = meta.index;
  const effects: Effect[] = [];
  const reply = applyValid(meta, command, state, effects);
  if (!state.deleted) {
    // A move asked for by an operator is served before consumers (spec 8).
    moveAvailable(state, meta.now, effects);
    const moreToDeliver = deliverAvailable(state, meta.now, effects);
    // The rest is delivered by the next command; a tick now makes sure one comes.
    if (moreToDeliver) effects.push({ type: 'scheduleTick', at: meta.now });
    scheduleNextTick(state, meta.now, effects);
  }
  // Between commands no header view is held: the store may give back the memory of messages gone.
  state.messages.shrink();
  return { state, reply, effects };
}

function applyValid(meta: Meta, command: Command, state: QueueState, effects: Effect[]): Reply {
  switch (command.type) {
    case 'enqueue':
      return enqueue(meta, command, state, effects);
    case 'subscribe':
      return subscribe(meta, state, command.consumerId, command.prefetch, command.priority ?? 0);
    case 'credit':
      return setPrefetch(state, command.consumerId, command.prefetch);
    case 'cancel':
    case 'consumerDown':
      return cancel(meta, state, command.consumerId, effects);
    case 'ack':
      return settle(state, command.consumerId, command.deliveryTag, command.multiple, (m) => remove(state, m, 'acked'));
    case 'return': {
      const notBefore = meta.now + (command.delayMs ?? 0);
      return settle(state, command.consumerId, command.deliveryTag, command.multiple, (m) => returnMessage(state, m, notBefore, meta.now, effects));
    }
    case 'discard':
      return settle(state, command.consumerId, command.deliveryTag, command.multiple, (m) => deadLetter(state, m, 'rejected', meta.now, effects));
    case 'get':
      return get(meta, state, command.ackMode, command.consumerId, effects);
    case 'purge':
      return { type: 'purged', messagesDropped: dropWaiting(state, 'purged', effects) };
    case 'tick':
      runTick(state, meta.now, effects);
      return OK;
    case 'deadLetterConfirmed':
      for (const id of command.messageIds) confirmDeadLetter(state, id);
      return OK;
    case 'declare':
      // Spec 7: a redeclare renews the `expires` lease. Argument comparison is the topology's.
      state.lastUsedAt = meta.now;
      // The first declare with a session makes that session the exclusive queue's owner.
      if (state.args.exclusive && state.exclusiveOwner === null && command.sessionId !== undefined) state.exclusiveOwner = command.sessionId;
      return OK;
    case 'delete':
      return deleteQueue(state, effects);
    case 'sessionEnded':
      // Without a known owner (or a session id) the machine trusts the caller, as before.
      if (state.args.exclusive && (state.exclusiveOwner === null || command.sessionId === undefined || command.sessionId === state.exclusiveOwner)) {
        effects.push({ type: 'deleteQueue', reason: 'exclusive' });
      }
      return OK;
    case 'moveStart':
      return startMove(state, command);
    case 'moveConfirmed':
      confirmMoved(state, command.moveId, command.messageIds);
      return OK;
    case 'moveFailed':
      failMoved(state, command.moveId, command.messageIds, meta.now, effects);
      return OK;
    case 'moveCancel':
      cancelMove(state, command.moveId);
      return OK;
  }
}

function effectiveTtlMs(state: QueueState, command: EnqueueCommand): number {
  const queueTtl = state.args.messageTtlMs ?? -1;
  const messageTtl = command.expirationMs ?? -1;
  if (queueTtl < 0) return messageTtl;
  if (messageTtl < 0) return queueTtl;
  return Math.min(queueTtl, messageTtl);
}

function producerSequence(state: QueueState, command: EnqueueCommand, now: number): SequenceStatus {
  forgetIdleProducers(state, now);
  if (command.producerId === undefined || command.sequence === undefined) return 'new';
  return sequenceStatus(state.producers.get(command.producerId), command.sequence);
}

function rememberProducer(state: QueueState, command: EnqueueCommand, now: number): void {
  if (command.producerId === undefined || command.sequence === undefined) return;
  const previous = state.producers.get(command.producerId);
  // Delete then set keeps the map ordered by last use, so forgetting scans only the old.
  state.producers.delete(command.producerId);
  state.producers.set(command.producerId, rememberSequence(previous, command.sequence, now));
}

function createHeader(meta: Meta, command: EnqueueCommand, state: QueueState, tombstone: boolean): NewMessage {
  let ttlMs = effectiveTtlMs(state, command);
  // Spec 9: a tombstone waits at most its retention (to be delivered), then it is dropped.
  const retentionMs = state.args.compactionTombstoneRetentionMs;
  if (tombstone && retentionMs !== undefined) ttlMs = ttlMs < 0 ? retentionMs : Math.min(ttlMs, retentionMs);
  const delayedUntil = command.delayMs !== undefined ? meta.now + command.delayMs : (command.notBefore ?? 0);
  return {
    id: meta.index,
    sizeBytes: command.sizeBytes,
    priority: Math.min(command.priority ?? 0, state.args.maxPriority),
    exchange: command.exchange,
    routingKeys: command.routingKeys,
    deaths: command.deaths ?? null,
    expiresAt: ttlMs < 0 ? -1 : meta.now + ttlMs,
    expirationMs: command.expirationMs ?? -1,
    notBefore: delayedUntil > meta.now ? delayedUntil : 0,
  };
}

/** Whether the message would take the queue over its limits; `replaced` (spec 9) leave as it comes. */
function wouldOverflow(state: QueueState, sizeBytes: number, replaced: readonly MessageHeader[]): boolean {
  const { maxLength, maxLengthBytes } = state.args;
  const count = state.totals.ready.count + state.totals.delayed.count - replaced.length;
  let bytes = state.totals.ready.bytes + state.totals.delayed.bytes;
  for (const message of replaced) bytes -= message.sizeBytes;
  return (maxLength !== null && count + 1 > maxLength) || (maxLengthBytes !== null && bytes + sizeBytes > maxLengthBytes);
}

function enqueue(meta: Meta, command: EnqueueCommand, state: QueueState, effects: Effect[]): Reply {
  const seen = producerSequence(state, command, meta.now);
  if (seen === 'stored') return { type: 'duplicate', producerId: command.producerId ?? '', sequence: command.sequence ?? 0 };
  if (seen === 'unknown') {
    const highest = state.producers.get(command.producerId ?? '')?.sequence ?? 0;
    return errorReply(
      'SEQUENCE_TOO_OLD',
      `sequence ${command.sequence} of producer ${JSON.stringify(command.producerId)} is ${DEDUP_REORDER_WINDOW} or more below the highest one stored (${highest}): ` +
        `whether it was stored cannot be told, so it is not stored now; keep a producer's sequences in flight within ${DEDUP_REORDER_WINDOW} of each other, or publish it again with a new sequence`,
    );
  }
  // Spec 9: on a compacting queue the key's waiting messages make way for this one.
  const key = enqueueKey(state, command.compactionKey);
  const tombstone = key !== null && (command.tombstone === true || command.sizeBytes === 0);
  const replaced = key === null ? [] : replaceableOf(state, key, meta.now);
  const init = createHeader(meta, command, state, tombstone);
  const overflow = wouldOverflow(state, init.sizeBytes, replaced);
  if (overflow && state.args.overflow === 'reject-publish') return { type: 'rejected', reason: 'maxlen' };
  const message = admit(state, init, meta.now);
  if (overflow && state.args.overflow === 'reject-publish-dlx') {
    deadLetter(state, message, 'maxlen', meta.now, effects);
    return { type: 'rejected', reason: 'maxlen' };
  }
  rememberProducer(state, command, meta.now);
  if (key !== null) {
    trackKeyed(state, init.id, key, tombstone, meta.now);
    for (const old of replaced) compact(state, old, meta.now, effects);
    // Each replacement leaves an index entry behind: keep them from following the history.
    if (replaced.length > 0) pruneStaleIndexEntries(state);
  }
  if (overflow) dropHeadWhileOver(state, meta.now, effects);
  // Drop-head may have dropped the new message itself: look it up again.
  const live = overflow ? state.messages.get(init.id) : message;
  const waiting = live !== undefined && (live.place === 'ready' || live.place === 'delayed');
  if (waiting && isExpired(live, meta.now)) deadLetter(state, live, 'expired', meta.now, effects);
  return { type: 'enqueued', messageId: init.id };
}

/** Spec 6 drop-head: the oldest waiting messages make room, dead-lettered as `maxlen`. */
function dropHeadWhileOver(state: QueueState, now: number, effects: Effect[]): void {
  const { maxLength, maxLengthBytes } = state.args;
  const over = (): boolean =>
    (maxLength !== null && state.totals.ready.count + state.totals.delayed.count > maxLength) ||
    (maxLengthBytes !== null && state.totals.ready.bytes + state.totals.delayed.bytes > maxLengthBytes);
  while (over()) {
    const head = takeLiveReady(state, now, effects);
    if (head === undefined) return;
    deadLetter(state, head, 'maxlen', now, effects);
  }
}

function subscribe(meta: Meta, state: QueueState, consumerId: ConsumerId, prefetch: number, priority: number): Reply {
  const consumer = new Consumer(consumerId, prefetch, priority, meta.index, new Map(), 1, 0);
  state.consumers.set(consumerId, consumer);
  state.hadConsumer = true;
  state.lastUsedAt = meta.now;
  electActiveConsumer(state);
  return OK;
}

function setPrefetch(state: QueueState, consumerId: ConsumerId, prefetch: number): Reply {
  const consumer = state.consumers.get(consumerId);
  assert(consumer !== undefined, 'validated consumer missing');
  consumer.prefetch = prefetch;
  return OK;
}

/**
 * Spec 3: a leaving consumer's unacked deliveries return and count as failed. A get
 * holder's too; it was never a consumer, so nothing else changes.
 */
function cancel(meta: Meta, state: QueueState, consumerId: ConsumerId, effects: Effect[]): Reply {
  const consumer = holderOf(state, consumerId);
  assert(consumer !== undefined, 'validated consumer missing');
  // Highest id first: each return then lands at the cheap end of the returned index.
  for (const messageId of [...consumer.unacked.values()].reverse()) {
    const message = state.messages.get(messageId);
    assert(message !== undefined, () => `unacked message ${messageId} missing`);
    returnMessage(state, message, meta.now, meta.now, effects);
  }
  if (!state.consumers.has(consumerId)) {
    // A get holder: the last return removed it.
    assert(!state.getHolders.has(consumerId), 'get holder left with nothing');
    return OK;
  }
  state.consumers.delete(consumerId);
  if (state.activeConsumerId === consumerId) state.activeConsumerId = null;
  electActiveConsumer(state);
  if (state.consumers.size === 0) {
    state.lastUsedAt = meta.now;
    // Spec 7: only a queue that had a consumer is auto-deleted when the last one leaves.
    if (state.args.autoDelete && state.hadConsumer) effects.push({ type: 'deleteQueue', reason: 'auto_delete' });
  }
  return OK;
}

/** Applies `settleOne` to the tag, or with `multiple` to every unacked tag up to it. */
function settle(
  state: QueueState,
  consumerId: ConsumerId,
  deliveryTag: number,
  multiple: boolean | undefined,
  settleOne: (message: MessageHeader) => void,
): Reply {
  // A get holder that settles its last tag goes away inside `settleOne`; `consumer` stays readable.
  const consumer = holderOf(state, consumerId);
  assert(consumer !== undefined, 'validated consumer missing');
  const tags = multiple === true ? [...consumer.unacked.keys()].filter((tag) => tag <= deliveryTag) : [deliveryTag];
  for (const tag of tags) {
    const message = state.messages.get(consumer.unacked.get(tag) ?? -1);
    assert(message !== undefined && message.place === 'delivered', () => `tag ${tag} has no delivered message`);
    settleOne(message);
  }
  return OK;
}

function get(meta: Meta, state: QueueState, ackMode: 'auto' | 'manual', consumerId: ConsumerId | undefined, effects: Effect[]): Reply {
  state.lastUsedAt = meta.now;
  const message = takeLiveReady(state, meta.now, effects);
  if (message === undefined) return { type: 'empty' };
  if (ackMode === 'auto') {
    const delivered = describeDelivery(message, 0);
    remove(state, message, 'acked');
    return { type: 'message', message: delivered };
  }
  assert(consumerId !== undefined, 'validated consumer id missing');
  const consumer = holderOf(state, consumerId) ?? newGetHolder(state, consumerId);
  const tag = deliverTo(state, message, consumer, meta.now);
  return { type: 'message', message: describeDelivery(message, tag) };
}

/**
 * A manual get under an id that is not subscribed: a holder of that one delivery (and of
 * later gets under the same id) until they are settled. Made only when there is a message.
 */
function newGetHolder(state: QueueState, id: ConsumerId): DeliveryHolder {
  const holder = new GetHolder(id, new Map(), 1);
  state.getHolders.set(id, holder);
  return holder;
}

/**
 * Drops every ready and delayed message (purge, delete). Unacked ones stay with consumers.
 * One effect for them all: a purge of a million messages is one apply on every replica, and
 * it must not also be a million effects on the leader.
 */
function dropWaiting(state: QueueState, reason: 'purged' | 'deleted', effects: Effect[]): number {
  const waiting = state.totals.ready.count + state.totals.delayed.count;
  if (waiting > 0 && waiting === state.messages.size) {
    removeAll(state, reason);
  } else if (waiting > 0) {
    for (const message of state.messages.values()) {
      if (message.place === 'ready' || message.place === 'delayed') remove(state, message, reason);
    }
  }
  for (const level of state.ready) {
    level.returned.length = 0;
    level.fresh.clear();
  }
  state.delayedHeap.clear();
  if (waiting > 0) effects.push({ type: 'dropWaiting', reason, count: waiting });
  return waiting;
}

function deleteQueue(state: QueueState, effects: Effect[]): Reply {
  const live = state.messages.size;
  removeAll(state, 'deleted');
  for (const consumer of state.consumers.values()) consumer.unacked.clear();
  dropWaiting(state, 'deleted', effects);
  state.consumers.clear();
  state.getHolders.clear();
  state.expiryHeap.clear();
  state.activeConsumerId = null;
  state.deleted = true;
  effects.push({ type: 'deleteQueue', reason: 'delete' });
  return { type: 'deleted', messagesDropped: live };
}
