/**
 * Compact per-message storage: one slot per live message in parallel typed-array
 * columns, an open-addressing id -> slot index (linear probing, backward-shift delete),
 * an intrusive free list for slot reuse, and the rare or variable parts in side tables:
 * (exchange, routing keys) interned with reference counts, deaths, the per-message
 * `expiration` property and the current delivery (consumer, tag, time) keyed by id only
 * while present (and a size of 4 GiB or more, which the 32-bit size column escapes).
 * About 37 bytes of columns plus ~8 bytes of index per message.
 *
 * `get` hands out a `MessageHeader` view onto a slot; a view is valid until its message
 * is removed (views are short-lived, within one command).
 */
import type { Deaths } from './deaths.js';
import { assert } from './errors.js';
import type { ConsumerId } from './types.js';

export type Place = 'ready' | 'delayed' | 'delivered' | 'deadLettering' | 'moving';

export const PLACES: readonly Place[] = ['ready', 'delayed', 'delivered', 'deadLettering', 'moving'];
export const PLACE_CODE: Readonly<Record<Place, number>> = { ready: 0, delayed: 1, delivered: 2, deadLettering: 3, moving: 4 };

/** What an enqueue knows about a new message. */
export interface NewMessage {
  readonly id: number;
  readonly sizeBytes: number;
  readonly priority: number;
  readonly exchange: string;
  readonly routingKeys: readonly string[];
  readonly deaths: Deaths | null;
  readonly expiresAt: number;
  readonly expirationMs: number;
  readonly notBefore: number;
}

/** The plain form of a header, as in snapshots. */
export interface PlainMessageHeader extends NewMessage {
  readonly deliveryCount: number;
  readonly place: Place;
  readonly consumerId: ConsumerId | null;
  readonly deliveryTag: number;
  readonly deliveredAt: number;
}

/** An exchange and the routing keys a message was published with. */
export interface Route {
  readonly exchange: string;
  readonly routingKeys: readonly string[];
}

/** Messages as columns in id order (binary snapshots): places as `PLACE_CODE`, routes as indexes into a route list. */
export interface MessageColumns {
  readonly ids: Float64Array;
  readonly sizes: Float64Array;
  readonly expiresAts: Float64Array;
  readonly notBefores: Float64Array;
  readonly deliveryCounts: Float64Array;
  readonly priorities: Float64Array;
  readonly places: Float64Array;
  readonly routeIndexes: Float64Array;
}

export interface Delivery {
  readonly consumerId: ConsumerId;
  readonly tag: number;
  readonly at: number;
}

const INITIAL_CAPACITY = 16;
/**
 * Positions of the previous index moved per insert while the index grows: it has twice as
 * many positions as the inserts before the new index is half full, so 8 finishes a growth
 * after a quarter of them.
 */
const INDEX_MOVES_PER_INSERT = 8;
/** A position of the previous index whose entry was moved or deleted (entries are slot + 1 >= 1). */
const MOVED = -1;
/** `slotsInIdOrder` uses a table by id when the live ids span at most this many times their number. */
const DENSE_SPAN = 8;

/** The `sizes` column holds sizes below this; a larger size is in `bigSizes` (rare). */
export const SIZE_ESCAPE = 0xffffffff;
/** `flags` = priority (0..31, 5 bits) | place code << 5 (3 bits). */
export const PRIORITY_BITS = 5;
export const PRIORITY_MASK = (1 << PRIORITY_BITS) - 1;

/** A view of one live message's header, backed by the store's columns. */
export class MessageHeader {
  constructor(
    private readonly store: MessageStore,
    private readonly slot: number,
    /** The `meta.index` of the enqueue: unique, increasing, and the body's key. */
    readonly id: number,
  ) {}

