/**
 * The queue's replicated state and the primitive moves of a message between places.
 * Every message is in exactly one place: ready, delayed, delivered (unacked by one
 * consumer), deadLettering (held until the dead-letter targets confirmed it) or moving
 * (handed out by a move, held until the destination confirmed it).
 * Counters per place are kept in step with the moves here and nowhere else.
 */
import type { QueueArguments } from './arguments.js';
import { MessageStore, type MessageHeader, type NewMessage, type Place } from './store.js';
import { DeadlineHeap } from './heap.js';
import { IdDeque } from './deque.js';
import { assert } from './errors.js';
import type { ConsumerId } from './types.js';
import type { ProducerRecord } from './dedup.js';
import { createCompactionState, forgetAllKeyed, forgetKeyed, type CompactionState } from './compaction.js';

export type { Place } from './store.js';
export { MessageHeader } from './store.js';

/** Where a message went when it left the queue. */
export type GoneReason = 'acked' | 'rejected' | 'expired' | 'maxlen' | 'delivery_limit' | 'purged' | 'deleted' | 'moved' | 'compacted';

/**
 * A move (spec 8): hand ready messages out, `window` at a time, to be republished to
 * `exchange`; each leaves the queue when `moveConfirmed` names it. Kept after it is done
 * (until the next `moveStart`) so that its progress stays visible.
 */
export interface MoveState {
  readonly id: string;
  /** Destination exchange ("" with `routingKey` = queue name for a destination queue). */
  readonly exchange: string;
  /** The routing key to publish with; null keeps each message's own routing keys. */
  readonly routingKey: string | null;
  /** At most this many messages in the `moving` place at once. */
  readonly window: number;
  /** How many to move: the ready count at `moveStart`, capped by its `limit`. */
  readonly count: number;
  /** Handed out so far (count - handedOut are still to go). */
  handedOut: number;
  /** Confirmed by the destination: they left the queue (gone as `moved`). */
  moved: number;
  /** Refused by the destination and put back (or expired on the way back). */
  failed: number;
  cancelled: boolean;
  done: boolean;
}

/**
 * Whoever holds unacked deliveries: a subscribed consumer, or a get holder (below). Both
 * are settled the same way: by id and delivery tag.
 */
export interface DeliveryHolder {
  readonly id: ConsumerId;
  /** Unacked deliveries, delivery tag -> message id, in tag order. */
  readonly unacked: Map<number, number>;
  nextDeliveryTag: number;
}

/**
 * A manual `get` (basic.get without auto-ack) under an id that is not subscribed: it only
 * holds what it got. Never pushed to, never counted as a consumer (auto_delete, expires,
 * if_unused, status), and gone as soon as it holds nothing (`detachFromConsumer`).
 */
export type GetHolderState = DeliveryHolder;

export interface ConsumerState extends DeliveryHolder {
  /** 0 means unlimited, as in AMQP basic.qos. */
  prefetch: number;
  readonly priority: number;
  /** `meta.index` of the subscribe: "oldest" for single-active-consumer hand-over. */
  readonly registeredIndex: number;
  /** Round-robin among equal-priority consumers: who was served least recently. */
  lastServedSeq: number;
}

/**
 * Consumers and get holders are built by these classes, not by object literals. V8 makes a
 * literal's template on its second run and then widens the type it had recorded for a field
 * holding an object (`unacked`, a Map): every function optimised since the first run that
 * relied on it (deliverTo, settle, deliverAvailable, pickConsumer, creditOf, ...) was thrown
 * away when a node's second consumer ever subscribed (in `run.sh`, the one-in-flight run's
 * consumer). A class's instances are built by its constructor, the same way each time.
 */
export class Consumer implements ConsumerState {
  readonly id: ConsumerId;
  prefetch: number;
  readonly priority: number;
  readonly registeredIndex: number;
  readonly unacked: Map<number, number>;
  nextDeliveryTag: number;
  lastServedSeq: number;

  constructor(id: ConsumerId, prefetch: number, priority: number, registeredIndex: number, unacked: Map<number, number>, nextDeliveryTag: number, lastServedSeq: number) {
    this.id = id;
    this.prefetch = prefetch;
    this.priority = priority;
    this.registeredIndex = registeredIndex;
    this.unacked = unacked;
    this.nextDeliveryTag = nextDeliveryTag;
    this.lastServedSeq = lastServedSeq;
  }
}

