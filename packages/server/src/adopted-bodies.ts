/**
 * After a restart, the records the saved queue snapshots reference. The message store
 * treats every record nobody adopted as dead once `recovered()` is called, but a queue's
 * replica is created only when this node's metadata names the queue, which may be long
 * after the start (the metadata group replays what a quorum commits). So at the start the
 * node reads every saved queue snapshot, adopts the records it lists, holds them here,
 * and only then calls `recovered()`; a replica restoring that snapshot takes its group's
 * handles over.
 */
import type { BodyHandle, MessageStoreApi, NodeStorage } from '@quorumq/storage';
import type { Logger } from 'pino';

import { decodeQueueSnapshot } from './log-format.js';

/** One group's adopted records: a handle and how many references it holds for the group. */
export class AdoptedGroup {
  private readonly records = new Map<number, { readonly handle: BodyHandle; references: number }>();

  constructor(private readonly store: MessageStoreApi) {}

  add(recordId: number, handle: BodyHandle): void {
    const known = this.records.get(recordId);
    if (known === undefined) this.records.set(recordId, { handle, references: 1 });
    else known.references++;
  }

  /** One reference to the record (the caller owns it now), or undefined when none is left. */
  take(recordId: number): BodyHandle | undefined {
    const known = this.records.get(recordId);
    if (known === undefined || known.references === 0) return undefined;
    known.references--;
    return known.handle;
  }

  /** Releases the references nobody took. */
  releaseRest(): void {
    for (const known of this.records.values()) for (; known.references > 0; known.references--) this.store.release(known.handle);
    this.records.clear();
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
      const snapshot = storage.savedSnapshot(groupId);
      if (snapshot === null) continue;
      let refs;
      try {
        refs = decodeQueueSnapshot(snapshot.data).refs;
      } catch (error) {
        logger.error({ err: error, group: groupId }, 'a saved queue snapshot does not decode');
        continue;
      }
      if (refs === null) continue;
      if (refs.storeId !== store.storeId) {
        logger.error({ group: groupId, storeId: refs.storeId, ours: store.storeId }, "a saved queue snapshot references another node's message store: its messages' bytes are not here");
        continue;
      }
      const group = new AdoptedGroup(store);
      for (const recordId of refs.recordIds) {
        const handle = store.adopt(recordId);
        if (handle === null) missing++;
        else group.add(recordId, handle);
      }
      adopted.byGroup.set(groupId, group);
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
