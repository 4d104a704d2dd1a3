/**
 * The queue replicas of this node follow the metadata: each queue whose members name this
 * node gets a replica (its machine, its Raft group, its batcher) when its declare applies,
 * and loses it when the queue is deleted or re-created.
 */
import type { NodeId } from '@quorumq/raft';
import type { MessageStoreApi, NodeStorage } from '@quorumq/storage';
import type { Logger } from 'pino';

import type { AdoptedBodies } from './adopted-bodies.js';
import type { ConsumerRegistry } from './consumers.js';
import type { EffectRunner } from './effect-runner.js';
import { BrokerError, Status, Reason } from './errors.js';
import { invariant } from './invariant.js';
import type { LeaderDuties } from './leader-duties.js';
import { META_GROUP, queueGroupId, type LocalQueue } from './local-queue.js';
import type { MetaMachine, QueueDefinition } from './meta-machine.js';
import type { NodeMetrics } from './metrics.js';
import type { NodeEnv } from './node-env.js';
import type { PeerLink } from './peer-link.js';
import type { ProposalRouter } from './proposal-router.js';
import { initialVoters, replicaNodes } from './queue-membership.js';
import { QueueReplica, type QueueApplyResult, type ReplicaTestOnlyBugs } from './queue-replica.js';
import type { GroupTicker } from './group-ticker.js';
import { recoveryReporter } from './repair-report.js';
import { RaftGroup, type GroupObserver, type GroupTestOnlyBugs, type RaftTuning } from './raft-group.js';

/**
 * How long a follower waits for one batch of a snapshot's message bytes from the member that
 * sent it (see snapshot-bodies.ts): a batch is at most a few megabytes, read from its store.
 * A call that times out fails the preparation, which keeps what it fetched; the snapshot is
 * held (and the group behind) until then, so a sender that went away costs at most this.
 */
const FETCH_TIMEOUT_MS = 5_000;

/** How the node starts a group beyond its config: the simulator's checkers and tuning. */
export interface GroupSetup {
  readonly tuning?: RaftTuning;
  readonly observer?: GroupObserver;
  readonly testOnlyBugs?: GroupTestOnlyBugs;
}

export interface QueueReplicasParts {
  readonly env: NodeEnv;
  readonly nodeId: NodeId;
  readonly storage: NodeStorage;
  readonly messageStore: MessageStoreApi;
  /** Records adopted at the start for the saved snapshots (see AdoptedBodies). */
  readonly adopted: AdoptedBodies;
  readonly snapshotLogBytesMin: number;
  readonly testOnlyBugs?: ReplicaTestOnlyBugs;
  readonly link: Pick<PeerLink, 'send' | 'fetchBodies'>;
  readonly logger: Logger;
  /** The node's metrics (snapshots installed); none in tests that build replicas alone. */
  readonly metrics?: NodeMetrics;
  readonly meta: MetaMachine;
  readonly consumers: ConsumerRegistry;
  readonly electionTicks: number;
  readonly heartbeatTicks: number;
  readonly ticker?: GroupTicker;
  /** See RaftGroupOptions.doubtLeader. */
  readonly doubtLeader?: (leader: NodeId) => void;
  /** See RaftGroupOptions.isPeerSilent. */
  readonly isPeerSilent?: (id: NodeId) => boolean;
  /** A replica's group was just created (the node steps what it held for it: EarlyMessages). */
  readonly onGroupCreated?: (group: RaftGroup<QueueApplyResult>) => void;
  groupSetup(groupId: string): GroupSetup;
  fatal(error: unknown): void;
  isStopping(): boolean;
}

/** The parts created after this one that a replica hands its work to. */
export interface ReplicaWiring {
  readonly router: ProposalRouter;
  readonly effects: EffectRunner;
  readonly duties: LeaderDuties;
}

export class QueueReplicas {
  private readonly queues = new Map<string, LocalQueue>();
  private reconcileScheduled = false;
  /** Queues whose definition changed since the last reconcile (see reconcileSoon). */
  private readonly changed = new Set<string>();
  private reconcileAll = false;
  private wiring: ReplicaWiring | null = null;
  /**
   * Queue groups found in storage at the start that no replica has claimed yet. One whose
   * queue the metadata shows deleted (or re-created, or moved off this node) is removed:
   * its storage, and the message store records adopted for its snapshot.
   */
  private readonly unclaimed: Set<string>;

  constructor(private readonly parts: QueueReplicasParts) {
    this.unclaimed = new Set(parts.storage.groups().filter((groupId) => groupId.startsWith('q/')));
  }