/** A get holder (see GetHolderState and Consumer). */
export class GetHolder implements GetHolderState {
  readonly id: ConsumerId;
  readonly unacked: Map<number, number>;
  nextDeliveryTag: number;

  constructor(id: ConsumerId, unacked: Map<number, number>, nextDeliveryTag: number) {
    this.id = id;
    this.unacked = unacked;
    this.nextDeliveryTag = nextDeliveryTag;
  }
}

/** One priority level: returned messages (sorted by id) go before fresh ones. */
export interface ReadyLevel {
  /**
   * Descending message ids, so the next one (the lowest id) pops off the end in O(1);
   * may hold ids that left lazily (check the header).
   */
  readonly returned: number[];
  /** Enqueue order; may hold ids that left lazily (check the header). */
  readonly fresh: IdDeque;
}

export interface PlaceTotals {
  count: number;
  bytes: number;
}

export interface QueueState {
  readonly name: string;
  readonly args: QueueArguments;
  /** Live message headers by id (compact columns; see `store.ts`). */
  readonly messages: MessageStore;
  /** Index = priority level; the highest level is served first. */
  readonly ready: ReadyLevel[];
  readonly delayedHeap: DeadlineHeap;
  readonly expiryHeap: DeadlineHeap;
  readonly totals: Record<Place, PlaceTotals>;
  /** Subscribed consumers only: the ones deliveries are pushed to and that count as consumers. */
  readonly consumers: Map<ConsumerId, ConsumerState>;
  /**
   * Get holders by id (disjoint from `consumers`), each with at least one unacked delivery;
   * in creation order.
   */
  readonly getHolders: Map<ConsumerId, GetHolderState>;
  /** Single active consumer only: the one that may receive. */
  activeConsumerId: ConsumerId | null;
  /** Producer id -> highest stored sequence; ordered by last use (oldest first). */
  readonly producers: Map<string, ProducerRecord>;
  serveSeq: number;
  hadConsumer: boolean;
  lastUsedAt: number;
  /** Leader time of the tick already asked for, or -1. */
  tickAt: number;
  deleted: boolean;
  /** The machine's clock: the largest leader time seen. Invariant: never decreases. */
  clockMs: number;
  /** `meta.index` of the last valid command applied. Invariant: increases. */
  lastIndex: number;
  /** Messages that left the queue, by why. Enqueued = live + sum of these. */
  readonly gone: Record<GoneReason, number>;
  enqueued: number;
  /** Exclusive queues: the session that declared it first (spec 7); null when none known. */
  exclusiveOwner: string | null;
  /** The current or last move (spec 8), or null. */
  move: MoveState | null;
  /** Spec 9: the key index of a queue with `compactionKey`; null on other queues. */
  compaction: CompactionState | null;
}

/**
 * What a state's leader-clock and log-index fields hold while its object is built: not a
 * small integer. V8 stores a number field as a small integer until a value beyond that range
 * goes in (a leader time in ms, an index times the server's entry span), and then moves the
 * object to a new hidden class, which throws away the optimised code of every function that
 * had seen the old one. A queue's state used to change so at its first consumer (`tickAt`
 * went from -1 to a time), so the publish path compiled during a run was discarded when the
 * next one began. Built with this value first, those fields are doubles from the start.
 */
export const DOUBLE_FIELD = 0.5;

/**
 * The one way a queue's state object is made: a new queue's, a restored snapshot's and a
 * snapshot's working copy (snapshot.ts) are all built by this constructor, the same stores in
 * the same order, the clock fields first with DOUBLE_FIELD.
 *
 * Not an object literal: V8 builds a literal of the state's shape from a template whose
 * fields its stores then overwrite, and the first time a second such literal was made (a
 * queue's first snapshot copied its state so, a few hundred milliseconds into a run) V8
 * stopped treating the fields as written once and threw away the optimised code of every
 * function that relied on it: `apply`, `enqueue`, `createHeader`, `admit`, `wouldOverflow`,
 * `earliestDeadline`, `pickConsumer`, ... on every node. The fields are `declare`d so that
 * nothing defines them before the constructor's stores (a declared class field starts as
 * `undefined`, which would make the number fields tagged values rather than doubles).
 */
