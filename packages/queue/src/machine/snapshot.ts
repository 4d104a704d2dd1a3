/**
 * Snapshots (spec 10): the whole state as plain JSON-safe data, and back. The layout
 * keeps every internal order (messages by id, consumer and producer map order, heap
 * arrays, lazy index entries) so that a restored state behaves exactly like the
 * original from then on. Message headers are written in their plain form (format
 * unchanged from the `Map` era); slots and interned route ids are not part of it.
 * `encodeSnapshot`/`decodeSnapshot` use a compact binary form of the same content
 * (columns per message, a small JSON part for the rest; layout below).
 */
import type { QueueArguments } from './arguments.js';
import { IdDeque } from './deque.js';
import type { Deaths } from './deaths.js';
import { assert, QueueInvariantError } from './errors.js';
import { DeadlineHeap } from './heap.js';
import { Consumer, emptyGone, GetHolder, emptyTotals, queueStateOf, readyLevelOf, type ConsumerState, type GoneReason, type MoveState, type Place, type PlaceTotals, type QueueState } from './state.js';
import { MessageStore, PLACE_CODE, PLACES, PRIORITY_BITS, PRIORITY_MASK, SIZE_ESCAPE, type MessageColumns, type PlainMessageHeader, type Route } from './store.js';
import type { ConsumerId } from './types.js';
import type { ProducerRecord } from './dedup.js';
import { compactionSnapshot, createCompactionState, isCompactionSnapshot, restoreCompaction, type CompactionSnapshot } from './compaction.js';

/** 2: binary `encodeSnapshot` (the plain `snapshot()` layout is unchanged from 1). */
export const SNAPSHOT_VERSION = 2;

interface ConsumerSnapshot extends Omit<ConsumerState, 'unacked'> {
  readonly unacked: Array<[number, number]>;
}

/** A get holder: id, next tag and its unacked deliveries (tag, message id) in tag order. */
interface GetHolderSnapshot {
  readonly id: ConsumerId;
  readonly nextDeliveryTag: number;
  readonly unacked: Array<[number, number]>;
}

export interface QueueSnapshot {
  readonly version: number;
  readonly name: string;
  readonly args: QueueArguments;
  readonly messages: PlainMessageHeader[];
  readonly ready: Array<{ returned: number[]; fresh: number[] }>;
  readonly delayedHeap: number[];
  readonly expiryHeap: number[];
  readonly totals: Record<Place, PlaceTotals>;
  readonly consumers: ConsumerSnapshot[];
  readonly activeConsumerId: string | null;
  readonly producers: Array<[string, ProducerRecord]>;
  readonly serveSeq: number;
  readonly hadConsumer: boolean;
  readonly lastUsedAt: number;
  readonly tickAt: number;
  readonly deleted: boolean;
  readonly clockMs: number;
  readonly lastIndex: number;
  readonly gone: Record<GoneReason, number>;
  readonly enqueued: number;
  /** Present only when set (snapshots of queues without one are as before). */
  readonly exclusiveOwner?: string;
  /** Present only when a move was started. */
  readonly move?: MoveState;
  /** Present only when manual gets hold deliveries, in creation order. */
  readonly getHolders?: GetHolderSnapshot[];
  /** Present only on a compacting queue (spec 9): its key index and counts. */
  readonly compaction?: CompactionSnapshot;
}

export function snapshot(state: QueueState): QueueSnapshot {
  return structuredClone({
    version: SNAPSHOT_VERSION,
    messages: state.messages.values().map((m) => m.toPlain()),
    ready: state.ready.map((level) => ({ returned: level.returned, fresh: level.fresh.toArray() })),
    delayedHeap: state.delayedHeap.toArray(),
    expiryHeap: state.expiryHeap.toArray(),
    ...scalarFields(state),
  });
}

/** Everything but the messages and the id queues: shared by the plain and binary forms. */
function scalarFields(state: QueueState): Omit<StateFields, 'ready' | 'delayedHeap' | 'expiryHeap'> {
  return {
    name: state.name,
    args: state.args,
    totals: state.totals,
    consumers: [...state.consumers.values()].map((c) => ({ ...c, unacked: [...c.unacked.entries()] })),
    activeConsumerId: state.activeConsumerId,
    producers: [...state.producers.entries()],
    serveSeq: state.serveSeq,
    hadConsumer: state.hadConsumer,
    lastUsedAt: state.lastUsedAt,
    tickAt: state.tickAt,
    deleted: state.deleted,
    clockMs: state.clockMs,
    lastIndex: state.lastIndex,
    gone: goneForSnapshot(state.gone),
    enqueued: state.enqueued,
    ...(state.compaction === null ? {} : { compaction: compactionSnapshot(state.compaction) }),
    ...(state.exclusiveOwner === null ? {} : { exclusiveOwner: state.exclusiveOwner }),
    ...(state.move === null ? {} : { move: { ...state.move } }),
    ...(state.getHolders.size === 0
      ? {}
      : { getHolders: [...state.getHolders.values()].map((h) => ({ id: h.id, nextDeliveryTag: h.nextDeliveryTag, unacked: [...h.unacked.entries()] })) }),
  };
}

/** `compacted` is written only once a message left so (snapshots of other queues are as before compaction). */
function goneForSnapshot(gone: Record<GoneReason, number>): Record<GoneReason, number> {
  if (gone.compacted !== 0) return gone;
  const { compacted: _compacted, ...rest } = gone;
  return rest as Record<GoneReason, number>;
}

export function restore(data: QueueSnapshot): QueueState {
  assert(data.version === SNAPSHOT_VERSION, () => `unknown queue snapshot version ${data.version}`);
  const copy = structuredClone(data);
  const ready = copy.ready.map((level) => ({ returned: level.returned, fresh: IdDeque.fromArray(level.fresh) }));
  return assemble({ ...copy, ready }, restoreMessages(copy.messages));
}

type StateFields = Omit<QueueSnapshot, 'version' | 'messages'>;

