import { GroupTicker, NODE_BEAT_GROUP, PeerLiveness, RaftGroup, beatMessage, type NodeEnv } from '@quorumq/server/core';
import type { ConfChange, Message, NodeId, PlantedBug, Random } from '@quorumq/raft';
import { NodeStorage } from '@quorumq/storage';
import type { KvStore, WalFs } from '@quorumq/storage';
import type { SafetyChecker } from './checker.js';
import { ProposalLog } from './machine.js';
import type { Scheduler } from './scheduler.js';
import { simEnv } from './sim-env.js';

const ELECTION_TICKS = 10;

/** Driver bugs the simulator plants besides the core's (see SimBug). */
export type PlantedDriverBug = 'ignorePeerSilence';

/** A Raft message of one group, as it travels between simulated nodes. */
export interface GroupMessage {
  readonly groupId: string;
  readonly message: Message;
}

export interface SimNodeContext {
  readonly scheduler: Scheduler;
  /** Every node of the cluster (this one's peers, which it watches: see PeerLiveness). */
  readonly nodeIds: readonly NodeId[];
  /** This node's tick interval: an election timeout of silence makes a peer silent. */
  readonly tickMs: number;
  readonly groupIds: readonly string[];
  readonly checkerOf: (groupId: string) => SafetyChecker;
  readonly send: (envelope: GroupMessage) => void;
  readonly onApplied: (groupId: string, node: NodeId, proposalId: string) => void;
  /** A linearizable read was served: `applied` is the state machine it saw. */
  readonly onRead: (groupId: string, node: NodeId, requestId: string, applied: readonly string[]) => void;
  readonly onFailure: (error: unknown) => void;
  readonly raftBugs: ReadonlySet<PlantedBug>;
  /** Planted driver bug: send a Ready's messages (acks, votes) before its data is durable. */
  readonly ackBeforeFsync: boolean;
  /** Planted: a node that never wakes its quiet groups for a silent peer (their followers never notice a dead leader). */
  readonly planted: ReadonlySet<PlantedDriverBug>;
  /** The voters a group starts with; other nodes host an empty replica until they are added. */
  readonly initialVoters: readonly NodeId[];
  /**
   * The directory of a group's members kept outside its log (the broker's metadata group):
   * a replica that lags behind a membership change still accepts a member it names.
   */
  readonly knownMember: (groupId: string, nodeId: NodeId) => boolean;
  readonly snapshotInterval: number;
  readonly appendEntriesMax: number;
  readonly inflightAppendsMax: number;
  /** GroupTicker's campaigns at once per node (undefined: the broker's default). */
  readonly campaignsMax: number | undefined;
  /** Runs the WAL's group-commit flush as a simulator event, after the current one. */
  readonly scheduleFlush: (flush: () => void) => void;
}

/**
 * One simulated node: several Raft groups sharing the node's real NodeStorage (one WAL, one
 * KV store) on a fake disk, each driven by the broker's own driver (RaftGroup: its Ready
 * loop, proposal tracking, snapshot policy and ReadIndex reads) on simulated time.
 */
export class SimNode {
  private stopped = false;
  /** As a broker node: only groups with work are ticked, and silent peers wake quiet groups. */
  readonly groupTicks: GroupTicker;
  private readonly liveness: PeerLiveness;

  private constructor(
    readonly id: NodeId,
    readonly replicas: ReadonlyMap<string, GroupReplica>,
    private readonly context: SimNodeContext,
  ) {
    this.groupTicks = new GroupTicker(context.campaignsMax === undefined ? {} : { campaignsMax: context.campaignsMax });
    this.liveness = new PeerLiveness(
      context.nodeIds.filter((peer) => peer !== id),
      ELECTION_TICKS * context.tickMs,
      context.scheduler.now,
    );
  }

  static async start(id: NodeId, random: Random, fs: WalFs, kv: KvStore, context: SimNodeContext): Promise<SimNode> {
    const storage = await NodeStorage.open({
      dir: `/${id}`,
      fs,
      kv,
      snapshotInterval: context.snapshotInterval,
      segmentBytesMax: 16 * 1024,
      scheduleFlush: context.scheduleFlush,
      now: () => context.scheduler.now,
      logger: { warn: () => {} },
    });
    const replicas = new Map<string, GroupReplica>();
    const node = new SimNode(id, replicas, context);
    const env = simEnv(context.scheduler, id, random, () => !node.stopped);
    const doubtLeader = (peer: NodeId): void => {
      if (node.liveness.confirmSilent(peer, context.scheduler.now)) node.onPeerSilent(peer);
    };
    const isPeerSilent = (peer: NodeId): boolean => node.liveness.isSilent(peer);
    for (const groupId of context.groupIds) replicas.set(groupId, new GroupReplica(id, groupId, env, storage, context, node.groupTicks, doubtLeader, isPeerSilent));
    return node;
  }

