/**
 * One queue replica's message bytes, kept in the node's message store: a handle per live
 * message id, in id order (ids grow with the log, so insertion order is id order). The
 * replica keeps 8-16 bytes per message here; the bytes are read back from the store when a
 * message is delivered, got, dead-lettered, moved, or fetched by a follower installing a
 * snapshot.
 *
 * Snapshots hold references (record ids), so a record must outlive its message while a
 * snapshot that lists it can still be read:
 * - the latest snapshot taken (a follower installing it fetches the bytes it lists from
 *   here, see snapshot-bodies.ts), and
 * - the snapshot saved on disk (a restart adopts its records), which is the one before
 *   until the new one's save completes.
 * So a message that leaves after a snapshot listed it is *pinned* (its record kept) until
 * the next snapshot is saved. Only ids below `pinBelow` can be listed: a message applied
 * after the snapshot has a larger id.
 */
import type { BodyHandle, MessageStoreApi } from '@quorumq/storage';

import { IdHandleIndex } from './id-handle-index.js';

/** Messages that left from behind the front are swept once there are this many (or an eighth of those left). */
const SWEEP_STALE_MIN = 64;

/** Bytes a replica holds as views of log entries before it puts them into the store. */
export const HOLD_BYTES_MAX = 4 * 1024 * 1024;

/** The index's handle of a held message (store handles are >= 0; the index's hole is -1). */
const HELD = -2;

/**
 * Messages that left all at once (a purge), pinned or releasing as a whole: their ids
 * ascending, with their handles. Two array pushes each instead of a Map entry, and moved
 * from pinned to releasing at the next snapshot in one step.
 */
interface PinnedRun {
  readonly ids: number[];
  readonly handles: BodyHandle[];
}

/** The handle of `id` in one of `runs`, or undefined. */
function handleInRuns(runs: readonly PinnedRun[], id: number): BodyHandle | undefined {
  for (const { ids, handles } of runs) {
    let lo = 0;
    let hi = ids.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (ids[mid]! < id) lo = mid + 1;
      else hi = mid;
    }
    if (lo < ids.length && ids[lo] === id) return handles[lo];
  }
  return undefined;
}

export class ReplicaBodies {
  private readonly live = new IdHandleIndex();
  /** Held messages (handle HELD in `live`): their bytes, views of log entries, in id order. */
  private held = new Map<number, Uint8Array>();
  /** Sum of the held messages' byte lengths. */
  private heldSum = 0;
  /** Left after the latest snapshot listed them: readable until the next snapshot is saved. */
  private pinned = new Map<number, BodyHandle>();
  /**
   * Left after the snapshot before the latest one listed them: released once the latest one
   * is saved (until then that older snapshot is the group's newest in its Raft core, and a
   * follower installing it may still fetch them: see snapshot-bodies.ts).
   */
  private releasing = new Map<number, BodyHandle>();
  /** `pinned` and `releasing` of the messages that left all at once (see PinnedRun). */
  private pinnedRuns: PinnedRun[] = [];
  private releasingRuns: PinnedRun[] = [];
  /** Ids below this may be listed by the latest snapshot. */
  private pinBelow = 0;
  /** Sum of the live messages' byte lengths. */
  bytes = 0;
  /** Sum of the pinned messages' byte lengths: disk kept only for the latest snapshot. */
  pinnedBytes = 0;

  constructor(readonly store: MessageStoreApi) {}

  get size(): number {
    return this.live.size;
  }

  /** Bytes held as views of log entries (not yet in the store). */
  get heldBytes(): number {
    return this.heldSum;
  }

  /** Messages held as views of log entries (not yet in the store). */
  get heldMessages(): number {
    return this.held.size;
  }

  keys(): IterableIterator<number> {
    return this.live.keys();
  }

  has(id: number): boolean {
    return this.live.get(id) !== undefined;
  }

  /** Stores a message's bytes (copied) under `id`; a `key` shares the record of a fan-out. */
  put(id: number, bytes: Uint8Array, key?: string): void {
    const handle = this.store.put(bytes, key);
    const previous = this.live.set(id, handle);
    if (previous !== undefined) this.drop(id, previous);
    this.bytes += bytes.byteLength;
  }

  /**
   * Keeps `bytes` (not copied: a view of the log entry that carried the message) under `id`.
   * Beyond HOLD_BYTES_MAX held, the oldest held messages go into the store, as many as keep
   * the replica under it: a sliding window, so that each turn stores about what it added.
   * (Storing all 4 MiB at once when the limit was reached blocked the event loop for 50-100
   * ms every few thousand messages, each time delaying every confirm in flight.) Returns how
   * many messages the store refused (see `storeHeld`).
   */
  hold(id: number, bytes: Uint8Array): number {
    const previous = this.live.set(id, HELD);
    if (previous !== undefined) this.drop(id, previous);
    this.held.set(id, bytes);
    this.heldSum += bytes.byteLength;
    this.bytes += bytes.byteLength;
    return this.heldSum > HOLD_BYTES_MAX ? this.storeHeld(HOLD_BYTES_MAX) : 0;
  }