  get sizeBytes(): number {
    return this.store.sizeAt(this.slot);
  }
  /** Clamped to the queue's max_priority; 0 when priorities are off. */
  get priority(): number {
    return (this.store.flags[this.slot] as number) & PRIORITY_MASK;
  }
  get exchange(): string {
    return this.store.routeExchange(this.slot);
  }
  get routingKeys(): readonly string[] {
    return this.store.routeKeys(this.slot);
  }
  get deaths(): Deaths | null {
    return this.store.deaths.get(this.id) ?? null;
  }
  set deaths(deaths: Deaths | null) {
    if (deaths === null) this.store.deaths.delete(this.id);
    else this.store.deaths.set(this.id, deaths);
  }
  /** Leader time at which the message expires, or -1 for never. */
  get expiresAt(): number {
    return this.store.expiresAts[this.slot] as number;
  }
  set expiresAt(at: number) {
    this.store.expiresAts[this.slot] = at;
  }
  /** The per-message `expiration` property in ms, or -1 when it had none. */
  get expirationMs(): number {
    return this.store.expirations.get(this.id) ?? -1;
  }
  /** Leader time before which it is invisible (delayed place), else 0. */
  get notBefore(): number {
    return this.store.notBefores[this.slot] as number;
  }
  set notBefore(at: number) {
    this.store.notBefores[this.slot] = at;
  }
  /** Times delivered and not acked (spec 3). */
  get deliveryCount(): number {
    return this.store.deliveryCounts[this.slot] as number;
  }
  set deliveryCount(count: number) {
    assert(count >= 0 && count <= 0x7fffffff, () => `delivery count ${count} of message ${this.id} out of range`);
    this.store.deliveryCounts[this.slot] = count;
  }
  get place(): Place {
    return PLACES[(this.store.flags[this.slot] as number) >> PRIORITY_BITS] as Place;
  }
  set place(place: Place) {
    const flags = this.store.flags;
    flags[this.slot] = ((flags[this.slot] as number) & PRIORITY_MASK) | (PLACE_CODE[place] << PRIORITY_BITS);
  }
  /** Set while `place === 'delivered'`. */
  get consumerId(): ConsumerId | null {
    return this.store.deliveries.get(this.id)?.consumerId ?? null;
  }
  get deliveryTag(): number {
    return this.store.deliveries.get(this.id)?.tag ?? 0;
  }
  get deliveredAt(): number {
    return this.store.deliveries.get(this.id)?.at ?? 0;
  }
  /** The current delivery, if delivered. */
  get delivery(): Delivery | undefined {
    return this.store.deliveries.get(this.id);
  }
  /** Records the current delivery, or clears it with `null`. */
  setDelivery(consumerId: ConsumerId | null, tag: number, at: number): void {
    if (consumerId === null) this.store.deliveries.delete(this.id);
    else this.store.deliveries.set(this.id, { consumerId, tag, at });
  }

  toPlain(): PlainMessageHeader {
    return {
      id: this.id,
      sizeBytes: this.sizeBytes,
      priority: this.priority,
      exchange: this.exchange,
      routingKeys: this.routingKeys,
      deaths: this.deaths,
      expiresAt: this.expiresAt,
      expirationMs: this.expirationMs,
      notBefore: this.notBefore,
      deliveryCount: this.deliveryCount,
      place: this.place,
      consumerId: this.consumerId,
      deliveryTag: this.deliveryTag,
      deliveredAt: this.deliveredAt,
    };
  }
}

export class MessageStore {
  /** Message id per slot; -1 for a free slot. */
  ids = new Float64Array(INITIAL_CAPACITY).fill(-1);
  /** Body size per slot; SIZE_ESCAPE means "4 GiB or more, see `bigSizes`". */
  sizes = new Uint32Array(INITIAL_CAPACITY);
  expiresAts = new Float64Array(INITIAL_CAPACITY);
  notBefores = new Float64Array(INITIAL_CAPACITY);
  deliveryCounts = new Int32Array(INITIAL_CAPACITY);
  /** Interned (exchange, routing keys) per live slot; next free slot per free slot. */
  routes = new Int32Array(INITIAL_CAPACITY);
  /** Priority and place code packed in one byte (see PRIORITY_BITS). */
  flags = new Uint8Array(INITIAL_CAPACITY);

  /** Sizes that do not fit the 32-bit column, by id (only while present). */
  readonly bigSizes = new Map<number, number>();
  readonly deaths = new Map<number, Deaths>();
  readonly expirations = new Map<number, number>();
  readonly deliveries = new Map<number, Delivery>();

  /** Open addressing: slot + 1, 0 = empty. Capacity a power of two, load <= 1/2. */
  private index = new Int32Array(INITIAL_CAPACITY * 2);
  /**
   * While the index grows, a step at a time: the table it had, whose entries move into the
   * new one as messages are inserted (INDEX_MOVES_PER_INSERT positions each). A position
   * moved or deleted holds MOVED: nothing in this table shifts, so its probe runs stay
   * whole and a lookup skips such positions. Null when no growth is under way.
   */
  private previousIndex: Int32Array | null = null;
  /** The next position of `previousIndex` to move. */
  private previousCursor = 0;
  private freeHead = -1;
  /** Slots ever used (the rest above are untouched). */
  private used = 0;
  private count = 0;

