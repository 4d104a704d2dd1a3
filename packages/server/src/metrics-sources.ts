/**
 * What /metrics reads of the node's queues and Raft groups, at scrape time (see metrics.ts):
 * plain reads of state the node keeps anyway (the replica's totals, the machine's counts,
 * RaftGroup.status()), nothing kept up to date for metrics on the hot path.
 */
import type { NodeId } from '@quorumq/raft';

import type { LocalQueue } from './local-queue.js';
import { queueCompaction } from './queue-view.js';
import type { GroupObservation, QueueObservation } from './metrics.js';
import type { RaftGroup } from './raft-group.js';

/** The queues of `queues` this node leads, each with its counts and (lazily) its group. */
export function* ledQueueObservations(queues: Iterable<LocalQueue>): Iterable<QueueObservation> {
  for (const local of queues) {
    if (!local.group.isLeader) continue;
    const { totals, consumers, enqueued, gone } = local.replica.state;
    const compaction = queueCompaction(local);
    yield {
      queue: local.definition.name,
      ready: totals.ready.count,
      unacked: totals.delivered.count,
      delayed: totals.delayed.count,
      deadLettering: totals.deadLettering.count,
      readyBytes: totals.ready.bytes,
      consumers: consumers.size,
      enqueued,
      acked: gone.acked,
      deliveries: local.leaderCounts.deliveries,
      deadLettered: local.leaderCounts.deadLettered,
      ...(compaction === null ? {} : { compaction }),
      group: () => groupObservation(local.group),
    };
  }
}

/** A group as this node's replica sees it; the follower lag only on its leader. */
export function groupObservation<R>(group: RaftGroup<R>): GroupObservation {
  const status = group.status();
  const followerLag = new Map<NodeId, number>();
  if (status.role === 'leader') {
    for (const [peer, progress] of status.progress) if (peer !== status.id) followerLag.set(peer, Math.max(0, status.lastIndex - progress.match));
  }
  const { started, leaders } = group.elections;
  return {
    term: status.term,
    commitIndex: status.commitIndex,
    appliedIndex: group.appliedIndex,
    snapshotIndex: group.snapshotIndex ?? 0,
    lastIndex: status.lastIndex,
    leader: status.role === 'leader',
    followerLag,
    electionsStarted: started,
    leaderChanges: leaders,
  };
}

/** How many of the node's groups (the metadata group's and its queues') know no leader now. */
export function leaderlessGroups(meta: Pick<RaftGroup<unknown>, 'leaderId'>, queues: Iterable<LocalQueue>): number {
  let count = meta.leaderId === null ? 1 : 0;
  for (const queue of queues) if (queue.group.leaderId === null) count++;
  return count;
}

/** Replicas repaired after storage damage that have not caught up yet (RaftGroup.recovering). */
export function recoveringGroups(meta: Pick<RaftGroup<unknown>, 'recovering'>, queues: Iterable<LocalQueue>): number {
  let count = meta.recovering ? 1 : 0;
  for (const queue of queues) if (queue.group.recovering) count++;
  return count;
}

/** The bodies `queues`' replicas hold as views of their log entries (ReplicaBodies), summed. */
export function heldBodies(queues: Iterable<LocalQueue>): { messages: number; bytes: number } {
  let messages = 0;
  let bytes = 0;
  for (const queue of queues) {
    messages += queue.replica.bodies.heldMessages;
    bytes += queue.replica.bodies.heldBytes;
  }
  return { messages, bytes };
}