class QueueStateRecord implements QueueState {
  declare readonly name: string;
  declare readonly args: QueueArguments;
  declare readonly messages: MessageStore;
  declare readonly ready: ReadyLevel[];
  declare readonly delayedHeap: DeadlineHeap;
  declare readonly expiryHeap: DeadlineHeap;
  declare readonly totals: Record<Place, PlaceTotals>;
  declare readonly consumers: Map<ConsumerId, ConsumerState>;
  declare readonly getHolders: Map<ConsumerId, GetHolderState>;
  declare activeConsumerId: ConsumerId | null;
  declare readonly producers: Map<string, ProducerRecord>;
  declare serveSeq: number;
  declare hadConsumer: boolean;
  declare lastUsedAt: number;
  declare tickAt: number;
  declare deleted: boolean;
  declare clockMs: number;
  declare lastIndex: number;
  declare readonly gone: Record<GoneReason, number>;
  declare enqueued: number;
  declare exclusiveOwner: string | null;
  declare move: MoveState | null;
  declare compaction: CompactionState | null;

  constructor(fields: QueueState) {
    this.name = fields.name;
    this.args = fields.args;
    this.messages = fields.messages;
    this.ready = fields.ready;
    this.delayedHeap = fields.delayedHeap;
    this.expiryHeap = fields.expiryHeap;
    this.totals = fields.totals;
    this.consumers = fields.consumers;
    this.getHolders = fields.getHolders;
    this.activeConsumerId = fields.activeConsumerId;
    this.producers = fields.producers;
    this.serveSeq = fields.serveSeq;
    this.hadConsumer = fields.hadConsumer;
    this.lastUsedAt = DOUBLE_FIELD;
    this.tickAt = DOUBLE_FIELD;
    this.deleted = fields.deleted;
    this.clockMs = DOUBLE_FIELD;
    this.lastIndex = DOUBLE_FIELD;
    this.gone = fields.gone;
    this.enqueued = fields.enqueued;
    this.exclusiveOwner = fields.exclusiveOwner;
    this.move = fields.move;
    this.compaction = fields.compaction;
    this.lastUsedAt = fields.lastUsedAt;
    this.tickAt = fields.tickAt;
    this.clockMs = fields.clockMs;
    this.lastIndex = fields.lastIndex;
  }
}

/** A priority level's object, built the same way everywhere (see QueueStateRecord). */
class ReadyLevelRecord implements ReadyLevel {
  declare readonly returned: number[];
  declare readonly fresh: IdDeque;

  constructor(returned: number[], fresh: IdDeque) {
    this.returned = returned;
    this.fresh = fresh;
  }
}

/** A priority level holding `returned` and `fresh`. */
export function readyLevelOf(returned: number[], fresh: IdDeque): ReadyLevel {
  return new ReadyLevelRecord(returned, fresh);
}

/** A queue's state object holding `fields` (see QueueStateRecord). */
export function queueStateOf(fields: QueueState): QueueState {
  return new QueueStateRecord(fields);
}

export function createQueueState(name: string, args: QueueArguments, now = 0): QueueState {
  const ready: ReadyLevel[] = [];
  for (let level = 0; level <= args.maxPriority; level += 1) ready.push(readyLevelOf([], new IdDeque()));
  return queueStateOf({
    name,
    args,
    messages: new MessageStore(),
    ready,
    delayedHeap: new DeadlineHeap(),
    expiryHeap: new DeadlineHeap(),
    totals: emptyTotals(),
    consumers: new Map(),
    getHolders: new Map(),
    activeConsumerId: null,
    producers: new Map(),
    serveSeq: 0,
    hadConsumer: false,
    lastUsedAt: now,
    tickAt: -1,
    deleted: false,
    clockMs: now,
    lastIndex: 0,
    gone: emptyGone(),
    enqueued: 0,
    exclusiveOwner: null,
    move: null,
    compaction: args.compactionKey === undefined ? null : createCompactionState(),
  });
}

export function emptyGone(): Record<GoneReason, number> {
  return { acked: 0, rejected: 0, expired: 0, maxlen: 0, delivery_limit: 0, purged: 0, deleted: 0, moved: 0, compacted: 0 };
}

export function emptyTotals(): Record<Place, PlaceTotals> {
  return {
    ready: { count: 0, bytes: 0 },
    delayed: { count: 0, bytes: 0 },
    delivered: { count: 0, bytes: 0 },
    deadLettering: { count: 0, bytes: 0 },
    moving: { count: 0, bytes: 0 },
  };
}

function enter(state: QueueState, message: MessageHeader, place: Place): void {
  message.place = place;
  state.totals[place].count += 1;
  state.totals[place].bytes += message.sizeBytes;
}