  /**
   * Puts the held messages into the store, oldest first, until at most `keepBytes` are held
   * (default none). A message the store refuses (over its size limit, or the store is
   * closing) loses its bytes; returns how many did.
   */
  storeHeld(keepBytes = 0): number {
    let lost = 0;
    for (const [id, bytes] of this.held) {
      if (this.heldSum <= keepBytes) break;
      this.held.delete(id);
      this.heldSum -= bytes.byteLength;
      try {
        this.live.set(id, this.store.put(bytes));
      } catch {
        this.live.delete(id);
        this.bytes -= bytes.byteLength;
        lost++;
      }
    }
    if (this.held.size === 0) this.held = new Map();
    return lost;
  }

  /** Takes over a handle the caller holds a reference to (a record adopted at startup). */
  /** Room for `count` live messages without growing (a restore). */
  reserve(count: number): void {
    this.live.reserve(count);
  }

  adopt(id: number, handle: BodyHandle): void {
    this.live.set(id, handle);
    this.bytes += this.store.size(handle);
  }

  /**
   * A live or pinned message's bytes; undefined when it has none or they cannot be read. A
   * held message's bytes are a view of its log entry: not to be changed.
   */
  read(id: number): Uint8Array | undefined {
    const handle = this.live.get(id) ?? this.leftHandle(id);
    if (handle === HELD) return this.held.get(id);
    return handle === undefined ? undefined : this.store.read(handle);
  }

  /**
   * A reference of the caller's own to the record of a message this replica can read (see
   * `read`), for a snapshot being prepared here (see IncomingBodies); undefined when it has
   * none. A held message is put into the store for it (a record of its own).
   */
  shareRecord(id: number): BodyHandle | undefined {
    const handle = this.live.get(id) ?? this.leftHandle(id);
    if (handle === undefined) return undefined;
    if (handle === HELD) return this.store.put(this.held.get(id)!);
    this.store.retain(handle);
    return handle;
  }

  /** The handle of a message that left but is still readable (pinned or releasing). */
  private leftHandle(id: number): BodyHandle | undefined {
    return (
      this.pinned.get(id) ??
      this.releasing.get(id) ??
      (this.pinnedRuns.length === 0 ? undefined : handleInRuns(this.pinnedRuns, id)) ??
      (this.releasingRuns.length === 0 ? undefined : handleInRuns(this.releasingRuns, id))
    );
  }

  /** The message left the queue. */
  delete(id: number): void {
    const handle = this.live.delete(id);
    if (handle !== undefined) this.drop(id, handle);
  }

  private drop(id: number, handle: BodyHandle): void {
    if (handle === HELD) {
      // Applied after the latest snapshot: no snapshot lists it.
      const bytes = this.held.get(id)!;
      this.held.delete(id);
      this.heldSum -= bytes.byteLength;
      this.bytes -= bytes.byteLength;
      return;
    }
    const size = this.store.size(handle);
    this.bytes -= size;
    if (id < this.pinBelow) {
      this.pinned.set(id, handle);
      this.pinnedBytes += size;
    } else {
      this.store.release(handle);
    }
  }

  /**
   * Deletes the messages `has` no longer holds (`remaining` of them are left): those at the
   * front at once (cheap when the queue is consumed in order), the others in whole passes.
   */
  sweep(has: (id: number) => boolean, remaining: number): void {
    if (this.live.size <= remaining) return;
    if (remaining === 0) {
      this.deleteAll();
      return;
    }
    for (let id = this.live.first(); id !== undefined && !has(id); id = this.live.first()) this.delete(id);
    // Behind a message that stays (an unacked head), what left is found by a whole pass, once
    // it is an eighth of what remains (or 64): O(1) per message, and their disk goes soon.
    if (this.live.size - remaining > Math.max(SWEEP_STALE_MIN, remaining >>> 3)) this.deleteUnless(has);
  }

  /**
   * Every message left at once (a purge, or the last ones acked): `delete` of each, with the
   * pinned ones kept as one run. A purge of 50,000 messages held each node's event loop for
   * 34 ms in `drop` alone, most of it Map entries.
   */
  private deleteAll(): void {
    const ids: number[] = [];
    const handles: BodyHandle[] = [];
    const { store, pinBelow } = this;
    this.live.forEach((id, handle) => {
      if (handle === HELD) return; // applied after the latest snapshot: no snapshot lists it
      if (id < pinBelow) {
        ids.push(id);
        handles.push(handle);
        this.pinnedBytes += store.size(handle);
      } else {
        store.release(handle);
      }
    });
    if (ids.length > 0) this.pinnedRuns.push({ ids, handles });
    this.live.clear();
    if (this.held.size > 0) this.held = new Map();
    this.heldSum = 0;
    this.bytes = 0;
  }

