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
import { emptyGone, emptyTotals, type ConsumerState, type GoneReason, type MoveState, type Place, type PlaceTotals, type QueueState } from './state.js';
import { MessageStore, PLACE_CODE, PLACES, type PlainMessageHeader } from './store.js';
import type { ConsumerId } from './types.js';
import type { ProducerRecord } from './dedup.js';

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
    gone: state.gone,
    enqueued: state.enqueued,
    ...(state.exclusiveOwner === null ? {} : { exclusiveOwner: state.exclusiveOwner }),
    ...(state.move === null ? {} : { move: { ...state.move } }),
    ...(state.getHolders.size === 0
      ? {}
      : { getHolders: [...state.getHolders.values()].map((h) => ({ id: h.id, nextDeliveryTag: h.nextDeliveryTag, unacked: [...h.unacked.entries()] })) }),
  };
}

export function restore(data: QueueSnapshot): QueueState {
  assert(data.version === SNAPSHOT_VERSION, () => `unknown queue snapshot version ${data.version}`);
  const copy = structuredClone(data);
  return assemble(copy, restoreMessages(copy.messages));
}

type StateFields = Omit<QueueSnapshot, 'version' | 'messages'>;

function assemble(
  copy: Omit<StateFields, 'ready'> & { readonly ready: ReadonlyArray<{ returned: number[]; fresh: ArrayLike<number> }> },
  messages: MessageStore,
): QueueState {
  const state: QueueState = {
    name: copy.name,
    args: copy.args,
    messages,
    ready: copy.ready.map((level) => ({ returned: level.returned, fresh: IdDeque.fromArray(level.fresh) })),
    delayedHeap: new DeadlineHeap(copy.delayedHeap),
    expiryHeap: new DeadlineHeap(copy.expiryHeap),
    totals: { ...emptyTotals(), ...copy.totals },
    consumers: new Map(copy.consumers.map((c) => [c.id, { ...c, unacked: new Map(c.unacked) }])),
    getHolders: new Map(
      (copy.getHolders ?? []).map((h) => [h.id, { id: h.id, nextDeliveryTag: h.nextDeliveryTag, unacked: new Map(h.unacked) }]),
    ),
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
    gone: { ...emptyGone(), ...copy.gone },
    enqueued: copy.enqueued,
    exclusiveOwner: copy.exclusiveOwner ?? null,
    move: copy.move === undefined ? null : { ...copy.move },
  };
  assert(state.ready.length === state.args.maxPriority + 1, 'snapshot has the wrong number of priority levels');
  return state;
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

interface BinaryMeta extends Omit<StateFields, 'ready' | 'delayedHeap' | 'expiryHeap'> {
  readonly messageCount: number;
  readonly levels: number;
  readonly routes: Array<[string, readonly string[]]>;
  readonly deaths: Array<[number, Deaths]>;
  readonly expirations: Array<[number, number]>;
  readonly deliveries: Array<[number, ConsumerId, number, number]>;
}

type NumberColumn = ArrayLike<number>;

/** Writes into a buffer of the exact size computed beforehand (no growth, no copy). */
class Writer {
  readonly bytes: Uint8Array;
  readonly view: DataView;
  offset = 0;

  constructor(capacity: number) {
    this.bytes = new Uint8Array(capacity);
    this.view = new DataView(this.bytes.buffer);
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

  column(values: NumberColumn, kind = columnKind(values)): void {
    const n = values.length;
    this.u8(kind);
    this.u32(n);
    const view = (): DataView => this.view;
    switch (kind) {
      case Kind.Const:
        this.f64(values[0] as number);
        return;
      case Kind.U8:
        this.ensure(n);
        for (let i = 0; i < n; i += 1) this.bytes[this.offset + i] = values[i] as number;
        this.offset += n;
        return;
      case Kind.I32: {
        this.ensure(n * 4);
        const v = view();
        for (let i = 0; i < n; i += 1) v.setInt32(this.offset + i * 4, values[i] as number, true);
        this.offset += n * 4;
        return;
      }
      case Kind.DeltaI32: {
        this.f64(values[0] as number);
        this.ensure((n - 1) * 4);
        const v = view();
        for (let i = 1; i < n; i += 1) v.setInt32(this.offset + (i - 1) * 4, (values[i] as number) - (values[i - 1] as number), true);
        this.offset += (n - 1) * 4;
        return;
      }
      case Kind.F64: {
        this.ensure(n * 8);
        const v = view();
        for (let i = 0; i < n; i += 1) v.setFloat64(this.offset + i * 8, values[i] as number, true);
        this.offset += n * 8;
        return;
      }
    }
  }
}

function isPlainInteger(value: number): boolean {
  return Number.isSafeInteger(value) && !Object.is(value, -0);
}

function columnKind(values: NumberColumn): Kind {
  const n = values.length;
  if (n === 0) return Kind.F64;
  const first = values[0] as number;
  let constant = true;
  let integers = true;
  let u8 = true;
  let i32 = true;
  let delta = true;
  for (let i = 0; i < n; i += 1) {
    const value = values[i] as number;
    if (constant && !Object.is(value, first)) constant = false;
    if (!isPlainInteger(value)) {
      integers = false;
      for (let j = i; constant && j < n; j += 1) constant = Object.is(values[j], first);
      break;
    }
    if (value < 0 || value > 0xff) u8 = false;
    if (value < -0x80000000 || value > 0x7fffffff) i32 = false;
    if (i > 0) {
      const step = value - (values[i - 1] as number);
      if (step < -0x80000000 || step > 0x7fffffff) delta = false;
    }
  }
  if (constant) return Kind.Const;
  if (!integers) return Kind.F64;
  if (u8) return Kind.U8;
  if (i32) return Kind.I32;
  return delta ? Kind.DeltaI32 : Kind.F64;
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

function corrupt(message: string): never {
  throw new QueueInvariantError(`corrupt queue snapshot: ${message}`);
}

class Reader {
  offset: number;
  constructor(
    private readonly bytes: Uint8Array,
    private readonly view: DataView,
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

  f64(what: string): number {
    this.need(8, what);
    const value = this.view.getFloat64(this.offset, true);
    this.offset += 8;
    return value;
  }

  raw(length: number, what: string): Uint8Array {
    this.need(length, what);
    const data = this.bytes.subarray(this.offset, this.offset + length);
    this.offset += length;
    return data;
  }

  column(what: string, expected?: number): Float64Array {
    const kind = this.u8(`${what} kind`);
    const n = this.u32(`${what} count`);
    if (expected !== undefined && n !== expected) corrupt(`${what} has ${n} values, expected ${expected}`);
    const out = new Float64Array(n);
    const view = this.view;
    switch (kind) {
      case Kind.Const:
        out.fill(this.f64(what));
        break;
      case Kind.U8:
        this.need(n, what);
        out.set(this.bytes.subarray(this.offset, this.offset + n));
        this.offset += n;
        break;
      case Kind.I32:
        this.need(n * 4, what);
        for (let i = 0; i < n; i += 1) out[i] = view.getInt32(this.offset + i * 4, true);
        this.offset += n * 4;
        break;
      case Kind.DeltaI32: {
        if (n === 0) corrupt(`${what}: empty delta column`);
        let value = this.f64(what);
        this.need((n - 1) * 4, what);
        out[0] = value;
        for (let i = 1; i < n; i += 1) {
          value += view.getInt32(this.offset + (i - 1) * 4, true);
          out[i] = value;
        }
        this.offset += (n - 1) * 4;
        break;
      }
      case Kind.F64:
        this.need(n * 8, what);
        for (let i = 0; i < n; i += 1) out[i] = view.getFloat64(this.offset + i * 8, true);
        this.offset += n * 8;
        break;
      default:
        corrupt(`${what} has unknown column kind ${kind}`);
    }
    return out;
  }
}

let crcTable: Int32Array | undefined;

function crc32(data: Uint8Array): number {
  let table = crcTable;
  if (table === undefined) {
    table = new Int32Array(256);
    for (let n = 0; n < 256; n += 1) {
      let c = n;
      for (let k = 0; k < 8; k += 1) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
      table[n] = c;
    }
    crcTable = table;
  }
  let crc = -1;
  for (let i = 0; i < data.length; i += 1) crc = (table[(crc ^ (data[i] as number)) & 0xff] as number) ^ (crc >>> 8);
  return (crc ^ -1) >>> 0;
}

export function encodeSnapshot(state: QueueState): Uint8Array {
  const store = state.messages;
  const slots = store.slotsInIdOrder();
  const n = slots.length;
  const routeIndexes = new Int32Array(n);
  const routes: Array<[string, readonly string[]]> = [];
  const routeIndexOf = new Map<number, number>();
  let lastRoute = -1;
  let lastIndex = -1;
  for (let i = 0; i < n; i += 1) {
    const routeId = store.routes[slots[i] as number] as number;
    if (routeId !== lastRoute) {
      let index = routeIndexOf.get(routeId);
      if (index === undefined) {
        const route = store.route(routeId);
        index = routes.length;
        routes.push([route.exchange, route.routingKeys]);
        routeIndexOf.set(routeId, index);
      }
      lastRoute = routeId;
      lastIndex = index;
    }
    routeIndexes[i] = lastIndex;
  }
  const byId = (a: [number, ...unknown[]], b: [number, ...unknown[]]): number => a[0] - b[0];
  const meta: BinaryMeta = {
    ...scalarFields(state),
    messageCount: n,
    levels: state.ready.length,
    routes,
    deaths: [...store.deaths.entries()].sort(byId),
    expirations: [...store.expirations.entries()].sort(byId),
    deliveries: [...store.deliveries.entries()].map(([id, d]): [number, ConsumerId, number, number] => [id, d.consumerId, d.tag, d.at]).sort(byId),
  };
  const metaBytes = new TextEncoder().encode(JSON.stringify(meta));

  // Per-message columns are gathered one at a time into one scratch array, twice: once
  // to choose the kind and size, once to write, so the output is allocated exactly once.
  const scratch = new Float64Array(n);
  const gather = (column: Float64Array | Int32Array): Float64Array => {
    for (let i = 0; i < n; i += 1) scratch[i] = column[slots[i] as number] as number;
    return scratch;
  };
  const gatherWith = (valueAt: (slot: number) => number): Float64Array => {
    for (let i = 0; i < n; i += 1) scratch[i] = valueAt(slots[i] as number);
    return scratch;
  };
  const messageColumns: Array<() => Float64Array | Int32Array> = [
    () => gather(store.ids),
    () => gatherWith((slot) => store.sizeAt(slot)),
    () => gather(store.expiresAts),
    () => gather(store.notBefores),
    () => gather(store.deliveryCounts),
    () => gatherWith((slot) => store.priorityAt(slot)),
    () => gatherWith((slot) => store.placeCodeAt(slot)),
    () => routeIndexes,
  ];
  const lists: NumberColumn[] = [];
  for (const level of state.ready) lists.push(level.returned, level.fresh.toFloat64Array());
  lists.push(state.delayedHeap.toArray(), state.expiryHeap.toArray());

  const kinds = messageColumns.map((column) => columnKind(column()));
  const listKinds = lists.map((list) => columnKind(list));
  let total = HEADER_BYTES + 4 + metaBytes.length;
  for (const kind of kinds) total += columnBytes(kind, n);
  lists.forEach((list, i) => (total += columnBytes(listKinds[i] as Kind, list.length)));

  const writer = new Writer(total);
  writer.offset = HEADER_BYTES;
  writer.u32(metaBytes.length);
  writer.raw(metaBytes);
  messageColumns.forEach((column, i) => writer.column(column(), kinds[i]));
  lists.forEach((list, i) => writer.column(list, listKinds[i]));
  assert(writer.offset === total, 'snapshot size miscomputed');
  const bytes = writer.bytes;
  bytes.set(MAGIC, 0);
  writer.view.setUint8(3, SNAPSHOT_VERSION);
  writer.view.setUint32(4, total - HEADER_BYTES, true);
  writer.view.setUint32(8, crc32(bytes.subarray(HEADER_BYTES)), true);
  return bytes;
}

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
  const n = meta.messageCount;
  const ids = reader.column('ids', n);
  const sizes = reader.column('sizes', n);
  const expiresAts = reader.column('expiresAts', n);
  const notBefores = reader.column('notBefores', n);
  const deliveryCounts = reader.column('deliveryCounts', n);
  const priorities = reader.column('priorities', n);
  const places = reader.column('places', n);
  const routeIndexes = reader.column('routes', n);
  const ready: Array<{ returned: number[]; fresh: Float64Array }> = [];
  for (let level = 0; level < meta.levels; level += 1) {
    const returned = Array.from(reader.column(`ready[${level}].returned`));
    const fresh = reader.column(`ready[${level}].fresh`);
    ready.push({ returned, fresh });
  }
  const delayedHeap = Array.from(reader.column('delayedHeap'));
  const expiryHeap = Array.from(reader.column('expiryHeap'));
  if (reader.offset !== bytes.length) corrupt(`${bytes.length - reader.offset} trailing bytes`);
  if (delayedHeap.length % 2 !== 0 || expiryHeap.length % 2 !== 0) corrupt('heap arrays must hold pairs');

  const routes = meta.routes.map((route, index) => {
    if (!Array.isArray(route) || typeof route[0] !== 'string' || !Array.isArray(route[1]) || !route[1].every((k) => typeof k === 'string')) {
      corrupt(`bad route ${index}`);
    }
    return { exchange: route[0], routingKeys: route[1] };
  });
  const maxPriority = meta.levels - 1;
  const store = new MessageStore();
  const deaths = new Map<number, Deaths>(meta.deaths);
  const expirations = new Map<number, number>(meta.expirations);
  const noRoute = { exchange: '', routingKeys: [] as readonly string[] };
  for (let i = 0; i < n; i += 1) {
    const id = ids[i] as number;
    if (!Number.isSafeInteger(id) || id < 0 || (i > 0 && id <= (ids[i - 1] as number))) corrupt(`message ids not ascending at ${i}`);
    const priority = priorities[i] as number;
    const placeCode = places[i] as number;
    const route = routes[routeIndexes[i] as number] ?? noRoute;
    if (route === noRoute || !Number.isInteger(routeIndexes[i])) corrupt(`message ${id} has unknown route ${routeIndexes[i]}`);
    if (!Number.isInteger(priority) || priority < 0 || priority > maxPriority) corrupt(`message ${id} has priority ${priority}`);
    const place = PLACE_NAMES[placeCode];
    if (place === undefined) corrupt(`message ${id} has place code ${placeCode}`);
    const size = sizes[i] as number;
    if (!Number.isSafeInteger(size) || size < 0) corrupt(`message ${id} has size ${size}`);
    const count = deliveryCounts[i] as number;
    if (!Number.isInteger(count) || count < 0 || count > 0x7fffffff) corrupt(`message ${id} has delivery count ${count}`);
    const header = store.insert(
      {
        id,
        sizeBytes: size,
        priority,
        exchange: route.exchange,
        routingKeys: route.routingKeys,
        deaths: deaths.get(id) ?? null,
        expiresAt: expiresAts[i] as number,
        expirationMs: expirations.get(id) ?? -1,
        notBefore: notBefores[i] as number,
      },
      place,
    );
    if (count !== 0) header.deliveryCount = count;
  }
  for (const [id] of deaths) if (!store.has(id)) corrupt(`deaths for unknown message ${id}`);
  for (const [id, ms] of expirations) {
    if (!store.has(id)) corrupt(`expiration for unknown message ${id}`);
    if (typeof ms !== 'number' || ms < 0) corrupt(`bad expiration ${ms} of message ${id}`);
  }
  for (const entry of meta.deliveries) {
    if (!Array.isArray(entry) || typeof entry[1] !== 'string') corrupt('bad delivery entry');
    const [id, consumerId, tag, at] = entry;
    const header = store.get(id);
    if (header === undefined) corrupt(`delivery of unknown message ${id}`);
    if (header.place !== 'delivered') corrupt(`delivery of message ${id} in place ${header.place}`);
    header.setDelivery(consumerId, tag, at);
  }
  if (store.deliveries.size !== countPlace(places, PLACE_CODES.delivered)) corrupt('delivered messages without a delivery');
  for (const holder of meta.getHolders ?? []) {
    for (const [tag, id] of holder.unacked) {
      const delivery = store.get(id)?.delivery;
      if (delivery === undefined || delivery.consumerId !== holder.id || delivery.tag !== tag) corrupt(`get holder ${holder.id} tag ${tag}: no such delivery of message ${id}`);
    }
  }
  const { messageCount: _n, levels: _l, routes: _r, deaths: _d, expirations: _e, deliveries: _v, ...rest } = meta;
  return assemble({ ...rest, ready, delayedHeap, expiryHeap }, store);
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