function leave(state: QueueState, message: MessageHeader): void {
  const totals = state.totals[message.place];
  totals.count -= 1;
  totals.bytes -= message.sizeBytes;
  assert(totals.count >= 0 && totals.bytes >= 0, () => `negative totals in ${message.place}`);
}

/** Adds a new message (not yet in any place) to the ready or delayed place. */
export function admit(state: QueueState, init: NewMessage, now: number): MessageHeader {
  const delayed = init.notBefore > now;
  const message = state.messages.insert(init, delayed ? 'delayed' : 'ready');
  state.enqueued += 1;
  if (init.expiresAt >= 0) state.expiryHeap.push(init.expiresAt, init.id);
  if (delayed) makeDelayed(state, message);
  else makeReadyFresh(state, message);
  return message;
}

function makeDelayed(state: QueueState, message: MessageHeader): void {
  enter(state, message, 'delayed');
  state.delayedHeap.push(message.notBefore, message.id);
}

export function makeReadyFresh(state: QueueState, message: MessageHeader): void {
  enter(state, message, 'ready');
  levelOf(state, message).fresh.pushBack(message.id);
}

function levelOf(state: QueueState, message: MessageHeader): ReadyLevel {
  const level = state.ready[message.priority];
  assert(level !== undefined, () => `priority ${message.priority} above max_priority`);
  return level;
}

/** Spec 3: a returned message goes back at its original position, head side. */
function makeReadyReturned(state: QueueState, message: MessageHeader): void {
  enter(state, message, 'ready');
  const returned = levelOf(state, message).returned;
  let low = 0;
  let high = returned.length;
  while (low < high) {
    const mid = (low + high) >> 1;
    if ((returned[mid] ?? 0) > message.id) low = mid + 1;
    else high = mid;
  }
  returned.splice(low, 0, message.id);
}

/** Moves a delivered message back to ready (at its position) or delayed (back-off). */
export function requeue(state: QueueState, message: MessageHeader, notBefore: number, now: number): void {
  detachFromConsumer(state, message);
  leave(state, message);
  if (notBefore > now) {
    message.notBefore = notBefore;
    makeDelayed(state, message);
  } else {
    makeReadyReturned(state, message);
  }
}

/** The delayed message's time has come: it joins the tail of its priority level. */
export function release(state: QueueState, message: MessageHeader): void {
  assert(message.place === 'delayed', 'only a delayed message can be released');
  leave(state, message);
  message.notBefore = 0;
  makeReadyFresh(state, message);
}

/** The subscribed consumer or get holder with this id. */
export function holderOf(state: QueueState, id: ConsumerId): DeliveryHolder | undefined {
  return state.consumers.get(id) ?? state.getHolders.get(id);
}

export function deliverTo(state: QueueState, message: MessageHeader, consumer: DeliveryHolder, now: number): number {
  assert(message.place === 'ready', 'only a ready message can be delivered');
  leave(state, message);
  enter(state, message, 'delivered');
  const tag = consumer.nextDeliveryTag;
  consumer.nextDeliveryTag += 1;
  consumer.unacked.set(tag, message.id);
  message.setDelivery(consumer.id, tag, now);
  return tag;
}

/** Every delivery ends here; a get holder left with nothing goes (nothing leaks). */
function detachFromConsumer(state: QueueState, message: MessageHeader): void {
  if (message.place !== 'delivered') return;
  const delivery = message.delivery;
  const consumer = delivery === undefined ? undefined : holderOf(state, delivery.consumerId);
  assert(delivery !== undefined && consumer !== undefined, () => `delivered message ${message.id} has no consumer`);
  const removed = consumer.unacked.delete(delivery.tag);
  assert(removed, () => `message ${message.id} missing from its consumer's unacked`);
  message.setDelivery(null, 0, 0);
  if (consumer.unacked.size === 0 && state.getHolders.get(consumer.id) === consumer) state.getHolders.delete(consumer.id);
}

/** The message leaves the queue for good. Ready/delayed index entries go lazily. */
export function remove(state: QueueState, message: MessageHeader, reason: GoneReason): void {
  detachFromConsumer(state, message);
  leave(state, message);
  state.messages.delete(message.id);
  state.gone[reason] += 1;
  if (state.compaction !== null) forgetKeyed(state.compaction, message.id);
}

/**
 * Every message leaves at once, as `remove` would take each, in one step instead of one per
 * message. Consumers' unacked maps and the get holders are the caller's (a purge calls it
 * only when every message waits; a delete clears them), as are the ready deques and the
 * delayed heap; the expiry heap, whose entries would all be stale, is cleared here.
 */
