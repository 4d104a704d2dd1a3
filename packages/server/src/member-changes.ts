/**
 * A group's leader makes its Raft configuration follow the metadata (docs/operations.md,
 * "Membership"), one single-server change at a time, each only once the one before is
 * committed:
 *
 * 1. a wanted node missing from the configuration joins as a learner (it receives the log
 *    or a snapshot but does not vote; the core promotes it once it caught up);
 * 2. a learner no longer wanted is removed;
 * 3. once no wanted learner is left, a voter no longer wanted is removed (the leader hands
 *    leadership to a wanted voter first when it is the one leaving);
 * 4. a queue's replica that left the configuration is retired in the metadata
 *    (`retireReplica`): only then does its node drop it.
 *
 * Adding before removing keeps the group's fault tolerance through a replacement. The
 * metadata is the intent; every step is idempotent and re-derived from the current state, so
 * a leader change or a crash in the middle resumes where it stopped.
 */
import type { NodeId, RaftStatus } from '@quorumq/raft';
import type { Logger } from 'pino';

import type { ClusterNodes } from './cluster-nodes.js';
import type { LocalQueue } from './local-queue.js';
import type { MetaCommand, MetaReply } from './meta-machine.js';
import type { NodeEnv, Timer } from './node-env.js';
import type { PeerLink } from './peer-link.js';
import type { RaftGroup } from './raft-group.js';

/** How often a leader looks again while a change is under way (a learner catching up, a commit). */
const RETRY_MS = 200;

export type ConfigStep =
  | { readonly kind: 'none' }
  /** Under way: look again later. */
  | { readonly kind: 'wait' }
  | { readonly kind: 'addLearner'; readonly node: NodeId }
  | { readonly kind: 'remove'; readonly node: NodeId }
  | { readonly kind: 'handOff'; readonly to: NodeId | null };

/**
 * The next change that brings a group's configuration to `wanted` (pure: see the file
 * comment). `removable(id)`: whether a voter no longer wanted may go now.
 */
export function nextConfigStep(status: RaftStatus, configCommitted: boolean, wanted: readonly NodeId[], removable: (id: NodeId) => boolean = () => true): ConfigStep {
  const { voters, learners } = status.config;
  const inConfig = (id: NodeId): boolean => voters.includes(id) || learners.includes(id);
  const missing = wanted.find((id) => !inConfig(id));
  const strayLearner = learners.find((id) => !wanted.includes(id));
  const strayVoter = voters.find((id) => !wanted.includes(id) && removable(id));
  if (missing === undefined && strayLearner === undefined && strayVoter === undefined) {
    return learners.length > 0 || !configCommitted ? { kind: 'wait' } : { kind: 'none' };
  }
  if (!configCommitted) return { kind: 'wait' };
  if (missing !== undefined) return { kind: 'addLearner', node: missing };
  if (strayLearner !== undefined) return { kind: 'remove', node: strayLearner };
  // Wanted learners are still catching up: removing a voter now would lower the fault tolerance.
  if (learners.some((id) => wanted.includes(id))) return { kind: 'wait' };
  if (strayVoter === status.id) {
    const to = voters.find((id) => id !== status.id && wanted.includes(id) && (status.progress.get(id)?.match ?? 0) >= status.commitIndex) ?? null;
    return { kind: 'handOff', to };
  }
  return { kind: 'remove', node: strayVoter! };
}

/**
 * A quiet leader sends nothing, and a learner it could not reach when it was added (its node
 * not up yet, its replica not created yet) would wait for the next write: while learners catch
 * up, their leader is woken on each check (RaftNode.memberBack: only while one is behind).
 */
function wakeForLearners(group: Pick<RaftGroup<unknown>, 'status' | 'peerBack'>): void {
  for (const learner of group.status().config.learners) group.peerBack(learner);
}

export interface MemberChangesParts {
  readonly env: NodeEnv;
  readonly logger: Logger;
  readonly nodeId: NodeId;
  readonly link: Pick<PeerLink, 'isConnected'>;
  readonly nodes: ClusterNodes;
  /** The queues of the metadata (for a node being removed: whether any still lists it). */
  queueDefinitions(): Iterable<{ readonly members: readonly NodeId[]; readonly retiring?: readonly NodeId[] }>;
  proposeMeta(command: MetaCommand): Promise<MetaReply>;
  isStopping(): boolean;
}

export class MemberChanges {
  /** Queues with a check scheduled. */
  private readonly scheduled = new WeakMap<LocalQueue, Timer>();
  /** Metadata proposals in flight (one per key). */
  private readonly proposing = new Set<string>();