function assemble(
  copy: Omit<StateFields, 'ready'> & { readonly ready: ReadonlyArray<{ returned: number[]; fresh: IdDeque }> },
  messages: MessageStore,
): QueueState {
  const state = queueStateOf({
    name: copy.name,
    args: copy.args,
    messages,
    ready: copy.ready.map((level) => readyLevelOf(level.returned, level.fresh)),
    delayedHeap: new DeadlineHeap(copy.delayedHeap),
    expiryHeap: new DeadlineHeap(copy.expiryHeap),
    totals: totalsOf(copy.totals),
    consumers: new Map(
      copy.consumers.map((c) => [c.id, new Consumer(c.id, c.prefetch, c.priority, c.registeredIndex, new Map(c.unacked), c.nextDeliveryTag, c.lastServedSeq)]),
    ),
    getHolders: new Map((copy.getHolders ?? []).map((h) => [h.id, new GetHolder(h.id, new Map(h.unacked), h.nextDeliveryTag)])),
    activeConsumerId: copy.activeConsumerId,
    producers: new Map(copy.producers),
    serveSeq: copy.serveSeq,
    hadConsumer: copy.hadConsumer,
    lastUsedAt: copy.lastUsedAt,
    tickAt: copy.tickAt,
    deleted: copy.deleted,
    clockMs: copy.clockMs,
    lastIndex: copy.lastIndex,
    // Snapshots from before moves lack the `moving` totals and the `moved` count.
    gone: goneOf(copy.gone),
    enqueued: copy.enqueued,
    exclusiveOwner: copy.exclusiveOwner ?? null,
    move: copy.move === undefined ? null : { ...copy.move },
    compaction: restoredCompaction(copy.args, copy.compaction, messages),
  });
  assert(state.ready.length === state.args.maxPriority + 1, 'snapshot has the wrong number of priority levels');
  return state;
}

/*
 * A state's nested records are built by the functions that build a new state's
 * (emptyTotals, emptyGone), their values copied in, and a snapshot's working copy shares the
 * live state's `args` (never changed in place): a record built from a clone or by a spread
 * has another hidden class in V8, and stored in the state it would widen the type V8 recorded
 * for that field (see QueueStateRecord in state.ts for the state object itself).
 */
function totalsOf(totals: Readonly<Record<string, PlaceTotals>>): Record<Place, PlaceTotals> {
  const out: Record<string, PlaceTotals> = emptyTotals();
  for (const place of Object.keys(totals)) {
    const from = totals[place]!;
    const into = out[place];
    if (into === undefined) out[place] = from;
    else {
      // Only what differs from the new record's zero: a field the live state never wrote stays unwritten (see goneOf).
      if (from.count !== 0) into.count = from.count;
      if (from.bytes !== 0) into.bytes = from.bytes;
    }
  }
  return out as Record<Place, PlaceTotals>;
}

function goneOf(gone: Readonly<Partial<Record<GoneReason, number>>>): Record<GoneReason, number> {
  const out: Record<string, number> = emptyGone();
  // A count the live state never changed is not written either: V8 treats a field written
  // only when its object was built as unchanging, and the first later store to it throws away
  // the optimised code that relied on that.
  for (const reason of Object.keys(gone)) {
    const count = gone[reason as GoneReason]!;
    if (count !== 0 || out[reason] === undefined) out[reason] = count;
  }
  return out as Record<GoneReason, number>;
}

function restoredCompaction(args: QueueArguments, data: CompactionSnapshot | undefined, messages: MessageStore): QueueState['compaction'] {
  if (args.compactionKey === undefined) {
    assert(data === undefined, 'snapshot has a key index but the queue does not compact');
    return null;
  }
  return data === undefined ? createCompactionState() : restoreCompaction(data, (id) => messages.has(id));
}

function restoreMessages(messages: readonly PlainMessageHeader[]): MessageStore {
  const store = new MessageStore();
  for (const message of messages) store.insertPlain(message);
  return store;
}

/*
 * Binary encoding (version 2). Layout, little-endian:
 *
 *   magic "QQS" (3 bytes) | version (1 byte) | body length (u32) | CRC-32 of body (u32) | body
 *   body = meta length (u32) | meta (UTF-8 JSON) | columns
 *
 * The meta JSON holds everything but the per-message columns and the big id lists: the
 * rest of the state, the route table ([exchange, routing keys] in first-use order), the
 * message count, and the sparse per-message parts keyed by id (deaths, expirations,
 * current deliveries). Then come the columns, in this order: per message (in id order)
 * ids, sizes, expiresAts, notBefores, deliveryCounts, priorities, places, route indexes;
 * then per priority level its returned and fresh ids; then the delayed and expiry heap
 * arrays. Each column is `kind (u8) | count (u32) | payload`, the kind picked per column:
 * a constant (one f64), u8 values, i32 values, i32 deltas after an f64 first value, or
 * plain f64 values. Decoding checks magic, version, length, checksum, every column's
 * bounds and count and the values' ranges, and throws `QueueInvariantError` on any
 * mismatch rather than build a different state.
 *
 * Both directions stream the columns a chunk at a time through small scratch arrays (no
 * temporary as long as the queue), and copy whole ranges where the layouts agree: the store's
 * columns when the messages sit in consecutive slots in id order, the deque's ring buffer.
 */
const MAGIC = [0x51, 0x51, 0x53] as const;
const HEADER_BYTES = 12;
const enum Kind {
  Const = 0,
  U8 = 1,
  I32 = 2,
  DeltaI32 = 3,
  F64 = 4,
}
const PLACE_CODES: Readonly<Record<Place, number>> = PLACE_CODE;
const PLACE_NAMES: readonly Place[] = PLACES;
/** Values per chunk when streaming a column (64 KiB of scratch: stays in cache). */
const CHUNK = 8192;

interface BinaryMeta extends Omit<StateFields, 'ready' | 'delayedHeap' | 'expiryHeap'> {
  readonly messageCount: number;
  readonly levels: number;
  readonly routes: Array<[string, readonly string[]]>;
  readonly deaths: Array<[number, Deaths]>;
  readonly expirations: Array<[number, number]>;
  readonly deliveries: Array<[number, ConsumerId, number, number]>;
}

function isPlainInteger(value: number): boolean {
  return Number.isSafeInteger(value) && !isNegativeZero(value);
}

function columnBytes(kind: Kind, n: number): number {
  switch (kind) {
    case Kind.Const:
      return 5 + 8;
    case Kind.U8:
      return 5 + n;
    case Kind.I32:
      return 5 + 4 * n;
    case Kind.DeltaI32:
      return 5 + 8 + 4 * (n - 1);
    case Kind.F64:
      return 5 + 8 * n;
  }
}

/** CRC-32 (IEEE) tables for slicing by 8: table k holds the CRC of a byte followed by k zero bytes. */
let crcTables: Int32Array | undefined;

