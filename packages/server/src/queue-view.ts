/**
 * What the API layer reads of a queue replica, without reaching into the machine's state:
 * its message counts and its running move.
 */
import { liveKeyCount, moveProgress, type MoveProgress } from '@quorumq/queue';

import type { LocalQueue } from './local-queue.js';

export interface QueueCounts {
  readonly ready: number;
  readonly unacked: number;
  readonly delayed: number;
  readonly deadLettering: number;
  /** Body bytes of every message the queue holds. */
  readonly bytes: number;
  readonly consumers: number;
  /** Keyed compaction (spec 9): on a queue with compaction_key only. */
  readonly compaction?: QueueCompactionCounts;
}

export interface QueueCompactionCounts {
  /** Keys with a live value (not a tombstone). */
  readonly keys: number;
  /** Messages replaced by a newer one of their key. */
  readonly replaced: number;
  /** Tombstones held now. */
  readonly tombstones: number;
  /** Tombstones dropped once their retention ended. */
  readonly tombstonesExpired: number;
}

/** The compaction counts of a compacting queue, or null. */
export function queueCompaction(queue: LocalQueue): QueueCompactionCounts | null {
  const compaction = queue.replica.state.compaction;
  if (compaction === null) return null;
  return { keys: liveKeyCount(compaction), replaced: compaction.replaced, tombstones: compaction.tombstones, tombstonesExpired: compaction.tombstonesExpired };
}

export function queueCounts(queue: LocalQueue): QueueCounts {
  const { totals, consumers } = queue.replica.state;
  const compaction = queueCompaction(queue);
  return {
    ready: totals.ready.count,
    unacked: totals.delivered.count,
    delayed: totals.delayed.count,
    deadLettering: totals.deadLettering.count,
    bytes: totals.ready.bytes + totals.delivered.bytes + totals.delayed.bytes + totals.deadLettering.bytes,
    consumers: consumers.size,
    ...(compaction === null ? {} : { compaction }),
  };
}

/** The queue's move in progress (or the last one, done), if any (spec 8). */
export function queueMove(queue: LocalQueue): MoveProgress | null {
  return moveProgress(queue.replica.state);
}
