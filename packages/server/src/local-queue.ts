/** A queue this node replicates: its definition, its replica (machine + stored bodies), its Raft group. */
import type { QueueApplyResult, QueueReplica } from './queue-replica.js';
import type { QueueDefinition } from './meta-machine.js';
import type { RaftGroup } from './raft-group.js';
import type { EntryBatcher } from './entry-batcher.js';

export interface LocalQueue {
  /** The newest definition (its members change with grow, shrink, node removal and rebalance). */
  definition: QueueDefinition;
  readonly replica: QueueReplica;
  readonly group: RaftGroup<QueueApplyResult>;
  /** Batches what this node proposes to the queue while it leads it. */
  readonly batcher: EntryBatcher;
  /** What this node did as the queue's leader, for /metrics (kept while the replica lives here). */
  readonly leaderCounts: LeaderCounts;
}

/** Counted on the leader as it acts on the machine's effects: one increment each, nothing more. */
export interface LeaderCounts {
  /** Deliveries pushed to consumers attached here. */
  deliveries: number;
  /** Messages dead-lettered, by reason (`rejected`, `expired`, `maxlen`, `delivery_limit`). */
  readonly deadLettered: Map<string, number>;
}

export const META_GROUP = 'meta';

/** A queue's Raft group: its name and the metadata index that created it (a re-created queue is a new group). */
export function queueGroupId(definition: Pick<QueueDefinition, 'createdIndex' | 'name'>): string {
  return `q/${definition.createdIndex}/${definition.name}`;
}
