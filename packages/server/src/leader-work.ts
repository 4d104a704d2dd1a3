/** What the leader-side workers (dead-letters, moves) need from the node: a narrow view. */
import { quorumq } from '@quorumq/proto';
import type { Command, Reply, Topology } from '@quorumq/queue';
import type { Logger } from 'pino';

import type { LocalQueue } from './local-queue.js';
import type { NodeMetrics } from './metrics.js';
import type { NodeEnv } from './node-env.js';
import type { QueueApplyResult } from './queue-replica.js';

import pb = quorumq.v1;

export interface LeaderWorkContext {
  readonly env: NodeEnv;
  readonly logger: Logger;
  readonly metrics: NodeMetrics;
  /** This node's copy of the topology (it may lag the metadata leader: see metaBarrier). */
  topology(): Topology;
  /** Catches up with the metadata committed before now. */
  metaBarrier(): Promise<void>;
  /** Proposes to a queue wherever its leader is; resolves once committed there. */
  proposeQueue(name: string, command: Command, message: pb.Message.$Properties | Uint8Array | null): Promise<Reply>;
  /** Proposes to a queue this node leads (no retry elsewhere). */
  proposeLocal(queue: LocalQueue, command: Command): Promise<QueueApplyResult>;
  /** Whether this node still leads `queue` (the same replica). */
  stillLeads(queue: LocalQueue): boolean;
}
