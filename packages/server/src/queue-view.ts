/**
 * What the API layer reads of a queue replica, without reaching into the machine's state:
 * its message counts and its running move.
 */
import { moveProgress, type MoveProgress } from '@quorumq/queue';

import type { LocalQueue } from './local-queue.js';

export interface QueueCounts {
  readonly ready: number;
  readonly unacked: number;
  readonly delayed: number;
  readonly deadLettering: number;
  /** Body bytes of every message the queue holds. */
  readonly bytes: number;
  readonly consumers: number;
}

export function queueCounts(queue: LocalQueue): QueueCounts {
  const { totals, consumers } = queue.replica.state;
  return {
    ready: totals.ready.count,
    unacked: totals.delivered.count,
    delayed: totals.delayed.count,
    deadLettering: totals.deadLettering.count,
    bytes: totals.ready.bytes + totals.delivered.bytes + totals.delayed.bytes + totals.deadLettering.bytes,
    consumers: consumers.size,
  };
}

/** The queue's move in progress (or the last one, done), if any (spec 8). */
export function queueMove(queue: LocalQueue): MoveProgress | null {
  return moveProgress(queue.replica.state);
}
