/**
 * The bytes of a queue snapshot's messages, moved from the member that sent the snapshot to
 * the follower that installs it.
 *
 * A queue's snapshot holds its machine and references into its node's message store (the
 * local form), never the bytes: a snapshot of a 10 GB backlog is a few hundred MB of
 * metadata. A leader sends that form as it is. The follower's Raft core holds it once it has
 * every chunk (RaftOptions.holdReceivedSnapshots) and the follower prepares it
 * (`IncomingBodies.prepare`): for each message the snapshot lists, it takes the record its
 * own replica already has, or fetches the bytes from the sender (`serveSnapshotBodies`, over
 * Peer.FetchBodies) a batch at a time into its own store; once they are durable it encodes
 * the same snapshot with references into its own store, and that is what it installs and
 * saves. So neither side ever holds more than a batch of bytes, whatever the backlog.
 *
 * The sender serves only while the snapshot is still its group's newest: until its next
 * snapshot is saved every message the snapshot lists stays readable there (ReplicaBodies
 * pins what left since), so a message it has no bytes for was lost, not consumed. A
 * follower whose fetch fails (the sender snapshotted again, crashed, or is cut off) drops the
 * held snapshot and keeps what it fetched: the next transfer (of the same or a newer
 * snapshot, which lists mostly the same messages) fetches only the rest.
 */
import type { NodeId } from '@quorumq/raft';
import type { MessageStoreApi } from '@quorumq/storage';

import { BrokerError, Reason, Status } from './errors.js';
import { IdHandleIndex } from './id-handle-index.js';
import { assembleQueueSnapshotRefs, PackedDeltas, type DecodedQueueSnapshot } from './log-format.js';
import type { ReplicaBodies } from './replica-bodies.js';

/** Message ids a follower asks for in one call (4 MiB of 1 KiB messages). */
export const FETCH_IDS_MAX = 4096;

/**
 * Calls a follower has in flight to the sender: while one answer is read from the sender's
 * store and sent, the previous one goes into the follower's store.
 */
const FETCHES_IN_FLIGHT = 2;

/** Bytes a member answers one call with, at most (and at least one message). */
export const FETCH_BYTES_MAX = 8 * 1024 * 1024;

/** Listed messages a preparation looks at between two pauses (other work runs between). */
const PREPARE_STEP = 16_384;

/** Asks `peer` for the bytes of messages its snapshot at `snapshotIndex` lists: a prefix of `ids`, null for one it has none for. */
export type FetchBodies = (peer: NodeId, groupId: string, snapshotIndex: number, ids: readonly number[]) => Promise<ReadonlyArray<Uint8Array | null>>;

/** Where a snapshot being prepared comes from, and how the preparation shares the event loop. */
export interface SnapshotSource {
  readonly groupId: string;
  /** The member that sent it (whose newest snapshot it is). */
  readonly from: NodeId;
  readonly index: number;
  /** Resolves after other work had a turn. */
  readonly pause: () => Promise<void>;
}

/** What serving a fetch needs of the member's replica of the group. */
export interface SnapshotBodiesServer {
  /** The index of the group's newest snapshot here (taken or installed), or null. */
  readonly snapshotIndex: number | null;
  readonly bodies: Pick<ReplicaBodies, 'read'>;
}

/**
 * The bytes of the messages `ids` (listed by this member's snapshot at `snapshotIndex`), in
 * order, as many as fit in `bytesMax` (at least one); null for one this member has no bytes
 * for. Refused (FAILED_PRECONDITION) when that snapshot is no longer the group's newest here:
 * what it lists may be gone.
 */