  private readonly routeIds = new Map<string, number>();
  private readonly routeTable: Array<{ key: string; exchange: string; routingKeys: readonly string[]; refs: number }> = [];
  private readonly routeFree: number[] = [];
  private lastRoute = -1;

  get size(): number {
    return this.count;
  }

  /** Slots the columns have room for (memory follows it: about 37 bytes a slot). */
  get capacity(): number {
    return this.ids.length;
  }

  has(id: number): boolean {
    return this.slotOf(id) >= 0;
  }

  get(id: number): MessageHeader | undefined {
    const slot = this.slotOf(id);
    return slot < 0 ? undefined : new MessageHeader(this, slot, id);
  }

  /** Live message ids, ascending. */
  keys(): number[] {
    const ids: number[] = [];
    for (let slot = 0; slot < this.used; slot += 1) {
      const id = this.ids[slot] as number;
      if (id >= 0) ids.push(id);
    }
    return ids.sort((a, b) => a - b);
  }

  /** Live messages in id order. */
  values(): MessageHeader[] {
    const slots: number[] = [];
    for (let slot = 0; slot < this.used; slot += 1) if ((this.ids[slot] as number) >= 0) slots.push(slot);
    slots.sort((a, b) => (this.ids[a] as number) - (this.ids[b] as number));
    return slots.map((slot) => new MessageHeader(this, slot, this.ids[slot] as number));
  }

  /** The lowest live id, or null when empty. */
  lowestId(): number | null {
    let lowest: number | null = null;
    for (let slot = 0; slot < this.used; slot += 1) {
      const id = this.ids[slot] as number;
      if (id >= 0 && (lowest === null || id < lowest)) lowest = id;
    }
    return lowest;
  }

  /**
   * The first slot when the live slots are consecutive and in id order (messages enqueued in
   * order, none freed between them; binary snapshots copy such column ranges whole), else -1.
   */
  liveSlotRun(): number {
    let start = 0;
    while (start < this.used && (this.ids[start] as number) < 0) start += 1;
    // The next `count` slots must all be live (a free slot's id is -1) and their ids ascending.
    const end = start + this.count;
    for (let slot = start + 1; slot < end; slot += 1) if (!((this.ids[slot] as number) > (this.ids[slot - 1] as number))) return -1;
    return start;
  }

  /**
   * Live slots in id order (binary snapshots). Cheapest first: slot order is often id order
   * already (in-order enqueues into fresh slots); else, when the ids are dense, a table by
   * id; else a sort.
   */
  slotsInIdOrder(): Int32Array {
    return this.liveSlotsIfInIdOrder() ?? this.liveSlotsByIdTable() ?? this.liveSlotsBySort();
  }

  /** The live slots in slot order, or null if their ids are not ascending in that order. */
  private liveSlotsIfInIdOrder(): Int32Array | null {
    const slots = new Int32Array(this.count);
    let n = 0;
    let last = -1;
    for (let slot = 0; slot < this.used; slot += 1) {
      const id = this.ids[slot] as number;
      if (id < 0) continue;
      if (id <= last) return null;
      last = id;
      slots[n++] = slot;
    }
    return slots;
  }

  /**
   * A table indexed by id - lowest id, then one sweep: no sort, no hash lookups. Only when
   * the ids span at most DENSE_SPAN times their number (else null), which bounds the table.
   */
  private liveSlotsByIdTable(): Int32Array | null {
    let lowest = Infinity;
    let highest = -Infinity;
    for (let slot = 0; slot < this.used; slot += 1) {
      const id = this.ids[slot] as number;
      if (id < 0) continue;
      if (id < lowest) lowest = id;
      if (id > highest) highest = id;
    }
    const span = highest - lowest + 1;
    if (!(span <= DENSE_SPAN * this.count)) return null;
    const table = new Int32Array(span); // slot + 1 by id - lowest; 0 = no message
    for (let slot = 0; slot < this.used; slot += 1) {
      const id = this.ids[slot] as number;
      if (id >= 0) table[id - lowest] = slot + 1;
    }
    // Compacted in place into the slots in id order (each lands at or before where it was read).
    let n = 0;
    for (let i = 0; i < span; i += 1) {
      const entry = table[i] as number;
      if (entry !== 0) table[n++] = entry - 1;
    }
    return table.subarray(0, n);
  }

