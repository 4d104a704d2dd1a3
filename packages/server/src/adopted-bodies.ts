/**
 * After a restart, the records the saved queue snapshots reference. The message store
 * treats every record nobody adopted as dead once `recovered()` is called, but a queue's
 * replica is created only when this node's metadata names the queue, which may be long
 * after the start (the metadata group replays what a quorum commits). So at the start the
 * node reads every saved queue snapshot, adopts the records it lists, holds them here,
 * and only then calls `recovered()`; a replica restoring that snapshot takes its group's
 * handles over (and the decoded snapshot with them: it is not decoded twice).
 */
import type { BodyHandle, MessageStoreApi, NodeStorage } from '@quorumq/storage';
import type { Logger } from 'pino';

import { decodeQueueSnapshot, type DecodedQueueSnapshot, type SnapshotRefs } from './log-format.js';

const NONE = -1;

/** One group's adopted records: a handle per position of its snapshot's list (one reference each). */
export class AdoptedGroup {
  private byRecord: Map<number, number[]> | null = null;

  constructor(
    /** The saved snapshot's bytes, and them decoded. */
    readonly data: Uint8Array,
    readonly snapshot: DecodedQueueSnapshot & { readonly refs: SnapshotRefs },
    private readonly handles: Int32Array,
    private readonly store: MessageStoreApi,
  ) {}

  /** The handle of the record at `position` of the list (the caller owns its reference now), or undefined. */
  take(position: number): BodyHandle | undefined {
    const handle = this.handles[position];
    if (handle === undefined || handle === NONE) return undefined;
    this.handles[position] = NONE;
    return handle;
  }

  /** A handle of record `recordId`, for a list in another order than the saved one's. */
  takeRecord(recordId: number): BodyHandle | undefined {
    if (this.byRecord === null) {
      this.byRecord = new Map();
      const recordIds = this.snapshot.refs.recordIds;
      for (let i = 0; i < recordIds.length; i++) {
        const positions = this.byRecord.get(recordIds[i]!);
        if (positions === undefined) this.byRecord.set(recordIds[i]!, [i]);
        else positions.push(i);
      }
    }
    const positions = this.byRecord.get(recordId);
    while (positions !== undefined && positions.length > 0) {
      const handle = this.take(positions.pop()!);
      if (handle !== undefined) return handle;
    }
    return undefined;
  }

  /** Releases the references nobody took. */
  releaseRest(): void {
    for (let i = 0; i < this.handles.length; i++) {
      const handle = this.handles[i]!;
      if (handle === NONE) continue;
      this.handles[i] = NONE;
      this.store.release(handle);
    }
  }
}

export class AdoptedBodies {
  private readonly byGroup = new Map<string, AdoptedGroup>();

  private constructor() {}

  /** Adopts what every saved queue snapshot of `storage` references, then calls `store.recovered()`. */
  static collect(store: MessageStoreApi, storage: Pick<NodeStorage, 'groups' | 'savedSnapshot'>, logger: Logger): AdoptedBodies {
    const adopted = new AdoptedBodies();
    let missing = 0;
    for (const groupId of storage.groups()) {
      if (!groupId.startsWith('q/')) continue;
      const saved = storage.savedSnapshot(groupId);
      if (saved === null) continue;
      let snapshot: DecodedQueueSnapshot;
      try {
        snapshot = decodeQueueSnapshot(saved.data);
      } catch (error) {
        logger.error({ err: error, group: groupId }, 'a saved queue snapshot does not decode');
        continue;
      }
      const refs = snapshot.refs;
      if (refs === null) continue;
      if (refs.storeId !== store.storeId) {
        logger.error({ group: groupId, storeId: refs.storeId, ours: store.storeId }, "a saved queue snapshot references another node's message store: its messages' bytes are not here");
        continue;
      }
      const handles = new Int32Array(refs.recordIds.length);
      for (let i = 0; i < handles.length; i++) {
        const handle = store.adopt(refs.recordIds[i]!);
        if (handle === null) missing++;
        handles[i] = handle ?? NONE;
      }
      adopted.byGroup.set(groupId, new AdoptedGroup(saved.data, { ...snapshot, refs }, handles, store));
    }
    if (missing > 0) logger.error({ missing }, 'records referenced by saved queue snapshots are missing from the message store: those messages have lost their bytes');
    store.recovered();
    return adopted;
  }

  /** The records adopted for `groupId` (the caller takes them over), or null. */
  take(groupId: string): AdoptedGroup | null {
    const group = this.byGroup.get(groupId);
    if (group === undefined) return null;
    this.byGroup.delete(groupId);
    return group;
  }

  /** Releases what a group that will not be restored here (deleted meanwhile) holds. */
  forget(groupId: string): void {
    this.take(groupId)?.releaseRest();
  }
}