function makeCrcTables(): Int32Array {
  const tables = new Int32Array(256 * 8);
  for (let n = 0; n < 256; n += 1) {
    let c = n;
    for (let k = 0; k < 8; k += 1) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    tables[n] = c;
  }
  for (let n = 0; n < 256; n += 1) {
    let c = tables[n] as number;
    for (let k = 1; k < 8; k += 1) {
      c = (tables[c & 0xff] as number) ^ (c >>> 8);
      tables[k * 256 + n] = c;
    }
  }
  return tables;
}

/** CRC-32 (IEEE, as zlib), eight bytes per step (a few times faster than byte by byte). */
function crc32(data: Uint8Array): number {
  return (crc32Update(-1, data) ^ -1) >>> 0;
}

/** The running CRC-32 state (start with -1; the CRC is the final state `^ -1`, unsigned) after `data`. */
function crc32Update(state: number, data: Uint8Array): number {
  const t = (crcTables ??= makeCrcTables());
  const d = data;
  const n = d.length;
  const blocks = n - (n & 7);
  let crc = state;
  let i = 0;
  for (; i < blocks; i += 8) {
    const low = crc ^ ((d[i] as number) | ((d[i + 1] as number) << 8) | ((d[i + 2] as number) << 16) | ((d[i + 3] as number) << 24));
    crc =
      (t[1792 + (low & 0xff)] as number) ^
      (t[1536 + ((low >>> 8) & 0xff)] as number) ^
      (t[1280 + ((low >>> 16) & 0xff)] as number) ^
      (t[1024 + (low >>> 24)] as number) ^
      (t[768 + (d[i + 4] as number)] as number) ^
      (t[512 + (d[i + 5] as number)] as number) ^
      (t[256 + (d[i + 6] as number)] as number) ^
      (t[d[i + 7] as number] as number);
  }
  for (; i < n; i += 1) crc = (t[(crc ^ (d[i] as number)) & 0xff] as number) ^ (crc >>> 8);
  return crc;
}

// --- Encoding ---

/** A column to encode: its length, and its values `from` to `to - 1` on demand, into `out` (of length to - from). */
interface ColumnSource {
  readonly length: number;
  fill(from: number, to: number, out: Float64Array): void;
  /** Set when every value is known to be this one (and there is at least one): no need to scan. */
  readonly constant?: number;
}

/** `length` times `value`. */
function constantColumn(length: number, value: number): ColumnSource {
  assert(length > 0, 'a constant column holds a value');
  return { length, constant: value, fill: (_from, _to, out) => out.fill(value) };
}

/** The column's values a chunk at a time, in order (the view is reused: read it before the next). */
function* chunksOf(column: ColumnSource, scratch: Float64Array): Generator<Float64Array, void, void> {
  for (let from = 0; from < column.length; from += CHUNK) {
    const to = Math.min(column.length, from + CHUNK);
    const values = scratch.subarray(0, to - from);
    column.fill(from, to, values);
    yield values;
  }
}

/**
 * Picks a column's kind from its values, seen a chunk at a time: the most compact that holds
 * them exactly. A constant (as `Object.is`: -0 and NaN are kept), else for plain integers
 * (safe, not -0) u8, i32 or i32 steps, else f64; an empty column is f64. While the values
 * are all the same only that is checked; the range and steps are scanned from the first
 * that differs.
 */
class KindScan {
  private seen = 0;
  private constant = true;
  private integers = true;
  /** The first value, then (see `scanIntegers`) min, max, min step, max step and the last value. */
  private readonly numbers = new Float64Array(6);

  add(values: Float64Array): void {
    if (values.length === 0) return;
    if (this.seen === 0) this.start(values[0] as number);
    this.seen += values.length;
    let from = 0;
    if (this.constant) {
      from = firstDifferent(values, this.numbers[0] as number);
      if (from < 0) return;
      this.constant = false;
    }
    if (this.integers) this.integers = scanIntegers(values, from, this.numbers.subarray(1));
  }

  kind(): Kind {
    const [, min, max, minStep, maxStep] = this.numbers as unknown as number[];
    if (this.seen === 0) return Kind.F64;
    if (this.constant) return Kind.Const;
    if (!this.integers) return Kind.F64;
    if ((min as number) >= 0 && (max as number) <= 0xff) return Kind.U8;
    if ((min as number) >= -0x80000000 && (max as number) <= 0x7fffffff) return Kind.I32;
    return (minStep as number) >= -0x80000000 && (maxStep as number) <= 0x7fffffff ? Kind.DeltaI32 : Kind.F64;
  }

  private start(first: number): void {
    this.numbers.set([first, first, first, 0, 0, first]);
    this.integers = isPlainInteger(first);
  }
}

/**
 * Widens `range` (min, max, min step, max step, last value) by `values` from `from` on; false
 * at the first value that is not a plain integer. The state lives in a typed array so that
 * this hot loop's stores never change an object's shape (which would throw its optimized code away).
 */
function scanIntegers(values: Float64Array, from: number, range: Float64Array): boolean {
  let min = range[0] as number;
  let max = range[1] as number;
  let minStep = range[2] as number;
  let maxStep = range[3] as number;
  let previous = range[4] as number;
  for (let i = from; i < values.length; i += 1) {
    const value = values[i] as number;
    if (!isPlainInteger(value)) return false;
    if (value < min) min = value;
    if (value > max) max = value;
    const step = value - previous;
    if (step < minStep) minStep = step;
    if (step > maxStep) maxStep = step;
    previous = value;
  }
  range[0] = min;
  range[1] = max;
  range[2] = minStep;
  range[3] = maxStep;
  range[4] = previous;
  return true;
}

/** The index of the first value that `Object.is` tells from `value` (so -0 is not 0, NaN is NaN), or -1. */
function firstDifferent(values: Float64Array, value: number): number {
  if (Number.isNaN(value)) {
    for (let i = 0; i < values.length; i += 1) if (!Number.isNaN(values[i])) return i;
    return -1;
  }
  // `!==` but for zeros, whose signs are compared too (1 / -0 is -Infinity): several times faster than Object.is.
  const negativeZero = isNegativeZero(value);
  for (let i = 0; i < values.length; i += 1) {
    const v = values[i] as number;
    if (v !== value || (v === 0 && isNegativeZero(v) !== negativeZero)) return i;
  }
  return -1;
}

