/**
 * Keyed compaction (spec 9, seed 003): a queue with `compaction_key` keeps the last value per
 * key. The key index maps each key to its live messages (usually one); a new message with
 * the key replaces the ones still waiting (ready or delayed, older than
 * `compaction_min_lag_ms`), and a message of the key that comes back (a returned delivery,
 * a failed move) after a newer one was enqueued is replaced too, so that at most one
 * message per key waits, the latest. Delivered, dead-lettering and moving messages stay
 * until settled. A tombstone (empty body or the tombstone flag) is a message like the
 * others that says the key was deleted: it replaces the waiting value, is delivered, and
 * waits at most `compaction_tombstone_retention_ms` before it is dropped.
 *
 * Only bookkeeping lives here; what happens to a replaced message (dropped, or
 * dead-lettered as `compacted`) is `compact` in deadletter.ts.
 */
import { assert } from './errors.js';
import type { MessageHeader, QueueState } from './state.js';

/** One live message of a key. */
export interface KeyedMessage {
  readonly id: number;
  /** Leader time of its enqueue: `compaction_min_lag_ms` counts from here. */
  readonly at: number;
  readonly tombstone: boolean;
}

export interface KeyRecord {
  /** The last message enqueued with this key (it may have left since). Invariant: >= every live id. */
  latestId: number;
  /** The key's live messages, ascending ids. Invariant: never empty (the record goes with its last message). */
  readonly live: KeyedMessage[];
}

export interface CompactionState {
  /** Keys with at least one live message, in first-enqueue order. */
  readonly keys: Map<string, KeyRecord>;
  /** Live keyed message id -> its key. */
  readonly keyOf: Map<number, string>;
  /** Messages replaced by a newer one of their key (dropped or dead-lettered as `compacted`). */
  replaced: number;
  /** Tombstones dropped once their retention ended. */
  tombstonesExpired: number;
  /** Live tombstone messages (derived: counted from `keys`). */
  tombstones: number;
}

/** The snapshot form: `[key, latestId, [[id, at, tombstone 0|1], ...]]` per key, in map order. */
export interface CompactionSnapshot {
  readonly replaced: number;
  readonly tombstonesExpired: number;
  readonly keys: Array<[string, number, Array<[number, number, number]>]>;
}

export function createCompactionState(): CompactionState {
  return { keys: new Map(), keyOf: new Map(), replaced: 0, tombstonesExpired: 0, tombstones: 0 };
}

/** The key of an enqueue, when the queue compacts and the command carries one. */
export function enqueueKey(state: QueueState, compactionKey: string | undefined): string | null {
  return state.compaction !== null && compactionKey !== undefined ? compactionKey : null;
}

/** The waiting messages of `key` a newer message replaces now: enqueued at least the minimum lag ago. */
export function replaceableOf(state: QueueState, key: string, now: number): MessageHeader[] {
  const record = state.compaction?.keys.get(key);
  if (record === undefined) return [];
  const lagMs = state.args.compactionMinLagMs ?? 0;
  const out: MessageHeader[] = [];
  for (const keyed of record.live) {
    if (keyed.at + lagMs > now) continue;
    const message = state.messages.get(keyed.id);
    assert(message !== undefined, () => `keyed message ${keyed.id} missing`);
    if (message.place === 'ready' || message.place === 'delayed') out.push(message);
  }
  return out;
}

/** Records a new message under its key: it is now the key's latest. */
export function trackKeyed(state: QueueState, id: number, key: string, tombstone: boolean, now: number): void {
  const compaction = state.compaction;
  assert(compaction !== null, 'keyed message on a queue without compaction');
  let record = compaction.keys.get(key);
  if (record === undefined) {
    record = { latestId: id, live: [] };
    compaction.keys.set(key, record);
  }
  assert(id > record.latestId || record.live.length === 0, () => `keyed message ${id} is not the newest of its key`);
  record.latestId = id;
  record.live.push({ id, at: now, tombstone });
  compaction.keyOf.set(id, key);
  if (tombstone) compaction.tombstones += 1;
}