  /** Sorts the ids natively, then looks each one up. */
  private liveSlotsBySort(): Int32Array {
    const ids = new Float64Array(this.count);
    let n = 0;
    for (let slot = 0; slot < this.used; slot += 1) {
      const id = this.ids[slot] as number;
      if (id >= 0) ids[n++] = id;
    }
    ids.sort();
    const slots = new Int32Array(n);
    for (let i = 0; i < n; i += 1) slots[i] = this.slotOf(ids[i] as number);
    return slots;
  }

  sizeAt(slot: number): number {
    const size = this.sizes[slot] as number;
    return size !== SIZE_ESCAPE ? size : (this.bigSizes.get(this.ids[slot] as number) as number);
  }

  priorityAt(slot: number): number {
    return (this.flags[slot] as number) & PRIORITY_MASK;
  }

  placeCodeAt(slot: number): number {
    return (this.flags[slot] as number) >> PRIORITY_BITS;
  }

  /** The route id of every live message when they all share one (binary snapshots), else -1. */
  soleRoute(): number {
    if (this.count === 0) return -1;
    return this.routeTable.findIndex((entry) => entry !== undefined && entry.refs === this.count);
  }

  /** The interned (exchange, routing keys) of a route id (binary snapshots). */
  route(routeId: number): Route {
    const entry = this.routeTable[routeId];
    assert(entry !== undefined, () => `unknown route ${routeId}`);
    return entry;
  }

  insert(message: NewMessage, place: Place): MessageHeader {
    assert(!this.has(message.id), () => `message ${message.id} enqueued twice`);
    assert(message.id >= 0 && Number.isSafeInteger(message.id), () => `message id ${message.id} not a safe non-negative integer`);
    assert(message.priority >= 0 && message.priority <= PRIORITY_MASK, () => `priority ${message.priority} of message ${message.id} out of range`);
    assert(Number.isSafeInteger(message.sizeBytes) && message.sizeBytes >= 0, () => `size ${message.sizeBytes} of message ${message.id} not a safe non-negative integer`);
    const slot = this.allocate();
    this.ids[slot] = message.id;
    if (message.sizeBytes < SIZE_ESCAPE) {
      this.sizes[slot] = message.sizeBytes;
    } else {
      this.sizes[slot] = SIZE_ESCAPE;
      this.bigSizes.set(message.id, message.sizeBytes);
    }
    this.expiresAts[slot] = message.expiresAt;
    this.notBefores[slot] = message.notBefore;
    this.deliveryCounts[slot] = 0;
    this.routes[slot] = this.internRoute(message.exchange, message.routingKeys);
    this.flags[slot] = message.priority | (PLACE_CODE[place] << PRIORITY_BITS);
    if (message.deaths !== null) this.deaths.set(message.id, message.deaths);
    if (message.expirationMs >= 0) this.expirations.set(message.id, message.expirationMs);
    this.indexInsert(message.id, slot);
    this.count += 1;
    return new MessageHeader(this, slot, message.id);
  }

  /**
   * An independent copy, to be read only (a snapshot is encoded from it a step at a time
   * while this store changes): block copies of the columns up to the slots ever used and of
   * the index, the side tables copied. The arrays of `reuse` (an earlier copy, no longer
   * read) are written over where they are large enough: a fresh allocation of this size
   * costs page faults, hundreds of milliseconds for a few million messages on a busy machine.
   */
  clone(reuse?: MessageStore | null): MessageStore {
    const copy = new MessageStore();
    const used = this.used;
    copy.ids = copyColumn(this.ids, reuse?.ids, used);
    copy.sizes = copyColumn(this.sizes, reuse?.sizes, used);
    copy.expiresAts = copyColumn(this.expiresAts, reuse?.expiresAts, used);
    copy.notBefores = copyColumn(this.notBefores, reuse?.notBefores, used);
    copy.deliveryCounts = copyColumn(this.deliveryCounts, reuse?.deliveryCounts, used);
    copy.routes = copyColumn(this.routes, reuse?.routes, used);
    copy.flags = copyColumn(this.flags, reuse?.flags, used);
    // The index's length is its hash's modulus: reused only at the same length.
    const index = reuse?.index;
    if (index !== undefined && index.length === this.index.length) {
      index.set(this.index);
      copy.index = index;
    } else {
      copy.index = this.index.slice();
    }
    // A field still at its initial value is left as built: V8 treats a field written only
    // when its object was built as unchanging, and the first later store to it (a copy's,
    // while the live store had never written `freeHead`, say) throws away the optimised code
    // that relied on that (`insert` at a queue's first snapshot). See QueueStateRecord.
    if (this.previousIndex !== null) copy.previousIndex = this.previousIndex.slice();
    if (this.previousCursor !== 0) copy.previousCursor = this.previousCursor;
    if (this.freeHead !== -1) copy.freeHead = this.freeHead;
    if (used !== 0) copy.used = used;
    if (this.count !== 0) copy.count = this.count;
    for (const [id, size] of this.bigSizes) copy.bigSizes.set(id, size);
    for (const [id, deaths] of this.deaths) copy.deaths.set(id, structuredClone(deaths));
    for (const [id, ms] of this.expirations) copy.expirations.set(id, ms);
    for (const [id, delivery] of this.deliveries) copy.deliveries.set(id, { ...delivery });
    for (const [key, routeId] of this.routeIds) copy.routeIds.set(key, routeId);
    for (let i = 0; i < this.routeTable.length; i += 1) {
      const entry = this.routeTable[i];
      if (entry !== undefined) copy.routeTable[i] = { ...entry };
    }
    copy.routeFree.push(...this.routeFree);
    if (this.lastRoute !== -1) copy.lastRoute = this.lastRoute;
    return copy;
  }