function isNegativeZero(value: number): boolean {
  return value === 0 && 1 / value < 0;
}

/** A column's kind (one pass over its values, unless it is known to be a constant); yields after each chunk. */
function* kindOf(column: ColumnSource, scratch: Float64Array): Generator<void, Kind, void> {
  if (column.constant !== undefined) return Kind.Const;
  const scan = new KindScan();
  for (const values of chunksOf(column, scratch)) {
    scan.add(values);
    yield;
  }
  return scan.kind();
}

/** Writes into a buffer of the exact size computed beforehand (no growth, no copy). */
class Writer {
  readonly bytes: Uint8Array;
  readonly view: DataView;
  offset = 0;

  /** Writes into `reuse` when it has room (its first `capacity` bytes), else into a new buffer. */
  constructor(capacity: number, reuse?: Uint8Array | null) {
    this.bytes = reuse !== undefined && reuse !== null && reuse.length >= capacity ? reuse.subarray(0, capacity) : new Uint8Array(capacity);
    this.view = new DataView(this.bytes.buffer, this.bytes.byteOffset, this.bytes.byteLength);
  }

  ensure(extra: number): void {
    assert(this.offset + extra <= this.bytes.length, 'snapshot size miscomputed');
  }

  u8(value: number): void {
    this.ensure(1);
    this.view.setUint8(this.offset, value);
    this.offset += 1;
  }

  u32(value: number): void {
    this.ensure(4);
    this.view.setUint32(this.offset, value, true);
    this.offset += 4;
  }

  f64(value: number): void {
    this.ensure(8);
    this.view.setFloat64(this.offset, value, true);
    this.offset += 8;
  }

  raw(data: Uint8Array): void {
    this.ensure(data.length);
    this.bytes.set(data, this.offset);
    this.offset += data.length;
  }

  /**
   * `kind | count | payload`, the values streamed a chunk at a time (yields after each); they
   * must fit `kind` (see `KindScan`).
   */
  *column(column: ColumnSource, kind: Kind, scratch: Float64Array): Generator<void, void, void> {
    this.u8(kind);
    this.u32(column.length);
    if (kind === Kind.Const) {
      const first = scratch.subarray(0, 1);
      column.fill(0, 1, first);
      this.f64(first[0] as number);
      return;
    }
    let previous: number | undefined; // DeltaI32: the last value written
    for (const values of chunksOf(column, scratch)) {
      switch (kind) {
        case Kind.U8:
          this.ensure(values.length);
          this.bytes.set(values, this.offset); // one native conversion: the values are 0..255
          this.offset += values.length;
          break;
        case Kind.I32:
          this.i32s(values);
          break;
        case Kind.DeltaI32:
          if (previous === undefined) {
            previous = values[0] as number;
            this.f64(previous);
            this.steps(values, 1, previous);
          } else {
            this.steps(values, 0, previous);
          }
          previous = values[values.length - 1] as number;
          break;
        case Kind.F64:
          this.f64s(values);
          break;
      }
      yield;
    }
  }

  private i32s(values: Float64Array): void {
    const n = values.length;
    this.ensure(n * 4);
    const view = this.view;
    const at = this.offset;
    for (let i = 0; i < n; i += 1) view.setInt32(at + i * 4, values[i] as number, true);
    this.offset += n * 4;
  }

  /** The steps to `values[from]`, `values[from + 1]`, ... each from the value before (`previous` for the first). */
  private steps(values: Float64Array, from: number, previous: number): void {
    const n = values.length - from;
    this.ensure(n * 4);
    const view = this.view;
    const at = this.offset - from * 4;
    let last = previous;
    for (let i = from; i < values.length; i += 1) {
      const value = values[i] as number;
      view.setInt32(at + i * 4, value - last, true);
      last = value;
    }
    this.offset += n * 4;
  }

  private f64s(values: Float64Array): void {
    const n = values.length;
    this.ensure(n * 8);
    const view = this.view;
    const at = this.offset;
    for (let i = 0; i < n; i += 1) view.setFloat64(at + i * 8, values[i] as number, true);
    this.offset += n * 8;
  }
}

type StoreColumn = Float64Array | Int32Array | Uint32Array | Uint8Array;

/**
 * Where the messages are in the store's columns, in id order: the consecutive slots from
 * `start` (the common case, `slots` null), or the list `slots`.
 */
interface SlotOrder {
  readonly count: number;
  readonly start: number;
  readonly slots: Int32Array | null;
}

function slotOrder(store: MessageStore): SlotOrder {
  const start = store.liveSlotRun();
  return start >= 0 ? { count: store.size, start, slots: null } : { count: store.size, start: -1, slots: store.slotsInIdOrder() };
}

function slotAt(order: SlotOrder, i: number): number {
  return order.slots === null ? order.start + i : (order.slots[i] as number);
}

/** A store column at the slots of messages `from` to `to - 1` into `out`: one block copy when the slots are consecutive. */
function gather(column: StoreColumn, order: SlotOrder, from: number, to: number, out: Float64Array): void {
  const slots = order.slots;
  if (slots === null) out.set(column.subarray(order.start + from, order.start + to));
  else for (let i = from; i < to; i += 1) out[i - from] = column[slots[i] as number] as number;
}

/** The store's 32-bit size column escapes sizes of 4 GiB or more: look those up (`sizes` from message `from`). */
function unescapeSizes(store: MessageStore, order: SlotOrder, from: number, sizes: Float64Array): void {
  if (store.bigSizes.size === 0) return;
  for (let i = 0; i < sizes.length; i += 1) if (sizes[i] === SIZE_ESCAPE) sizes[i] = store.sizeAt(slotAt(order, from + i));
}

function prioritiesOf(flags: Float64Array): void {
  for (let i = 0; i < flags.length; i += 1) flags[i] = (flags[i] as number) & PRIORITY_MASK;
}

function placeCodesOf(flags: Float64Array): void {
  for (let i = 0; i < flags.length; i += 1) flags[i] = (flags[i] as number) >> PRIORITY_BITS;
}

/** Numbers the routes in first use (by message id) for the meta's route table; the first pass over the route column does it all. */
class RouteNumbering {
  readonly routes: Array<[string, readonly string[]]> = [];
  private readonly indexOf = new Map<number, number>();

  constructor(private readonly store: MessageStore) {}