  replica(groupId: string): GroupReplica {
    const replica = this.replicas.get(groupId);
    if (replica === undefined) throw new Error(`${this.id} has no replica of group ${groupId}`);
    return replica;
  }

  get isStopped(): boolean {
    return this.stopped;
  }

  /** Crash: the groups stop where they are; pending disk operations never complete for them. */
  stop(): void {
    this.stopped = true;
    for (const replica of this.replicas.values()) replica.group.stop('crashed');
  }

  /** As BrokerNode.tick: a beat to every peer, silent peers wake quiet groups, active groups tick. */
  tick(): void {
    const now = this.context.scheduler.now;
    for (const peer of this.context.nodeIds) {
      if (peer !== this.id) this.context.send({ groupId: NODE_BEAT_GROUP, message: beatMessage(this.id, peer) });
    }
    for (const peer of this.liveness.check(now)) this.onPeerSilent(peer);
    this.groupTicks.tick(now);
  }

  private onPeerSilent(peer: NodeId): void {
    if (this.context.planted.has('ignorePeerSilence')) return;
    for (const replica of this.replicas.values()) replica.group.peerSilent(peer, (id) => this.liveness.isSilent(id));
  }

  receive(envelope: GroupMessage): void {
    // As the node does (BrokerNode.heardFrom): a peer back after a gap wakes a quiet leader that left it behind.
    if (this.liveness.heard(envelope.message.from, this.context.scheduler.now)) {
      for (const replica of this.replicas.values()) replica.group.peerBack(envelope.message.from);
    }
    if (envelope.groupId === NODE_BEAT_GROUP) return;
    this.replicas.get(envelope.groupId)?.group.receive(envelope.message);
  }
}

/** One group's replica on one node: the broker's RaftGroup over the simulation's machine. */
export class GroupReplica {
  readonly machine = new ProposalLog();
  readonly group: RaftGroup<string | null>;

  constructor(
    private readonly nodeId: NodeId,
    readonly groupId: string,
    env: NodeEnv,
    storage: NodeStorage,
    private readonly context: SimNodeContext,
    ticker: GroupTicker,
    doubtLeader: (leader: NodeId) => void,
    isPeerSilent: (id: NodeId) => boolean,
  ) {
    const checker = context.checkerOf(groupId);
    const machine = this.machine;
    this.group = new RaftGroup<string | null>({
      groupId,
      env,
      nodeId,
      storage,
      machine: {
        apply: (entry) => {
          const proposalId = machine.apply(entry);
          if (proposalId !== null) context.onApplied(groupId, nodeId, proposalId);
          return proposalId;
        },
        snapshot: () => machine.snapshot(),
        snapshotSteps: () => machine.snapshotSteps(),
        restore: (data) => machine.restore(data),
      },
      initialVoters: context.initialVoters.includes(nodeId) ? context.initialVoters : [],
      send: (id, messages) => {
        for (const message of messages) context.send({ groupId: id, message });
      },
      knownMember: (from) => context.knownMember(groupId, from),
      onFatal: (error) => context.onFailure(error),
      electionTicks: ELECTION_TICKS,
      heartbeatTicks: 1,
      ticker,
      doubtLeader,
      isPeerSilent,
      tuning: {
        appendEntriesMax: context.appendEntriesMax,
        inflightAppendsMax: context.inflightAppendsMax,
        snapshotChunkBytes: 1024,
        retainedEntriesAfterSnapshot: 8,
      },
      observer: {
        appending: (entries, termBefore) => checker.observeAppended(nodeId, entries, termBefore),
        applying: (entry) => checker.observeApplied(nodeId, entry),
      },
      testOnlyBugs: { raft: context.raftBugs, ackBeforeFsync: context.ackBeforeFsync },
    });
  }

  get raft(): RaftGroup<string | null>['raft'] {
    return this.group.raft;
  }

  /** The index the state machine has applied (the core's applied index may run ahead of the driver). */
  get machineIndex(): number {
    return this.group.appliedIndex;
  }

  /** Starts a linearizable read (ReadIndex); false if this replica cannot serve it (not the leader). */
  read(requestId: string): boolean {
    if (this.group.raft.currentRole !== 'leader') return false;
    this.group.readIndex().then(
      () => this.context.onRead(this.groupId, this.nodeId, requestId, this.machine.ids()),
      () => {},
    );
    return true;
  }

  /** Proposes a membership change; false if refused (not leader, another change pending...). */
  changeMembership(change: ConfChange): boolean {
    return this.group.proposeConfChange(change);
  }

  /** Proposes; false if nothing was proposed (not the leader). */
  propose(data: Uint8Array): boolean {
    const proposed = this.group.tryPropose(data);
    if (proposed instanceof Error) return false;
    proposed.catch(() => {}); // acknowledgement is by apply (onApplied), on any replica
    return true;
  }
}