  /** An empty store with room for `n` messages without regrowth (binary snapshot restore). */
  static withCapacity(n: number): MessageStore {
    const store = new MessageStore();
    const capacity = Math.max(INITIAL_CAPACITY, 2 ** Math.ceil(Math.log2(Math.max(1, n))));
    store.newColumns(capacity);
    store.index = new Int32Array(capacity * 2);
    return store;
  }

  /** Empty columns of `capacity` slots in place of the current ones. */
  private newColumns(capacity: number): void {
    this.ids = new Float64Array(capacity).fill(-1);
    this.sizes = new Uint32Array(capacity);
    this.expiresAts = new Float64Array(capacity);
    this.notBefores = new Float64Array(capacity);
    this.deliveryCounts = new Int32Array(capacity);
    this.routes = new Int32Array(capacity);
    this.flags = new Uint8Array(capacity);
  }

  /**
   * Appends messages given as columns in id order (binary snapshot restore), in the next
   * fresh slots: block copies instead of one insert each. The caller has checked every value
   * as `insert` would, and that the ids are above all in the store; there must be room (see
   * `withCapacity`) and no freed slot.
   */
  appendColumns(columns: MessageColumns, routes: readonly Route[]): void {
    const n = columns.ids.length;
    const first = this.used;
    assert(first + n <= this.capacity && this.freeHead < 0, 'appendColumns: no room for the messages');
    this.ids.set(columns.ids, first);
    this.expiresAts.set(columns.expiresAts, first);
    this.notBefores.set(columns.notBefores, first);
    this.deliveryCounts.set(columns.deliveryCounts, first);
    this.appendSizes(first, columns.ids, columns.sizes);
    this.appendFlags(first, columns.priorities, columns.places);
    this.appendRoutes(first, columns.routeIndexes, routes);
    this.used += n;
    for (let i = 0; i < n; i += 1) {
      this.indexInsert(columns.ids[i] as number, first + i);
      this.count += 1;
    }
  }

  /** Sizes from slot `first` on, escaping those of 4 GiB or more into `bigSizes`. */
  private appendSizes(first: number, ids: Float64Array, sizes: Float64Array): void {
    for (let i = 0; i < sizes.length; i += 1) {
      const size = sizes[i] as number;
      if (size < SIZE_ESCAPE) {
        this.sizes[first + i] = size;
      } else {
        this.sizes[first + i] = SIZE_ESCAPE;
        this.bigSizes.set(ids[i] as number, size);
      }
    }
  }

  private appendFlags(first: number, priorities: Float64Array, places: Float64Array): void {
    for (let i = 0; i < priorities.length; i += 1) this.flags[first + i] = (priorities[i] as number) | ((places[i] as number) << PRIORITY_BITS);
  }

  /** Interns `routes[index]` per message: once per run of equal indexes, a reference more for each message after. */
  private appendRoutes(first: number, routeIndexes: Float64Array, routes: readonly Route[]): void {
    let lastIndex = -1;
    let routeId = -1;
    for (let i = 0; i < routeIndexes.length; i += 1) {
      const index = routeIndexes[i] as number;
      if (index !== lastIndex) {
        const route = routes[index] as Route;
        routeId = this.internRoute(route.exchange, route.routingKeys);
        lastIndex = index;
      } else {
        (this.routeTable[routeId] as { refs: number }).refs += 1;
      }
      this.routes[first + i] = routeId;
    }
  }