  constructor(private readonly parts: MemberChangesParts) {}

  /** The queue's members may differ from its group's configuration: its leader acts (see the file comment). */
  check(queue: LocalQueue): void {
    if (this.scheduled.has(queue) || this.parts.isStopping()) return;
    const group = queue.group;
    if (!group.isLeader) return;
    const definition = queue.definition;
    const step = nextConfigStep(group.status(), group.raft.configCommitted, definition.members);
    const name = definition.name;
    switch (step.kind) {
      case 'none':
        this.retire(queue, group.status().config);
        // Until the metadata shows them retired (a proposal may fail: the metadata leader moving).
        if ((definition.retiring ?? []).length > 0) this.later(queue);
        return;
      case 'wait':
        wakeForLearners(group);
        break;
      case 'addLearner':
      case 'remove':
        if (group.proposeConfChange(step.kind === 'addLearner' ? { type: 'addLearner', nodeId: step.node } : { type: 'remove', nodeId: step.node })) {
          this.parts.logger.info({ queue: name, change: step.kind, node: step.node }, 'queue membership change proposed');
        }
        break;
      case 'handOff':
        if (step.to !== null && this.parts.link.isConnected(step.to)) {
          this.parts.logger.info({ queue: name, to: step.to }, 'leaving the queue\'s replicas: handing leadership over first');
          group.transferLeadership(step.to);
        }
        break;
    }
    this.retire(queue, group.status().config);
    this.later(queue);
  }

  /** Stops looking at the queue (its replica went, or this node stopped leading it). */
  forget(queue: LocalQueue): void {
    this.scheduled.get(queue)?.cancel();
    this.scheduled.delete(queue);
  }

  private later(queue: LocalQueue): void {
    this.scheduled.set(
      queue,
      this.parts.env.after(RETRY_MS, () => {
        this.scheduled.delete(queue);
        this.check(queue);
      }),
    );
  }

  /** A retiring replica that left the committed configuration: its node may drop it now. */
  private retire(queue: LocalQueue, config: RaftStatus['config']): void {
    const definition = queue.definition;
    if (!queue.group.raft.configCommitted) return;
    for (const node of definition.retiring ?? []) {
      if (config.voters.includes(node) || config.learners.includes(node)) continue;
      this.propose(`retire/${definition.name}/${node}`, { type: 'retireReplica', name: definition.name, createdIndex: definition.createdIndex, node });
    }
  }

  /**
   * On the metadata group's leader, every tick or so: its voters follow the node registry
   * (active nodes are wanted; a node being removed leaves once no queue lists it, and is
   * marked removed once out of the configuration).
   */
  checkMeta(group: RaftGroup<unknown>): void {
    const { nodes } = this.parts;
    if (!group.isLeader || !nodes.managed || this.parts.isStopping()) return;
    const wanted = [...nodes.all()].filter((node) => node.state === 'active').map((node) => node.id);
    const holding = new Set<NodeId>();
    const removing = [...nodes.all()].filter((node) => node.state === 'removing').map((node) => node.id);
    if (removing.length > 0) {
      for (const definition of this.parts.queueDefinitions()) for (const id of [...definition.members, ...(definition.retiring ?? [])]) if (removing.includes(id)) holding.add(id);
    }
    const status = group.status();
    const step = nextConfigStep(status, group.raft.configCommitted, wanted, (id) => !holding.has(id));
    switch (step.kind) {
      case 'addLearner':
      case 'remove':
        if (group.proposeConfChange(step.kind === 'addLearner' ? { type: 'addLearner', nodeId: step.node } : { type: 'remove', nodeId: step.node })) {
          this.parts.logger.info({ change: step.kind, node: step.node }, 'metadata group membership change proposed');
        }
        return;
      case 'handOff':
        if (step.to !== null && this.parts.link.isConnected(step.to)) group.transferLeadership(step.to);
        return;
      case 'wait':
        wakeForLearners(group);
        return;
      default:
        break;
    }
    if (!group.raft.configCommitted) return;
    for (const id of removing) {
      if (holding.has(id) || status.config.voters.includes(id) || status.config.learners.includes(id)) continue;
      this.propose(`removed/${id}`, { type: 'nodeRemoved', id });
    }
  }

  private propose(key: string, command: MetaCommand): void {
    if (this.proposing.has(key)) return;
    this.proposing.add(key);
    this.parts
      .proposeMeta(command)
      .catch((error: unknown) => this.parts.logger.warn({ err: error, command: command.type }, 'a membership step failed; it is tried again'))
      .finally(() => this.proposing.delete(key));
  }
}
