/**
 * Snapshots (spec 10): the whole state as plain JSON-safe data, and back. The layout
 * keeps every internal order (messages by id, consumer and producer map order, heap
 * arrays, lazy index entries) so that a restored state behaves exactly like the
 * original from then on. Message headers are written in their plain form (format
 * unchanged from the `Map` era); slots and interned route ids are not part of it.
 */
import type { QueueArguments } from './arguments.js';
import { IdDeque } from './deque.js';
import { assert } from './errors.js';
import { DeadlineHeap } from './heap.js';
import type { ConsumerState, GoneReason, Place, PlaceTotals, QueueState } from './state.js';
import { MessageStore, type PlainMessageHeader } from './store.js';

export const SNAPSHOT_VERSION = 1;

interface ConsumerSnapshot extends Omit<ConsumerState, 'unacked'> {
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
  readonly producers: Array<[string, { sequence: number; lastSeenAt: number }]>;
  readonly serveSeq: number;
  readonly hadConsumer: boolean;
  readonly lastUsedAt: number;
  readonly tickAt: number;
  readonly deleted: boolean;
  readonly clockMs: number;
  readonly lastIndex: number;
  readonly gone: Record<GoneReason, number>;
  readonly enqueued: number;
}

export function snapshot(state: QueueState): QueueSnapshot {
  return structuredClone({
    version: SNAPSHOT_VERSION,
    name: state.name,
    args: state.args,
    messages: state.messages.values().map((m) => m.toPlain()),
    ready: state.ready.map((level) => ({ returned: level.returned, fresh: level.fresh.toArray() })),
    delayedHeap: state.delayedHeap.toArray(),
    expiryHeap: state.expiryHeap.toArray(),
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
  });
}

export function restore(data: QueueSnapshot): QueueState {
  assert(data.version === SNAPSHOT_VERSION, () => `unknown queue snapshot version ${data.version}`);
  const copy = structuredClone(data);
  const state: QueueState = {
    name: copy.name,
    args: copy.args,
    messages: restoreMessages(copy.messages),
    ready: copy.ready.map((level) => ({ returned: level.returned, fresh: IdDeque.fromArray(level.fresh) })),
    delayedHeap: new DeadlineHeap(copy.delayedHeap),
    expiryHeap: new DeadlineHeap(copy.expiryHeap),
    totals: copy.totals,
    consumers: new Map(copy.consumers.map((c) => [c.id, { ...c, unacked: new Map(c.unacked) }])),
    activeConsumerId: copy.activeConsumerId,
    producers: new Map(copy.producers),
    serveSeq: copy.serveSeq,
    hadConsumer: copy.hadConsumer,
    lastUsedAt: copy.lastUsedAt,
    tickAt: copy.tickAt,
    deleted: copy.deleted,
    clockMs: copy.clockMs,
    lastIndex: copy.lastIndex,
    gone: copy.gone,
    enqueued: copy.enqueued,
  };
  assert(state.ready.length === state.args.maxPriority + 1, 'snapshot has the wrong number of priority levels');
  return state;
}

function restoreMessages(messages: readonly PlainMessageHeader[]): MessageStore {
  const store = new MessageStore();
  for (const message of messages) store.insertPlain(message);
  return store;
}

export function encodeSnapshot(state: QueueState): Uint8Array {
  return new TextEncoder().encode(JSON.stringify(snapshot(state)));
}

export function decodeSnapshot(bytes: Uint8Array): QueueState {
  return restore(JSON.parse(new TextDecoder().decode(bytes)) as QueueSnapshot);
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