  /** Replaces each store route id in `values` by its number. */
  number(values: Float64Array): void {
    let lastRoute = -1;
    let lastIndex = -1;
    for (let i = 0; i < values.length; i += 1) {
      const routeId = values[i] as number;
      if (routeId !== lastRoute) {
        lastRoute = routeId;
        lastIndex = this.numberOf(routeId);
      }
      values[i] = lastIndex;
    }
  }

  numberOf(routeId: number): number {
    let index = this.indexOf.get(routeId);
    if (index === undefined) {
      const route = this.store.route(routeId);
      index = this.routes.length;
      this.routes.push([route.exchange, route.routingKeys]);
      this.indexOf.set(routeId, index);
    }
    return index;
  }
}

/** The per-message columns in format order, each gathered from the store's columns. */
function messageColumns(store: MessageStore, order: SlotOrder, routes: RouteNumbering): ColumnSource[] {
  // Priority and place share a byte per message: when that byte is the same for all (common), both are constants.
  const flags = order.count > 0 ? commonFlags(store.flags, order) : undefined;
  return [
    storeColumn(store.ids, order),
    storeColumn(store.sizes, order, (sizes, from) => unescapeSizes(store, order, from, sizes)),
    storeColumn(store.expiresAts, order),
    storeColumn(store.notBefores, order),
    storeColumn(store.deliveryCounts, order),
    flags === undefined ? storeColumn(store.flags, order, prioritiesOf) : constantColumn(order.count, flags & PRIORITY_MASK),
    flags === undefined ? storeColumn(store.flags, order, placeCodesOf) : constantColumn(order.count, flags >> PRIORITY_BITS),
    routeColumn(store, order, routes),
  ];
}

/** A store column in id order, each chunk passed through `after` (with the index of its first message) if given. */
function storeColumn(source: StoreColumn, order: SlotOrder, after?: (values: Float64Array, from: number) => void): ColumnSource {
  return {
    length: order.count,
    fill: (from, to, out) => {
      gather(source, order, from, to, out);
      after?.(out, from);
    },
  };
}

/** The value of the messages' `flags` when it is the same for all of them, else undefined (one pass, no copy). */
function commonFlags(flags: Uint8Array, order: SlotOrder): number | undefined {
  const first = flags[slotAt(order, 0)] as number;
  const slots = order.slots;
  if (slots === null) {
    const end = order.start + order.count;
    for (let slot = order.start; slot < end; slot += 1) if (flags[slot] !== first) return undefined;
  } else {
    for (let i = 0; i < slots.length; i += 1) if (flags[slots[i] as number] !== first) return undefined;
  }
  return first;
}

/** Each message's route number; when one route serves every message (common) no per-message work. */
function routeColumn(store: MessageStore, order: SlotOrder, routes: RouteNumbering): ColumnSource {
  const sole = store.soleRoute();
  return sole < 0 ? storeColumn(store.routes, order, (routeIds) => routes.number(routeIds)) : constantColumn(order.count, routes.numberOf(sole));
}

function arrayColumn(values: readonly number[]): ColumnSource {
  return {
    length: values.length,
    fill: (from, to, out) => {
      for (let i = from; i < to; i += 1) out[i - from] = values[i] as number;
    },
  };
}

function dequeColumn(deque: IdDeque): ColumnSource {
  return { length: deque.length, fill: (from, to, out) => deque.copyRange(from, to, out) };
}

/** The id lists in format order: per priority level its returned and fresh ids, then the two heaps. */
function listColumns(state: QueueState): ColumnSource[] {
  const columns: ColumnSource[] = [];
  for (const level of state.ready) columns.push(arrayColumn(level.returned), dequeColumn(level.fresh));
  columns.push(arrayColumn(state.delayedHeap.toArray()), arrayColumn(state.expiryHeap.toArray()));
  return columns;
}

function encodeMeta(state: QueueState, messageCount: number, routes: Array<[string, readonly string[]]>): Uint8Array {
  const store = state.messages;
  const byId = (a: [number, ...unknown[]], b: [number, ...unknown[]]): number => a[0] - b[0];
  const meta: BinaryMeta = {
    ...scalarFields(state),
    messageCount,
    levels: state.ready.length,
    routes,
    deaths: [...store.deaths.entries()].sort(byId),
    expirations: [...store.expirations.entries()].sort(byId),
    deliveries: [...store.deliveries.entries()].map(([id, d]): [number, ConsumerId, number, number] => [id, d.consumerId, d.tag, d.at]).sort(byId),
  };
  return new TextEncoder().encode(JSON.stringify(meta));
}

export function encodeSnapshot(state: QueueState): Uint8Array {
  const steps = encodeSteps(state, null);
  for (;;) {
    const next = steps.next();
    if (next.done === true) return next.value;
  }
}

/** Bytes of the encoded snapshot checksummed between two yields. */
const CRC_STEP_BYTES = 1 << 20;

/**
 * `encodeSnapshot`, a step at a time: yields after each chunk of CHUNK values (or
 * CRC_STEP_BYTES checksummed), returns the bytes. `state` must not change until it returns.
 */
function* encodeSteps(state: QueueState, reuse: SnapshotScratch | null): Generator<void, Uint8Array, void> {
  const order = slotOrder(state.messages);
  yield;
  const routes = new RouteNumbering(state.messages);
  const columns = [...messageColumns(state.messages, order, routes), ...listColumns(state)];
  yield;
  // Two passes over the columns through one small scratch array: the first picks each kind
  // (so the output is allocated once, at its exact size) and numbers the routes; the second writes.
  const scratch = new Float64Array(CHUNK);
  const kinds: Kind[] = [];
  for (const column of columns) kinds.push(yield* kindOf(column, scratch));
  const metaBytes = encodeMeta(state, order.count, routes.routes);
  let total = HEADER_BYTES + 4 + metaBytes.length;
  columns.forEach((column, i) => (total += columnBytes(kinds[i] as Kind, column.length)));

  const writer = new Writer(total, reuse?.output);
  // A new buffer (the old one had no room) is kept for the next snapshot.
  if (reuse !== null && writer.bytes.buffer !== reuse.output?.buffer) reuse.output = new Uint8Array(writer.bytes.buffer);
  writer.offset = HEADER_BYTES;
  writer.u32(metaBytes.length);
  writer.raw(metaBytes);
  for (let i = 0; i < columns.length; i += 1) yield* writer.column(columns[i] as ColumnSource, kinds[i] as Kind, scratch);
  assert(writer.offset === total, 'snapshot size miscomputed');
  const bytes = writer.bytes;
  bytes.set(MAGIC, 0);
  writer.view.setUint8(3, SNAPSHOT_VERSION);
  writer.view.setUint32(4, total - HEADER_BYTES, true);
  let crc = -1;
  for (let at = HEADER_BYTES; at < total; at += CRC_STEP_BYTES) {
    crc = crc32Update(crc, bytes.subarray(at, Math.min(total, at + CRC_STEP_BYTES)));
    yield;
  }
  writer.view.setUint32(8, (crc ^ -1) >>> 0, true);
  return bytes;
}

