/**
 * Memory that follows work. At each of the node's periodic checks, every queue replica that
 * applied nothing since the previous one gives back what it keeps for work: its snapshot
 * scratch, and its log since the last snapshot, by taking one (QueueReplica.idleCheck).
 * Once no replica applied anything and no snapshot is being taken, the node releases its
 * heap (HeapTrim: collect, then trim), a few checks in a row (what finishes after the
 * first, such as a compaction of the message store, goes at the next), then not again
 * before more work was done. A node that has done no work yet releases nothing (see
 * heap-trim.ts for why).
 *
 * So a node holding a backlog it is not working on, or one whose backlog drained, keeps
 * about what its live state needs; a busy node keeps its scratch and log for the work.
 */
import type { HeapTrim } from './heap-trim.js';
import type { LocalQueue } from './local-queue.js';

/** Releases per idle stretch, one per check. */
export const IDLE_RELEASES = 3;

export class IdleMemory {
  /** Releases left in this idle stretch: none until work was seen. */
  private releasesLeft = 0;

  constructor(
    private readonly queues: () => Iterable<LocalQueue>,
    private readonly trim: HeapTrim | null,
  ) {}

  /** The periodic check; returns whether the heap was released this time. */
  check(): boolean {
    let idle = true;
    let settling = false;
    for (const { replica, group } of this.queues()) {
      if (!replica.idleCheck(() => group.membersHaveApplied())) {
        idle = false;
        continue;
      }
      // Only one that asked: a call per idle group would cost the node's idle CPU at 10,000 queues.
      if (replica.idleSnapshotPending) group.snapshotIfDue();
      if (group.snapshotInProgress) settling = true;
    }
    if (!idle) {
      this.releasesLeft = IDLE_RELEASES;
      return false;
    }
    if (settling || this.releasesLeft === 0 || this.trim === null) return false;
    this.releasesLeft -= 1;
    this.trim.release();
    return true;
  }
}