  private deleteUnless(has: (id: number) => boolean): void {
    for (const id of this.live.liveIds()) if (!has(id)) this.delete(id);
  }

  /**
   * A snapshot is taken now, of the messages `has` will say the queue holds: puts the held
   * messages into the store and pins from now on what leaves among those it lists. The
   * listing is then made a step at a time (see SnapshotListing) while the queue changes:
   * what it lists stays readable (pinned) until the next snapshot is saved. `lost` counts
   * the held messages the store refused (they have no bytes any more, and are not listed).
   */
  snapshotBegin(has: (id: number) => boolean, reuse?: SnapshotListing | null): { listing: SnapshotListing; lost: number } {
    const lost = this.storeHeld();
    const listing = new SnapshotListing(this.live.copy(reuse?.index), this.store, has);
    for (const [id, handle] of this.pinned) this.releasing.set(id, handle);
    this.pinned = new Map();
    if (this.pinnedRuns.length > 0) {
      this.releasingRuns.push(...this.pinnedRuns);
      this.pinnedRuns = [];
    }
    this.pinnedBytes = 0;
    this.pinBelow = (this.live.last() ?? -1) + 1;
    return { listing, lost };
  }

  /** `snapshotBegin`, listed at once: the ids and record ids of the messages `has` holds, in id order. */
  snapshotTaken(has: (id: number) => boolean): { messageIds: number[]; recordIds: number[]; lost: number } {
    const { listing, lost } = this.snapshotBegin(has);
    const messageIds: number[] = [];
    const recordIds: number[] = [];
    while (!listing.step(Number.MAX_SAFE_INTEGER, (id, recordId) => (messageIds.push(id), recordIds.push(recordId)))) {
      // one step lists them all
    }
    return { messageIds, recordIds, lost };
  }

  /** The snapshot last taken is durable: what only its predecessor listed is released. */
  snapshotSaved(): void {
    const releasing = this.releasing;
    this.releasing = new Map();
    for (const handle of releasing.values()) this.store.release(handle);
    if (this.releasingRuns.length > 0) {
      const runs = this.releasingRuns;
      this.releasingRuns = [];
      for (const run of runs) for (const handle of run.handles) this.store.release(handle);
    }
  }

  /**
   * Restored from a local snapshot listing these ids: what leaves among them is pinned
   * (the snapshot on disk lists it until the next one is saved).
   */
  restoredFromRefs(messageIds: readonly number[]): void {
    this.pinBelow = messageIds.length === 0 ? 0 : messageIds[messageIds.length - 1]! + 1;
  }

  /** Releases every record (the replica is replaced by a portable snapshot, or deleted). */
  clear(): void {
    this.live.forEach((_id, handle) => {
      if (handle !== HELD) this.store.release(handle);
    });
    this.held = new Map();
    this.heldSum = 0;
    for (const handle of this.pinned.values()) this.store.release(handle);
    for (const handle of this.releasing.values()) this.store.release(handle);
    for (const run of [...this.pinnedRuns, ...this.releasingRuns]) for (const handle of run.handles) this.store.release(handle);
    this.pinnedRuns = [];
    this.releasingRuns = [];
    this.live.clear();
    this.pinned = new Map();
    this.pinnedBytes = 0;
    this.releasing = new Map();
    this.pinBelow = (this.live.last() ?? -1) + 1;
    this.bytes = 0;
  }
}

/**
 * The messages a snapshot lists, found a step at a time in a copy of the replica's index
 * taken when the snapshot began: those `has` (the queue's state at that moment) holds, with
 * their record ids. Their records stay (pinned) until the next snapshot is saved, so the
 * handles in the copy remain valid while it is walked.
 */
export class SnapshotListing {
  private next = 0;

  constructor(
    /** The copy of the replica's index (its arrays may be reused by the next listing). */
    readonly index: IdHandleIndex,
    private readonly store: MessageStoreApi,
    private readonly has: (id: number) => boolean,
  ) {}

  /** Lists up to `budget` more positions through `each` (id order); true once all are listed. */
  step(budget: number, each: (id: number, recordId: number) => void): boolean {
    const to = Math.min(this.index.end, this.next + Math.max(1, budget));
    const { store, has } = this;
    this.index.scan(this.next, to, (id, handle) => {
      if (has(id)) each(id, store.recordId(handle));
    });
    this.next = to;
    return to >= this.index.end;
  }
}