  /** Restores a header exactly (snapshot restore). */
  insertPlain(plain: PlainMessageHeader): void {
    const header = this.insert(plain, plain.place);
    header.deliveryCount = plain.deliveryCount;
    if (plain.consumerId !== null) header.setDelivery(plain.consumerId, plain.deliveryTag, plain.deliveredAt);
  }

  delete(id: number): boolean {
    const slot = this.slotOf(id);
    if (slot < 0) return false;
    this.indexDelete(id);
    this.releaseRoute(this.routes[slot] as number);
    this.ids[slot] = -1;
    this.routes[slot] = this.freeHead;
    this.freeHead = slot;
    if (this.bigSizes.size > 0) this.bigSizes.delete(id);
    if (this.deaths.size > 0) this.deaths.delete(id);
    if (this.expirations.size > 0) this.expirations.delete(id);
    if (this.deliveries.size > 0) this.deliveries.delete(id);
    this.count -= 1;
    return true;
  }

  routeExchange(slot: number): string {
    return (this.routeTable[this.routes[slot] as number] as { exchange: string }).exchange;
  }

  routeKeys(slot: number): readonly string[] {
    return (this.routeTable[this.routes[slot] as number] as { routingKeys: readonly string[] }).routingKeys;
  }

  private internRoute(exchange: string, routingKeys: readonly string[]): number {
    // Fast path: consecutive messages usually share their route. The last route stays
    // registered even at zero references, so a publish/ack cycle does not re-intern it.
    const previous = this.lastRoute;
    const last = this.routeTable[previous];
    if (last !== undefined && last.exchange === exchange && sameKeys(last.routingKeys, routingKeys)) {
      last.refs += 1;
      return previous;
    }
    const routeId = this.internRouteSlow(exchange, routingKeys);
    this.lastRoute = routeId;
    if (last !== undefined && last.refs === 0) this.freeRoute(previous);
    return routeId;
  }

  private internRouteSlow(exchange: string, routingKeys: readonly string[]): number {
    let key = `${exchange.length}:${exchange}`;
    for (const routingKey of routingKeys) key += `${routingKey.length}:${routingKey}`;
    const known = this.routeIds.get(key);
    if (known !== undefined) {
      (this.routeTable[known] as { refs: number }).refs += 1;
      return known;
    }
    const entry = { key, exchange, routingKeys: Object.freeze([...routingKeys]), refs: 1 };
    const reused = this.routeFree.pop();
    const routeId = reused ?? this.routeTable.length;
    if (reused === undefined) this.routeTable.push(entry);
    else this.routeTable[routeId] = entry;
    this.routeIds.set(key, routeId);
    return routeId;
  }

  private releaseRoute(routeId: number): void {
    const entry = this.routeTable[routeId];
    assert(entry !== undefined && entry.refs > 0, () => `route ${routeId} released too often`);
    entry.refs -= 1;
    if (entry.refs === 0 && routeId !== this.lastRoute) this.freeRoute(routeId);
  }

  private freeRoute(routeId: number): void {
    const entry = this.routeTable[routeId];
    assert(entry !== undefined && entry.refs === 0, () => `route ${routeId} freed while in use`);
    this.routeIds.delete(entry.key);
    this.routeFree.push(routeId);
  }

  private allocate(): number {
    if (this.freeHead >= 0) {
      const slot = this.freeHead;
      this.freeHead = this.routes[slot] as number;
      return slot;
    }
    if (this.used === this.ids.length) this.grow();
    const slot = this.used;
    this.used += 1;
    return slot;
  }