/**
 * A snapshot of the queue as it is now, encoded a step at a time while the queue goes on
 * changing (a long queue's snapshot must not hold a node's event loop past an election
 * timeout): the state is copied first (block copies of the message columns, ~50 bytes a
 * message, a few milliseconds per million), then encoded from the copy.
 */
export interface SnapshotEncoding {
  /** The copy being encoded (read-only): what the snapshot holds. */
  readonly state: QueueState;
  /** Does about `budget` chunks of work (each CHUNK values); the encoded bytes once done, else null. */
  step(budget: number): Uint8Array | null;
}

/**
 * Memory a queue's snapshots taken a step at a time reuse from one to the next: the copy of
 * the state and the encoder's output (read by the caller before the next snapshot starts).
 * A fresh allocation of their size costs page faults, hundreds of milliseconds for a few
 * million messages on a busy machine: in one step, longer than an election timeout.
 */
export class SnapshotScratch {
  copy: QueueState | null = null;
  output: Uint8Array | null = null;
}

/**
 * With `scratch`, the copy and the encoded bytes use its memory: the bytes returned are then
 * valid only until the next snapshot with the same scratch begins.
 */
export function encodeSnapshotLater(state: QueueState, scratch: SnapshotScratch | null = null): SnapshotEncoding {
  const copy = cloneState(state, scratch?.copy ?? null);
  if (scratch !== null) scratch.copy = copy;
  const steps = encodeSteps(copy, scratch);
  let result: Uint8Array | null = null;
  return {
    state: copy,
    step(budget: number): Uint8Array | null {
      for (let i = 0; result === null && i < Math.max(1, budget); i += 1) {
        const next = steps.next();
        if (next.done === true) result = next.value;
      }
      return result;
    },
  };
}

/**
 * An independent copy of `state` that encodes to the same snapshot (messages read-only),
 * written over the arrays of `reuse` (an earlier copy no longer read) where they have room.
 */
export function cloneState(state: QueueState, reuse: QueueState | null = null): QueueState {
  const copy = structuredClone(scalarFields(state));
  const ready = state.ready.map((level, i) => ({ returned: [...level.returned], fresh: level.fresh.clone(reuse?.ready[i]?.fresh) }));
  // The live arguments, not their clone (see totalsOf): a state never changes them in place.
  return assemble({ ...copy, args: state.args, ready, delayedHeap: state.delayedHeap.toArray(), expiryHeap: state.expiryHeap.toArray() }, state.messages.clone(reuse?.messages));
}

// --- Decoding ---

function corrupt(message: string): never {
  throw new QueueInvariantError(`corrupt queue snapshot: ${message}`);
}

class Reader {
  offset: number;
  constructor(
    readonly bytes: Uint8Array,
    readonly view: DataView,
    start: number,
  ) {
    this.offset = start;
  }

  need(length: number, what: string): void {
    if (length < 0 || this.offset + length > this.bytes.length) {
      corrupt(`truncated ${what} (need ${length} bytes at ${this.offset}, have ${this.bytes.length - this.offset})`);
    }
  }

  u8(what: string): number {
    this.need(1, what);
    const value = this.view.getUint8(this.offset);
    this.offset += 1;
    return value;
  }

  u32(what: string): number {
    this.need(4, what);
    const value = this.view.getUint32(this.offset, true);
    this.offset += 4;
    return value;
  }

  raw(length: number, what: string): Uint8Array {
    this.need(length, what);
    const data = this.bytes.subarray(this.offset, this.offset + length);
    this.offset += length;
    return data;
  }

  /** The next column: its kind and count checked, its payload in bounds and skipped (read it with the result). */
  column(what: string, expected?: number): ColumnReader {
    const kind = this.u8(`${what} kind`);
    const n = this.u32(`${what} count`);
    if (expected !== undefined && n !== expected) corrupt(`${what} has ${n} values, expected ${expected}`);
    if (kind > Kind.F64) corrupt(`${what} has unknown column kind ${kind}`);
    if (kind === Kind.DeltaI32 && n === 0) corrupt(`${what}: empty delta column`);
    const payload = columnBytes(kind, n) - 5;
    this.need(payload, what);
    const column = new ColumnReader(this.view, this.bytes, kind, n, this.offset);
    this.offset += payload;
    return column;
  }
}

/** One column's payload (in bounds): its values read in order, a chunk at a time. */
class ColumnReader {
  /** The next value to read, and for deltas the value before it. */
  private next = 0;
  private previous = 0;
  private scratch: Float64Array | undefined;

  constructor(
    private readonly view: DataView,
    private readonly bytes: Uint8Array,
    readonly kind: Kind,
    readonly length: number,
    private readonly payload: number,
  ) {}

  /** Values `from` to `to - 1` into `out` (of length to - from); chunks come in order. */
  read(from: number, to: number, out: Float64Array): void {
    assert(from === this.next && to <= this.length, 'snapshot column read out of order');
    this.next = to;
    const view = this.view;
    const at = this.payload;
    switch (this.kind) {
      case Kind.Const:
        out.fill(view.getFloat64(at, true));
        return;
      case Kind.U8:
        out.set(this.bytes.subarray(at + from, at + to));
        return;
      case Kind.I32:
        for (let i = from; i < to; i += 1) out[i - from] = view.getInt32(at + i * 4, true);
        return;
      case Kind.DeltaI32: {
        // An f64 first value, then the step to each next one.
        let value = this.previous;
        for (let i = from; i < to; i += 1) {
          value = i === 0 ? view.getFloat64(at, true) : value + view.getInt32(at + 4 + i * 4, true);
          out[i - from] = value;
        }
        this.previous = value;
        return;
      }
      case Kind.F64:
        for (let i = from; i < to; i += 1) out[i - from] = view.getFloat64(at + i * 8, true);
        return;
    }
  }