export function serveSnapshotBodies(server: SnapshotBodiesServer, groupId: string, snapshotIndex: number, ids: readonly number[], bytesMax: number): Array<Uint8Array | null> {
  if (server.snapshotIndex !== snapshotIndex) {
    throw new BrokerError(
      Status.FAILED_PRECONDITION,
      Reason.PRECONDITION_FAILED,
      `the newest snapshot of ${groupId} here is at ${server.snapshotIndex ?? 'none'}, not ${snapshotIndex}: ask for the newer one`,
    );
  }
  const limit = Math.min(Math.max(1, bytesMax), FETCH_BYTES_MAX * 4);
  const out: Array<Uint8Array | null> = [];
  let bytes = 0;
  for (const id of ids) {
    const body = server.bodies.read(id) ?? null;
    const size = body?.byteLength ?? 0;
    // Never over the limit but for a first message larger than it (up to max_message_bytes).
    if (out.length > 0 && bytes + size > limit) break;
    out.push(body);
    bytes += size;
  }
  return out;
}

/** A snapshot prepared for install: its data in the local form of this node's store. */
export interface PreparedSnapshot {
  readonly data: Uint8Array;
  /** Listed messages the sender had no bytes for (not listed in `data`). */
  readonly lost: number;
  /** Messages the snapshot lists, and how many of them were fetched (the others were here), with their bytes. */
  readonly listed: number;
  readonly fetched: number;
  readonly fetchedBytes: number;
}

/**
 * A follower replica's records for the snapshot it prepares: what it fetched (or took from
 * its own replica) so far, by message id, each handle one reference of its own. Kept from
 * one attempt to the next, handed to the replica when the prepared snapshot is restored,
 * released when the replica is restored otherwise or closed.
 */
export class IncomingBodies {
  /** Message id -> a handle this holds a reference to, in id order. */
  private staged = new IdHandleIndex();
  /** The snapshot prepared last (its records are in `staged`), until it is restored. */
  private preparedData: Uint8Array | null = null;

  constructor(
    private readonly store: MessageStoreApi,
    private readonly fetch: FetchBodies,
  ) {}

  /** Records held for snapshots being prepared. */
  get size(): number {
    return this.staged.size;
  }

  /**
   * Makes every message `snapshot` lists readable from this node's store: a record held
   * from an earlier attempt or one `own` (the replica now) has is shared, the others are
   * fetched from `source.from`. Resolves with the snapshot re-encoded with references into
   * this store once those are durable. Rejects when a fetch fails (what was fetched is kept
   * for the next attempt) or the store refuses a write.
   */
  async prepare(snapshot: DecodedQueueSnapshot, source: SnapshotSource, own: ReplicaBodies): Promise<PreparedSnapshot> {
    const refs = snapshot.refs;
    if (refs === null) throw new Error('a portable snapshot needs no preparation');
    this.preparedData = null;
    const ids = refs.messageIds;
    const previous = this.staged;
    const next = new IdHandleIndex();
    next.reserve(ids.length);
    let lost = 0;
    let fetched = 0;
    let fetchedBytes = 0;
    let done = false;
    try {
      const window = new Int32Array(Math.min(PREPARE_STEP, ids.length));
      for (let start = 0; start < ids.length; start += PREPARE_STEP) {
        const end = Math.min(ids.length, start + PREPARE_STEP);
        const wanted: number[] = [];
        for (let i = start; i < end; i++) {
          const id = ids[i]!;
          let handle = previous.get(id) ?? NONE;
          if (handle !== NONE) this.store.retain(handle);
          else handle = own.shareRecord(id) ?? NONE;
          window[i - start] = handle;
          if (handle === NONE) wanted.push(i);
        }
        try {
          // FETCHES_IN_FLIGHT calls at a time, each answer put into the store as it comes (a
          // failed call keeps what came before); a short answer's rest is asked again.
          const slices: Array<readonly [number, number]> = [];
          for (let w = 0; w < wanted.length; w += FETCH_IDS_MAX) slices.push([w, Math.min(wanted.length, w + FETCH_IDS_MAX)]);
          let failed = false;
          const worker = async (): Promise<void> => {
            for (let slice = slices.shift(); slice !== undefined && !failed; slice = slices.shift()) {
              const [from, to] = slice;
              const asked = wanted.slice(from, to).map((i) => ids[i]!);
              const answer = await this.fetch(source.from, source.groupId, source.index, asked).catch((error: unknown) => {
                failed = true;
                throw error;
              });
              if (answer.length === 0 || answer.length > asked.length) throw new Error(`${source.from} answered ${answer.length} of ${asked.length} messages`);
              for (let k = 0; k < answer.length; k++) {
                const body = answer[k]!;
                const i = wanted[from + k]!;
                if (body === null) {
                  lost++;
                  window[i - start] = LOST;
                } else {
                  window[i - start] = this.store.put(body);
                  fetched++;
                  fetchedBytes += body.byteLength;
                }
              }
              if (from + answer.length < to) slices.push([from + answer.length, to]);
            }
          };
          const workers = Array.from({ length: Math.min(FETCHES_IN_FLIGHT, slices.length) }, () => worker());
          // Every call settles before the window is kept (a late answer's records with it).
          const settled = await Promise.allSettled(workers);
          for (const outcome of settled) if (outcome.status === 'rejected') throw outcome.reason;
        } finally {
          for (let i = start; i < end; i++) if (window[i - start]! >= 0) next.set(ids[i]!, window[i - start]!);
        }
        if (wanted.length === 0) await source.pause();
      }
      await this.store.sync();
      done = true;
    } finally {
      if (done) {
        // Held for an older snapshot and not listed by this one: consumed since.
        previous.forEach((_id, handle) => this.store.release(handle));
        this.staged = next;
      } else {
        this.staged = merge(next, previous, this.store);
      }
    }
    const messageIds = new PackedDeltas(next.size);
    const recordIds = new PackedDeltas(next.size);
    next.forEach((id, handle) => {
      messageIds.push(id);
      recordIds.push(this.store.recordId(handle));
    });
    const data = assembleQueueSnapshotRefs(snapshot.machine, this.store.storeId, messageIds, recordIds);
    this.preparedData = data;
    return { data, lost, listed: ids.length, fetched, fetchedBytes };
  }