  /**
   * Gives back the memory of messages gone: when under a quarter of the slots hold a message,
   * the live slots move to columns of twice their number. Call it between commands only (it
   * renumbers slots, so no MessageHeader view may be held across it). Amortized O(1).
   */
  shrink(): void {
    if (this.ids.length <= INITIAL_CAPACITY || this.count * 4 >= this.ids.length) return;
    const capacity = Math.max(INITIAL_CAPACITY, 2 ** Math.ceil(Math.log2(Math.max(1, this.count * 2))));
    const ids = new Float64Array(capacity).fill(-1);
    const sizes = new Uint32Array(capacity);
    const expiresAts = new Float64Array(capacity);
    const notBefores = new Float64Array(capacity);
    const deliveryCounts = new Int32Array(capacity);
    const routes = new Int32Array(capacity);
    const flags = new Uint8Array(capacity);
    let out = 0;
    for (let slot = 0; slot < this.used; slot += 1) {
      const id = this.ids[slot] as number;
      if (id < 0) continue;
      ids[out] = id;
      sizes[out] = this.sizes[slot] as number;
      expiresAts[out] = this.expiresAts[slot] as number;
      notBefores[out] = this.notBefores[slot] as number;
      deliveryCounts[out] = this.deliveryCounts[slot] as number;
      routes[out] = this.routes[slot] as number;
      flags[out] = this.flags[slot] as number;
      out += 1;
    }
    this.ids = ids;
    this.sizes = sizes;
    this.expiresAts = expiresAts;
    this.notBefores = notBefores;
    this.deliveryCounts = deliveryCounts;
    this.routes = routes;
    this.flags = flags;
    this.used = out;
    this.freeHead = -1;
    this.rehash(Math.max(INITIAL_CAPACITY * 2, capacity * 2));
  }

  /**
   * Forgets every message at once (a purge of a queue whose messages all wait): what deleting
   * them one by one would leave, with the memory given back as `shrink` would, in one step
   * instead of one per message (a purge of a million held every replica for about a second).
   * No MessageHeader view may be held across it.
   */
  clear(): void {
    if (this.ids.length > INITIAL_CAPACITY) this.newColumns(INITIAL_CAPACITY);
    else this.ids.fill(-1);
    if (this.index.length > INITIAL_CAPACITY * 2) this.index = new Int32Array(INITIAL_CAPACITY * 2);
    else this.index.fill(0);
    // Only fields that differ are written (see clone: a field never written since its object
    // was built is one V8 treats as unchanging).
    if (this.previousIndex !== null) this.previousIndex = null;
    if (this.previousCursor !== 0) this.previousCursor = 0;
    if (this.freeHead !== -1) this.freeHead = -1;
    if (this.used !== 0) this.used = 0;
    if (this.count !== 0) this.count = 0;
    this.bigSizes.clear();
    this.deaths.clear();
    this.expirations.clear();
    this.deliveries.clear();
    // The routes as their deletes leave them: every one freed but the last interned, kept
    // registered at zero references.
    for (let routeId = 0; routeId < this.routeTable.length; routeId += 1) {
      const entry = this.routeTable[routeId];
      if (entry === undefined || entry.refs === 0) continue;
      entry.refs = 0;
      if (routeId !== this.lastRoute) this.freeRoute(routeId);
    }
  }

  private grow(): void {
    const capacity = this.ids.length * 2;
    const ids = new Float64Array(capacity).fill(-1);
    ids.set(this.ids);
    this.ids = ids;
    this.sizes = grown(new Uint32Array(capacity), this.sizes);
    this.expiresAts = grown(new Float64Array(capacity), this.expiresAts);
    this.notBefores = grown(new Float64Array(capacity), this.notBefores);
    this.deliveryCounts = grown(new Int32Array(capacity), this.deliveryCounts);
    this.routes = grown(new Int32Array(capacity), this.routes);
    this.flags = grown(new Uint8Array(capacity), this.flags);
  }

  slotOf(id: number): number {
    const index = this.index;
    const mask = index.length - 1;
    for (let i = home(id, mask); ; i = (i + 1) & mask) {
      const entry = index[i] as number;
      if (entry === 0) return this.previousIndex === null ? -1 : this.previousSlotOf(id);
      if (this.ids[entry - 1] === id) return entry - 1;
    }
  }

  /** The slot of `id` in the index being moved out of (see previousIndex), or -1. */
  private previousSlotOf(id: number): number {
    const position = this.previousPosition(id);
    return position < 0 ? -1 : (this.previousIndex![position] as number) - 1;
  }

  private previousPosition(id: number): number {
    const index = this.previousIndex!;
    const mask = index.length - 1;
    for (let i = home(id, mask); ; i = (i + 1) & mask) {
      const entry = index[i] as number;
      if (entry === 0) return -1;
      if (entry !== MOVED && this.ids[entry - 1] === id) return i;
    }
  }