  /** Connects the replicas to the parts that act on their effects (once, at startup). */
  wire(wiring: ReplicaWiring): void {
    this.wiring = wiring;
  }

  get(name: string): LocalQueue | undefined {
    return this.queues.get(name);
  }

  all(): IterableIterator<LocalQueue> {
    return this.queues.values();
  }

  get size(): number {
    return this.queues.size;
  }

  /** The group of a queue replica by its group id (the definition's creation must match). */
  groupById(groupId: string): RaftGroup<QueueApplyResult> | null {
    return this.byGroupId(groupId)?.group ?? null;
  }

  /** The replica of a queue by its group id (the definition's creation must match). */
  byGroupId(groupId: string): LocalQueue | null {
    if (groupId === META_GROUP || !groupId.startsWith('q/')) return null;
    const name = groupId.slice(groupId.indexOf('/', 2) + 1);
    const queue = this.queues.get(name);
    if (queue === undefined || queueGroupId(queue.definition) !== groupId) return null;
    return queue;
  }

  /**
   * The metadata changed `name`'s definition (null: anything, after a snapshot was restored):
   * reconcile at the end of this microtask batch, once for many changes, and only the queues
   * named, so a declare costs the same however many queues exist.
   */
  reconcileSoon(name: string | null = null): void {
    if (name === null) this.reconcileAll = true;
    else this.changed.add(name);
    if (this.reconcileScheduled) return;
    this.reconcileScheduled = true;
    queueMicrotask(() => {
      this.reconcileScheduled = false;
      if (this.reconcileAll) {
        this.reconcileAll = false;
        this.changed.clear();
        this.reconcile();
        return;
      }
      const names = [...this.changed];
      this.changed.clear();
      if (this.parts.isStopping()) return;
      for (const changed of names) this.reconcileQueue(changed);
      if (this.unclaimed.size > 0) this.removeDeadGroups();
    });
  }

  reconcile(): void {
    if (this.parts.isStopping()) return;
    const names = new Set<string>([...this.parts.meta.queues.keys(), ...this.queues.keys()]);
    for (const name of names) this.reconcileQueue(name);
    if (this.unclaimed.size > 0) this.removeDeadGroups();
  }

  /** Makes this node's replica of `name` match the metadata: create, re-create or drop it. */
  private reconcileQueue(name: string): void {
    const { meta, nodeId } = this.parts;
    const definition = meta.queues.get(name);
    const existing = this.queues.get(name);
    const wanted = definition !== undefined && replicaNodes(definition).includes(nodeId) ? definition : undefined;
    if (existing !== undefined && wanted !== undefined && existing.definition.createdIndex === wanted.createdIndex) {
      // Its members changed (grow, shrink, a node's removal, rebalance): the leader acts on it.
      if (existing.definition !== wanted) {
        existing.definition = wanted;
        this.wiring?.duties.membersChanged(existing);
      }
      return;
    }
    if (existing !== undefined) this.drop(existing, wanted === undefined ? (definition === undefined ? 'the queue was deleted' : 'the replica was removed from this node') : 'the queue was re-created');
    if (wanted !== undefined) this.create(wanted);
  }

  /**
   * Removes the unclaimed groups of queues deleted for good: created at or below the index the
   * metadata applied (its group id says where), yet without a replica here. A queue created
   * in an entry not applied yet is left alone: its replica will claim the group.
   */
  private removeDeadGroups(): void {
    const { meta, storage, adopted, logger } = this.parts;
    for (const groupId of this.unclaimed) {
      const createdIndex = Number(groupId.split('/', 2)[1]);
      if (!Number.isSafeInteger(createdIndex) || createdIndex > meta.appliedIndex) continue;
      this.unclaimed.delete(groupId);
      adopted.forget(groupId);
      logger.info({ group: groupId }, 'removing the storage of a queue deleted while this node was away');
      storage.deleteGroup(groupId).catch((error: unknown) => logger.warn({ err: error, group: groupId }, 'deleting a group failed'));
    }
  }