  /**
   * The handles (one reference each, now the caller's) of the messages the prepared snapshot
   * `data` lists, in its order; null when `data` is not the one prepared last.
   */
  take(data: Uint8Array): Int32Array | null {
    if (this.preparedData === null || this.preparedData !== data) return null;
    const handles = new Int32Array(this.staged.size);
    let n = 0;
    this.staged.forEach((_id, handle) => {
      handles[n++] = handle;
    });
    this.preparedData = null;
    this.staged = new IdHandleIndex();
    return handles;
  }

  /** Releases every record held (the replica was restored otherwise, or is gone). */
  release(): void {
    this.preparedData = null;
    this.staged.forEach((_id, handle) => this.store.release(handle));
    this.staged = new IdHandleIndex();
  }
}

/** No handle yet (window), and a message the sender has no bytes for. */
const NONE = -1;
const LOST = -2;

/**
 * `next` (what this attempt staged) with what `previous` holds that `next` does not, in id
 * order; a message both hold keeps `next`'s handle and releases `previous`'s reference.
 */
function merge(next: IdHandleIndex, previous: IdHandleIndex, store: MessageStoreApi): IdHandleIndex {
  if (previous.size === 0) return next;
  const merged = new IdHandleIndex();
  merged.reserve(next.size + previous.size);
  const a = entries(next);
  const b = entries(previous);
  let i = 0;
  let j = 0;
  while (i < a.ids.length || j < b.ids.length) {
    if (j >= b.ids.length || (i < a.ids.length && a.ids[i]! < b.ids[j]!)) {
      merged.set(a.ids[i]!, a.handles[i]!);
      i++;
    } else if (i >= a.ids.length || b.ids[j]! < a.ids[i]!) {
      merged.set(b.ids[j]!, b.handles[j]!);
      j++;
    } else {
      merged.set(a.ids[i]!, a.handles[i]!);
      store.release(b.handles[j]!);
      i++;
      j++;
    }
  }
  return merged;
}

function entries(index: IdHandleIndex): { ids: number[]; handles: number[] } {
  const ids: number[] = [];
  const handles: number[] = [];
  index.forEach((id, handle) => {
    ids.push(id);
    handles.push(handle);
  });
  return { ids, handles };
}