/** The message left the queue: forget it, and its key once nothing of it is left. */
export function forgetKeyed(compaction: CompactionState, id: number): void {
  const key = compaction.keyOf.get(id);
  if (key === undefined) return;
  compaction.keyOf.delete(id);
  const record = compaction.keys.get(key);
  assert(record !== undefined, () => `key of message ${id} has no record`);
  const at = record.live.findIndex((keyed) => keyed.id === id);
  assert(at >= 0, () => `message ${id} missing from its key's record`);
  if (record.live[at]?.tombstone === true) compaction.tombstones -= 1;
  record.live.splice(at, 1);
  if (record.live.length === 0) compaction.keys.delete(key);
}

/** `forgetKeyed` of every live keyed message. */
export function forgetAllKeyed(compaction: CompactionState): void {
  compaction.keyOf.clear();
  compaction.keys.clear();
  compaction.tombstones = 0;
}

export function isTombstone(state: QueueState, id: number): boolean {
  const key = state.compaction?.keyOf.get(id);
  if (key === undefined) return false;
  return state.compaction?.keys.get(key)?.live.find((keyed) => keyed.id === id)?.tombstone === true;
}

/**
 * A keyed message that a newer one of its key followed, old enough to be replaced: when it
 * comes back to wait (a returned delivery, a failed move) it is replaced instead.
 */
export function isSuperseded(state: QueueState, message: MessageHeader, now: number): boolean {
  const compaction = state.compaction;
  const key = compaction?.keyOf.get(message.id);
  if (compaction === null || compaction === undefined || key === undefined) return false;
  const record = compaction.keys.get(key);
  const keyed = record?.live.find((k) => k.id === message.id);
  return record !== undefined && keyed !== undefined && record.latestId > message.id && keyed.at + (state.args.compactionMinLagMs ?? 0) <= now;
}

/** Keys with at least one live message that is not a tombstone. */
export function liveKeyCount(compaction: CompactionState): number {
  let keys = 0;
  for (const record of compaction.keys.values()) if (record.live.some((keyed) => !keyed.tombstone)) keys += 1;
  return keys;
}

export function compactionSnapshot(compaction: CompactionState): CompactionSnapshot {
  return {
    replaced: compaction.replaced,
    tombstonesExpired: compaction.tombstonesExpired,
    keys: [...compaction.keys.entries()].map(([key, record]) => [key, record.latestId, record.live.map((k): [number, number, number] => [k.id, k.at, k.tombstone ? 1 : 0])]),
  };
}

/** Rebuilds the index; `isLive(id)` says whether the store holds the message (a corrupt snapshot otherwise). */
export function restoreCompaction(data: CompactionSnapshot, isLive: (id: number) => boolean): CompactionState {
  const compaction = createCompactionState();
  compaction.replaced = data.replaced;
  compaction.tombstonesExpired = data.tombstonesExpired;
  for (const [key, latestId, live] of data.keys) {
    assert(live.length > 0, () => `key ${key} has no live message`);
    const record: KeyRecord = { latestId, live: [] };
    let previous = -1;
    for (const [id, at, tombstone] of live) {
      assert(id > previous && id <= latestId && isLive(id) && !compaction.keyOf.has(id), () => `key ${key}: bad message ${id}`);
      previous = id;
      record.live.push({ id, at, tombstone: tombstone === 1 });
      compaction.keyOf.set(id, key);
      if (tombstone === 1) compaction.tombstones += 1;
    }
    compaction.keys.set(key, record);
  }
  return compaction;
}

/** Whether `value` has the shape of a CompactionSnapshot (binary snapshot decoding). */
export function isCompactionSnapshot(value: unknown): value is CompactionSnapshot {
  if (typeof value !== 'object' || value === null) return false;
  const data = value as Record<string, unknown>;
  const count = (v: unknown): boolean => Number.isSafeInteger(v) && (v as number) >= 0;
  if (!count(data['replaced']) || !count(data['tombstonesExpired']) || !Array.isArray(data['keys'])) return false;
  return data['keys'].every(
    (entry: unknown) =>
      Array.isArray(entry) &&
      entry.length === 3 &&
      typeof entry[0] === 'string' &&
      count(entry[1]) &&
      Array.isArray(entry[2]) &&
      entry[2].every((k: unknown) => Array.isArray(k) && k.length === 3 && count(k[0]) && typeof k[1] === 'number' && (k[2] === 0 || k[2] === 1)),
  );
}