  private create(definition: QueueDefinition): void {
    const wiring = this.wiring;
    if (wiring === null) throw new Error('QueueReplicas.wire must be called before the first reconcile');
    const { parts } = this;
    invariant(!this.queues.has(definition.name), () => `a second replica of queue ${JSON.stringify(definition.name)} on this node`);
    const groupId = queueGroupId(definition);
    this.unclaimed.delete(groupId);
    let local: LocalQueue | null = null;
    const replica = new QueueReplica(
      definition.name,
      groupId,
      definition.args,
      {
        onEffects: (_replica, effects) => {
          if (local !== null && this.queues.get(definition.name) === local) wiring.effects.run(local, effects);
        },
      },
      parts.messageStore,
      {
        createdAt: definition.createdAt ?? 0,
        adopted: parts.adopted,
        snapshotLogBytesMin: parts.snapshotLogBytesMin,
        ...(parts.testOnlyBugs !== undefined ? { testOnlyBugs: parts.testOnlyBugs } : {}),
        onLostBodies: (lost, count) => parts.logger.error({ queue: lost.name, messages: count }, "messages' bytes are missing from the message store"),
        fetchBodies: (peer, group, index, ids) => parts.link.fetchBodies(peer, group, index, ids, FETCH_TIMEOUT_MS),
      },
    );
    const group = new RaftGroup<QueueApplyResult>({
      groupId,
      env: parts.env,
      nodeId: parts.nodeId,
      storage: parts.storage,
      machine: replica,
      initialVoters: [...initialVoters(definition)],
      send: (id, messages) => parts.link.send(id, messages),
      onSoftState: (state) => {
        if (local !== null) wiring.duties.onSoftState(local, state);
      },
      onApplied: () => {
        replica.sweep();
        if (local !== null) wiring.duties.afterApplied(local);
      },
      onFatal: (error) => parts.fatal(error),
      onRecovered: recoveryReporter(parts.metrics, parts.logger),
      onPrepared: (index, ms) => {
        parts.metrics?.snapshotsInstalled.inc();
        parts.metrics?.snapshotBytesFetched.inc(replica.lastPrepared?.fetchedBytes ?? 0);
        parts.logger.info(
          { queue: definition.name, snapshotIndex: index, ms: Math.round(ms), ...replica.lastPrepared },
          'fetched what the snapshot the leader sent lists; installing it',
        );
      },
      onPrepareFailed: (error) =>
        parts.logger.warn({ queue: definition.name, err: error }, 'could not install the snapshot the leader sent (its messages\' bytes were not all fetched); waiting for it again'),
      // The metadata names the queue's members (a later membership change goes through it).
      knownMember: (from) => {
        const current = parts.meta.queues.get(definition.name);
        return current !== undefined && current.createdIndex === definition.createdIndex && replicaNodes(current).includes(from);
      },
      electionTicks: parts.electionTicks,
      heartbeatTicks: parts.heartbeatTicks,
      ...(parts.ticker !== undefined ? { ticker: parts.ticker } : {}),
      ...(parts.doubtLeader !== undefined ? { doubtLeader: parts.doubtLeader } : {}),
      ...(parts.isPeerSilent !== undefined ? { isPeerSilent: parts.isPeerSilent } : {}),
      ...parts.groupSetup(groupId),
    });
    local = { definition, replica, group, batcher: wiring.router.batcherFor(definition, group), leaderCounts: { deliveries: 0, deadLettered: new Map() } };
    this.queues.set(definition.name, local);
    // A new queue's preferred leader (its first member: placement spreads them) elects itself
    // at once: every replica was just created, none waits for a leader it had.
    // A replica added later (grow, a replacement) waits for the leader instead.
    if (group.isBrandNew && definition.initialMembers === undefined && definition.members[0] === parts.nodeId) group.campaign();
    parts.onGroupCreated?.(group);
    parts.logger.info({ queue: definition.name, members: definition.members }, 'queue replica started');
  }

  private drop(queue: LocalQueue, why: string): void {
    const { parts } = this;
    this.queues.delete(queue.definition.name);
    queue.group.stop(why);
    this.wiring?.duties.stop(queue);
    parts.consumers.endAll(queue.definition.name, new BrokerError(Status.NOT_FOUND, Reason.QUEUE_DELETED, `queue ${JSON.stringify(queue.definition.name)}: ${why}`));
    const dropped = queue.replica.state.messages.size;
    parts.logger.info({ queue: queue.definition.name, messagesDropped: dropped, why }, 'queue replica removed');
    queue.replica.close();
    parts.storage.deleteGroup(queueGroupId(queue.definition)).catch((error: unknown) => parts.logger.warn({ err: error }, 'deleting a group failed'));
  }

  /** Stops every replica's group (shutdown). */
  stopAll(reason: string): void {
    for (const queue of this.queues.values()) {
      this.wiring?.duties.stop(queue);
      queue.group.stop(reason);
    }
  }
}