  /** Values `from` to `to - 1` in this reader's own scratch (valid until the next call). */
  chunk(from: number, to: number): Float64Array {
    const out = (this.scratch ??= new Float64Array(Math.min(CHUNK, this.length))).subarray(0, to - from);
    this.read(from, to, out);
    return out;
  }

  /** All the values, in a new array. */
  readAll(): Float64Array {
    const out = new Float64Array(this.length);
    this.read(0, this.length, out);
    return out;
  }
}

type MessageColumnReaders = { readonly [K in keyof MessageColumns]: ColumnReader };

export function decodeSnapshot(bytes: Uint8Array): QueueState {
  if (bytes.length < HEADER_BYTES) corrupt(`truncated header (${bytes.length} bytes)`);
  if (bytes[0] !== MAGIC[0] || bytes[1] !== MAGIC[1] || bytes[2] !== MAGIC[2]) corrupt('bad magic (not a binary queue snapshot)');
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const version = view.getUint8(3);
  if (version !== SNAPSHOT_VERSION) corrupt(`unknown queue snapshot version ${version}`);
  const bodyLength = view.getUint32(4, true);
  if (bodyLength !== bytes.length - HEADER_BYTES) corrupt(`length ${bytes.length - HEADER_BYTES} does not match the header's ${bodyLength} (truncated?)`);
  if (crc32(bytes.subarray(HEADER_BYTES)) !== view.getUint32(8, true)) corrupt('checksum mismatch');
  const reader = new Reader(bytes, view, HEADER_BYTES);
  const metaLength = reader.u32('meta length');
  let meta: BinaryMeta;
  try {
    meta = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(reader.raw(metaLength, 'meta'))) as BinaryMeta;
  } catch (error) {
    if (error instanceof QueueInvariantError) throw error;
    return corrupt(`unreadable meta (${(error as Error).message})`);
  }
  if (typeof meta !== 'object' || meta === null || !Number.isSafeInteger(meta.messageCount) || meta.messageCount < 0) corrupt('bad meta');
  if (!Number.isSafeInteger(meta.levels) || meta.levels < 1 || meta.levels > 256) corrupt(`bad level count ${meta.levels}`);
  if (!Array.isArray(meta.routes) || !Array.isArray(meta.deaths) || !Array.isArray(meta.expirations) || !Array.isArray(meta.deliveries)) {
    corrupt('meta lacks its side tables');
  }
  if (meta.exclusiveOwner !== undefined && typeof meta.exclusiveOwner !== 'string') corrupt('bad exclusive owner');
  if (meta.move !== undefined && !isMoveState(meta.move)) corrupt('bad move');
  if (meta.getHolders !== undefined) checkGetHolders(meta.getHolders, meta.consumers);
  if (meta.compaction !== undefined && !isCompactionSnapshot(meta.compaction)) corrupt('bad compaction key index');
  const n = meta.messageCount;
  const columns: MessageColumnReaders = {
    ids: reader.column('ids', n),
    sizes: reader.column('sizes', n),
    expiresAts: reader.column('expiresAts', n),
    notBefores: reader.column('notBefores', n),
    deliveryCounts: reader.column('deliveryCounts', n),
    priorities: reader.column('priorities', n),
    places: reader.column('places', n),
    routeIndexes: reader.column('routes', n),
  };
  const ready: Array<{ returned: number[]; fresh: IdDeque }> = [];
  for (let level = 0; level < meta.levels; level += 1) {
    const returned = Array.from(reader.column(`ready[${level}].returned`).readAll());
    const fresh = IdDeque.adopt(reader.column(`ready[${level}].fresh`).readAll());
    ready.push({ returned, fresh });
  }
  const delayedHeap = Array.from(reader.column('delayedHeap').readAll());
  const expiryHeap = Array.from(reader.column('expiryHeap').readAll());
  if (reader.offset !== bytes.length) corrupt(`${bytes.length - reader.offset} trailing bytes`);
  if (delayedHeap.length % 2 !== 0 || expiryHeap.length % 2 !== 0) corrupt('heap arrays must hold pairs');

  const routes = meta.routes.map((route, index) => {
    if (!Array.isArray(route) || typeof route[0] !== 'string' || !Array.isArray(route[1]) || !route[1].every((k) => typeof k === 'string')) {
      corrupt(`bad route ${index}`);
    }
    return { exchange: route[0], routingKeys: route[1] };
  });
  const { store, delivered } = readMessages(columns, routes, meta.levels - 1);
  restoreDeaths(store, meta.deaths);
  restoreExpirations(store, meta.expirations);
  for (const entry of meta.deliveries) {
    if (!Array.isArray(entry) || typeof entry[1] !== 'string') corrupt('bad delivery entry');
    const [id, consumerId, tag, at] = entry;
    const header = store.get(id);
    if (header === undefined) corrupt(`delivery of unknown message ${id}`);
    if (header.place !== 'delivered') corrupt(`delivery of message ${id} in place ${header.place}`);
    header.setDelivery(consumerId, tag, at);
  }
  if (store.deliveries.size !== delivered) corrupt('delivered messages without a delivery');
  for (const holder of meta.getHolders ?? []) {
    for (const [tag, id] of holder.unacked) {
      const delivery = store.get(id)?.delivery;
      if (delivery === undefined || delivery.consumerId !== holder.id || delivery.tag !== tag) corrupt(`get holder ${holder.id} tag ${tag}: no such delivery of message ${id}`);
    }
  }
  const { messageCount: _n, levels: _l, routes: _r, deaths: _d, expirations: _e, deliveries: _v, ...rest } = meta;
  return assemble({ ...rest, ready, delayedHeap, expiryHeap }, store);
}

/**
 * The messages from their columns into a new store, a chunk at a time: each chunk checked,
 * then appended in blocks. Also counts those in the delivered place.
 */