export function removeAll(state: QueueState, reason: GoneReason): void {
  const count = state.messages.size;
  state.messages.clear();
  state.expiryHeap.clear();
  for (const totals of Object.values(state.totals)) {
    totals.count = 0;
    totals.bytes = 0;
  }
  state.gone[reason] += count;
  if (state.compaction !== null) forgetAllKeyed(state.compaction);
}

/** Stale index entries tolerated beyond twice the live ones before they are pruned. */
const STALE_ENTRIES_SLACK = 1024;

/**
 * Drops the index entries of messages that left while waiting (the ready deques and the
 * deadline heaps remove lazily) once they outnumber the live ones: on a compacting queue
 * (spec 9) every update leaves one behind, and a queue nobody consumes would otherwise keep
 * an entry per update of its history, in memory and in every snapshot. Amortized O(1) per
 * message; order is kept, so nothing is delivered differently.
 */
export function pruneStaleIndexEntries(state: QueueState): void {
  let fresh = 0;
  for (const level of state.ready) fresh += level.fresh.length;
  if (fresh > 2 * state.totals.ready.count + STALE_ENTRIES_SLACK) {
    for (const level of state.ready) {
      const ids = level.fresh.toArray();
      level.fresh.clear();
      for (const id of ids) if (state.messages.get(id)?.place === 'ready') level.fresh.pushBack(id);
    }
  }
  const waiting = (id: number, deadline: number, place: Place): boolean => {
    const message = state.messages.get(id);
    return message !== undefined && message.place === place && (place === 'delayed' ? message.notBefore : message.expiresAt) === deadline;
  };
  if (state.delayedHeap.size > 2 * state.totals.delayed.count + STALE_ENTRIES_SLACK) rebuildHeap(state.delayedHeap, (id, deadline) => waiting(id, deadline, 'delayed'));
  if (state.expiryHeap.size > 2 * state.messages.size + STALE_ENTRIES_SLACK) {
    rebuildHeap(state.expiryHeap, (id, deadline) => {
      const message = state.messages.get(id);
      return message !== undefined && message.expiresAt === deadline;
    });
  }
}

function rebuildHeap(heap: DeadlineHeap, keep: (id: number, deadline: number) => boolean): void {
  const pairs = heap.toArray();
  heap.clear();
  for (let i = 0; i < pairs.length; i += 2) {
    const deadline = pairs[i] as number;
    const id = pairs[i + 1] as number;
    if (keep(id, deadline)) heap.push(deadline, id);
  }
}

/** Holds the message until its dead-letter targets confirmed it (at-least-once). */
export function holdForDeadLetter(state: QueueState, message: MessageHeader): void {
  detachFromConsumer(state, message);
  leave(state, message);
  enter(state, message, 'deadLettering');
}

/** Hands a ready message to the current move, until the destination confirmed it. */
export function holdForMove(state: QueueState, message: MessageHeader): void {
  assert(message.place === 'ready', 'only a ready message can be moved');
  leave(state, message);
  enter(state, message, 'moving');
}

/** The destination refused a moving message: it rejoins the tail of its priority level. */
export function unholdMoving(state: QueueState, message: MessageHeader): void {
  assert(message.place === 'moving', 'only a moving message can come back from a move');
  leave(state, message);
  makeReadyFresh(state, message);
}

/** Removes and returns the next message to deliver, skipping entries that left lazily. */
export function takeNextReady(state: QueueState): MessageHeader | undefined {
  for (let level = state.ready.length - 1; level >= 0; level -= 1) {
    const candidate = takeFromLevel(state, state.ready[level]);
    if (candidate !== undefined) return candidate;
  }
  return undefined;
}

function takeFromLevel(state: QueueState, level: ReadyLevel | undefined): MessageHeader | undefined {
  assert(level !== undefined, 'priority level missing');
  while (level.returned.length > 0) {
    const message = state.messages.get(level.returned.pop() ?? -1);
    if (message !== undefined && message.place === 'ready') return message;
  }
  for (;;) {
    const id = level.fresh.popFront();
    if (id === undefined) return undefined;
    const message = state.messages.get(id);
    if (message !== undefined && message.place === 'ready') return message;
  }
}

export function creditOf(consumer: ConsumerState): number {
  if (consumer.prefetch === 0) return Number.POSITIVE_INFINITY;
  return consumer.prefetch - consumer.unacked.size;
}