  /**
   * Adds `id` at `slot`. Past half full, the index grows to twice its size a step at a time
   * (see previousIndex): a rehash of every message at once held the event loop for 0.17 s at
   * 2M messages and 0.33 s at 4M on an idle machine, on every replica at the same command.
   */
  private indexInsert(id: number, slot: number): void {
    if ((this.count + 1) * 2 > this.index.length) {
      if (this.previousIndex !== null) this.movePrevious(Number.MAX_SAFE_INTEGER);
      this.previousIndex = this.index;
      this.previousCursor = 0;
      this.index = new Int32Array(this.index.length * 2);
    }
    this.place(id, slot);
    if (this.previousIndex !== null) this.movePrevious(INDEX_MOVES_PER_INSERT);
  }

  private place(id: number, slot: number): void {
    const index = this.index;
    const mask = index.length - 1;
    let i = home(id, mask);
    while (index[i] !== 0) i = (i + 1) & mask;
    index[i] = slot + 1;
  }

  /** Moves up to `positions` positions of the previous index into the index; drops it once all are. */
  private movePrevious(positions: number): void {
    const previous = this.previousIndex!;
    const end = Math.min(previous.length, this.previousCursor + positions);
    for (let i = this.previousCursor; i < end; i += 1) {
      const entry = previous[i] as number;
      if (entry === 0 || entry === MOVED) continue;
      this.place(this.ids[entry - 1] as number, entry - 1);
      previous[i] = MOVED;
    }
    this.previousCursor = end;
    if (end === previous.length) this.previousIndex = null;
  }

  private indexDelete(id: number): void {
    const index = this.index;
    const mask = index.length - 1;
    let hole = home(id, mask);
    for (;;) {
      const entry = index[hole] as number;
      if (entry === 0) {
        // Not moved yet: marked in the previous index, whose runs never shift.
        const position = this.previousIndex === null ? -1 : this.previousPosition(id);
        assert(position >= 0, () => `index: ${id} is in neither table`);
        this.previousIndex![position] = MOVED;
        return;
      }
      if (this.ids[entry - 1] === id) break;
      hole = (hole + 1) & mask;
    }
    // Backward-shift deletion: move later entries of the probe run into the hole.
    let next = hole;
    for (;;) {
      next = (next + 1) & mask;
      const entry = index[next] as number;
      if (entry === 0) break;
      const want = home(this.ids[entry - 1] as number, mask);
      // The entry may fill the hole when its home is not cyclically in (hole, next].
      const between = hole <= next ? want > hole && want <= next : want > hole || want <= next;
      if (!between) {
        index[hole] = entry;
        hole = next;
      }
    }
    index[hole] = 0;
  }

  private rehash(capacity: number): void {
    // Built from the columns: a growth under way is over.
    this.previousIndex = null;
    const index = new Int32Array(capacity);
    const mask = capacity - 1;
    for (let slot = 0; slot < this.used; slot += 1) {
      const id = this.ids[slot] as number;
      if (id < 0) continue;
      let i = home(id, mask);
      while (index[i] !== 0) i = (i + 1) & mask;
      index[i] = slot + 1;
    }
    this.index = index;
  }
}

/**
 * Fibonacci hashing of the id (its top bits): ids are increasing log positions, consecutive
 * within a batch entry and in runs from one entry to the next, and with the
 * identity hash they fill one long probe run, which makes every backward-shift delete walk
 * the whole run (a 30,000-message backlog took seconds to consume). Scattered, runs stay short.
 */
function home(id: number, mask: number): number {
  const bits = 32 - Math.clz32(mask);
  if (bits === 0) return 0;
  const h = Math.imul((id | 0) ^ ((id / 4294967296) | 0), 0x9e3779b1);
  return (h >>> (32 - bits)) & mask;
}

function sameKeys(a: readonly string[], b: readonly string[]): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i += 1) if (a[i] !== b[i]) return false;
  return true;
}

function grown<T extends Float64Array | Int32Array | Uint32Array | Uint8Array>(next: T, previous: T): T {
  next.set(previous as ArrayLike<number>);
  return next;
}

/**
 * The first `length` values of `source` in `spare` when it has room (values past `length`
 * are left as they are: a copy reads only its slots in use), else in a new array.
 */
function copyColumn<T extends Float64Array | Uint32Array | Int32Array | Uint8Array>(source: T, spare: T | undefined, length: number): T {
  if (spare === undefined || spare.length < length) {
    // As long as the source (its capacity): the next copies fit while the store does not grow.
    const fresh = new (source.constructor as new (length: number) => T)(source.length);
    fresh.set(source.subarray(0, length));
    return fresh;
  }
  spare.set(source.subarray(0, length));
  return spare;
}