function readMessages(columns: MessageColumnReaders, routes: readonly Route[], maxPriority: number): { store: MessageStore; delivered: number } {
  const n = columns.ids.length;
  // Strictly ascending ids take at least a byte each unless there is at most one: this bounds
  // the count (and the store allocated for it) by the input's size before anything is allocated.
  if (columns.ids.kind === Kind.Const && n > 1) corrupt('message ids not ascending at 1');
  const store = MessageStore.withCapacity(n);
  let delivered = 0;
  let lastId = -1;
  for (let from = 0; from < n; from += CHUNK) {
    const to = Math.min(n, from + CHUNK);
    const chunk: MessageColumns = {
      ids: columns.ids.chunk(from, to),
      sizes: columns.sizes.chunk(from, to),
      expiresAts: columns.expiresAts.chunk(from, to),
      notBefores: columns.notBefores.chunk(from, to),
      deliveryCounts: columns.deliveryCounts.chunk(from, to),
      priorities: columns.priorities.chunk(from, to),
      places: columns.places.chunk(from, to),
      routeIndexes: columns.routeIndexes.chunk(from, to),
    };
    checkMessageColumns(chunk, from, lastId, routes.length, maxPriority);
    store.appendColumns(chunk, routes);
    delivered += countPlace(chunk.places, PLACE_CODES.delivered);
    lastId = chunk.ids[chunk.ids.length - 1] as number;
  }
  return { store, delivered };
}

/** Every value of messages `from`.. in range, as `MessageStore.insert` would check it, and ids ascending from `lastId`. */
function checkMessageColumns(columns: MessageColumns, from: number, lastId: number, routeCount: number, maxPriority: number): void {
  const { ids, sizes, deliveryCounts, priorities, places, routeIndexes } = columns;
  let previous = lastId;
  for (let i = 0; i < ids.length; i += 1) {
    const id = ids[i] as number;
    if (!Number.isSafeInteger(id) || id <= previous) corrupt(`message ids not ascending at ${from + i}`);
    previous = id;
    const route = routeIndexes[i] as number;
    if (!Number.isInteger(route) || route < 0 || route >= routeCount) corrupt(`message ${id} has unknown route ${route}`);
    const priority = priorities[i] as number;
    if (!Number.isInteger(priority) || priority < 0 || priority > maxPriority || priority > PRIORITY_MASK) corrupt(`message ${id} has priority ${priority}`);
    const placeCode = places[i] as number;
    if (!Number.isInteger(placeCode) || placeCode < 0 || placeCode >= PLACE_NAMES.length) corrupt(`message ${id} has place code ${placeCode}`);
    const size = sizes[i] as number;
    if (!Number.isSafeInteger(size) || size < 0) corrupt(`message ${id} has size ${size}`);
    const count = deliveryCounts[i] as number;
    if (!Number.isInteger(count) || count < 0 || count > 0x7fffffff) corrupt(`message ${id} has delivery count ${count}`);
  }
}

function restoreDeaths(store: MessageStore, entries: Array<[number, Deaths]>): void {
  for (const [id, deaths] of new Map(entries)) {
    if (!store.has(id)) corrupt(`deaths for unknown message ${id}`);
    if (deaths !== null && deaths !== undefined) store.deaths.set(id, deaths);
  }
}

function restoreExpirations(store: MessageStore, entries: Array<[number, number]>): void {
  for (const [id, ms] of new Map(entries)) {
    if (!store.has(id)) corrupt(`expiration for unknown message ${id}`);
    if (typeof ms !== 'number' || !(ms >= 0)) corrupt(`bad expiration ${ms} of message ${id}`);
    store.expirations.set(id, ms);
  }
}

function isMoveState(value: unknown): value is MoveState {
  if (typeof value !== 'object' || value === null) return false;
  const move = value as Record<string, unknown>;
  const counts = ['window', 'count', 'handedOut', 'moved', 'failed'].every((field) => Number.isSafeInteger(move[field]) && (move[field] as number) >= 0);
  return (
    counts &&
    typeof move['id'] === 'string' &&
    typeof move['exchange'] === 'string' &&
    (move['routingKey'] === null || typeof move['routingKey'] === 'string') &&
    typeof move['cancelled'] === 'boolean' &&
    typeof move['done'] === 'boolean'
  );
}

/** Get holders: well formed, each holding something, ids unique and not a consumer's. */
function checkGetHolders(holders: unknown, consumers: unknown): void {
  if (!Array.isArray(holders) || holders.length === 0) corrupt('bad get holders');
  const consumerIds = new Set(Array.isArray(consumers) ? consumers.map((c: { id?: unknown }) => c?.id) : []);
  const seen = new Set<string>();
  for (const holder of holders as unknown[]) {
    const h = holder as Partial<Record<keyof GetHolderSnapshot, unknown>> | null;
    if (typeof h !== 'object' || h === null || typeof h.id !== 'string' || h.id === '') corrupt('bad get holder');
    const id = h.id as string;
    if (seen.has(id) || consumerIds.has(id)) corrupt(`get holder ${id} twice or also a consumer`);
    seen.add(id);
    const next = h.nextDeliveryTag;
    if (!Number.isSafeInteger(next) || (next as number) < 1) corrupt(`get holder ${id} has next tag ${String(next)}`);
    const unacked = h.unacked;
    if (!Array.isArray(unacked) || unacked.length === 0) corrupt(`get holder ${id} holds nothing`);
    let lastTag = 0;
    for (const entry of unacked as unknown[]) {
      const [tag, messageId] = Array.isArray(entry) ? (entry as unknown[]) : [];
      if (!Number.isSafeInteger(tag) || (tag as number) <= lastTag || (tag as number) >= (next as number) || !Number.isSafeInteger(messageId)) {
        corrupt(`get holder ${id} has a bad unacked entry`);
      }
      lastTag = tag as number;
    }
  }
}

function countPlace(places: Float64Array, code: number): number {
  let count = 0;
  for (let i = 0; i < places.length; i += 1) if (places[i] === code) count += 1;
  return count;
}

/**
 * A deterministic hash of the whole state (two 32-bit FNV-1a lanes over the canonical
 * JSON), for comparing replicas and test runs. Not cryptographic.
 */
export function stateHash(state: QueueState): string {
  const text = JSON.stringify(snapshot(state));
  let a = 0x811c9dc5;
  let b = 0x01000193 ^ text.length;
  for (let i = 0; i < text.length; i += 1) {
    const code = text.charCodeAt(i);
    a = Math.imul(a ^ code, 0x01000193) >>> 0;
    b = Math.imul(b ^ code, 0x5bd1e995) >>> 0;
  }
  return a.toString(16).padStart(8, '0') + b.toString(16).padStart(8, '0');
}

/** The lowest enqueue index still live: the message store may drop bodies below it. */
export function lowestLiveIndex(state: QueueState): number | null {
  return state.messages.lowestId();
}
