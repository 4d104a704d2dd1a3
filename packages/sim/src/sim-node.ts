import { RaftNode, createRandom, sendableBeforePersist } from '@quorumq/raft';
import type { ConfChange, Message, NodeId, PlantedBug, Random, Ready } from '@quorumq/raft';
import { NodeStorage } from '@quorumq/storage';
import type { KvStore, WalFs } from '@quorumq/storage';
import type { SafetyChecker } from './checker.js';
import { ProposalLog } from './machine.js';

/** A Raft message of one group, as it travels between simulated nodes. */
export interface GroupMessage {
  readonly groupId: string;
  readonly message: Message;
}

export interface SimNodeContext {
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
  /** Runs the WAL's group-commit flush as a simulator event, after the current one. */
  readonly scheduleFlush: (flush: () => void) => void;
}

/**
 * One simulated node: several Raft groups sharing the node's real NodeStorage (one WAL, one
 * KV store) on a fake disk, each driven by the same Ready loop a real node runs.
 */
export class SimNode {
  private stopped = false;

  private constructor(
    readonly id: NodeId,
    readonly replicas: ReadonlyMap<string, GroupReplica>,
  ) {}

  static async start(id: NodeId, random: Random, fs: WalFs, kv: KvStore, context: SimNodeContext): Promise<SimNode> {
    const storage = await NodeStorage.open({
      dir: `/${id}`,
      fs,
      kv,
      snapshotInterval: context.snapshotInterval,
      segmentBytesMax: 16 * 1024,
      scheduleFlush: context.scheduleFlush,
      logger: { warn: () => {} },
    });
    const replicas = new Map<string, GroupReplica>();
    const node = new SimNode(id, replicas);
    for (const groupId of context.groupIds) {
      replicas.set(groupId, new GroupReplica(node, groupId, random.nextInt(0x7fffffff), storage, context));
    }
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

  /** Crash: the object is abandoned; pending disk operations never complete for it. */
  stop(): void {
    this.stopped = true;
  }

  tick(): void {
    for (const replica of this.replicas.values()) replica.tick();
  }

  receive(envelope: GroupMessage): void {
    this.replicas.get(envelope.groupId)?.receive(envelope.message);
  }
}

/** One group's replica on one node: the Raft core, its Ready loop and its state machine. */
export class GroupReplica {
  readonly raft: RaftNode;
  readonly machine = new ProposalLog();
  /** The index the state machine has applied (the core's applied index may run ahead of the driver). */
  machineIndex = 0;
  private readyLoopRunning = false;
  /** Reads confirmed by a quorum, waiting for the machine to apply their index. */
  private readsWaiting: Array<{ requestId: string; index: number }> = [];

  constructor(
    private readonly node: SimNode,
    readonly groupId: string,
    seed: number,
    private readonly storage: NodeStorage,
    private readonly context: SimNodeContext,
  ) {
    const restored = storage.restoreGroup(groupId);
    this.raft = new RaftNode(
      {
        id: node.id,
        random: createRandom(seed),
        initialConfig: context.initialVoters.includes(node.id)
          ? { voters: [...context.initialVoters], learners: [] }
          : { voters: [], learners: [] },
        electionTicks: 10,
        heartbeatTicks: 1,
        appendEntriesMax: context.appendEntriesMax,
        inflightAppendsMax: context.inflightAppendsMax,
        snapshotChunkBytes: 1024,
        retainedEntriesAfterSnapshot: 8,
        testOnlyBugs: context.raftBugs,
      },
      restored,
    );
    if (restored.snapshot !== null) {
      this.machine.restore(restored.snapshot.data);
      this.machineIndex = restored.snapshot.meta.index;
    }
  }

  tick(): void {
    this.guard(() => this.raft.tick());
  }

  /** Messages dropped because their sender is no member of the group (as the broker drops them). */
  refusedMessages = 0;

  receive(message: Message): void {
    // As the broker's RaftGroup does: a sender that neither a configuration of the log nor
    // the directory names is not stepped.
    const from = message.from;
    if (from === this.node.id || (!this.raft.acceptsMessageFrom(from) && !this.context.knownMember(this.groupId, from))) {
      this.refusedMessages += 1;
      return;
    }
    this.guard(() => this.raft.step(message));
  }

  /** Starts a linearizable read (ReadIndex); false if this replica is not the leader. */
  read(requestId: string): boolean {
    let accepted = false;
    this.guard(() => {
      accepted = this.raft.readIndex(requestId).ok;
    });
    return accepted;
  }

  /** Proposes a membership change; false if refused (not leader, another change pending...). */
  changeMembership(change: ConfChange): boolean {
    let accepted = false;
    this.guard(() => {
      accepted = this.raft.proposeConfChange(change).ok;
    });
    return accepted;
  }

  propose(data: Uint8Array): boolean {
    let accepted = false;
    this.guard(() => {
      accepted = this.raft.propose(data).ok;
    });
    return accepted;
  }

  private guard(action: () => void): void {
    if (this.node.isStopped) return;
    try {
      action();
    } catch (error) {
      this.context.onFailure(error);
      return;
    }
    this.kick();
  }

  private kick(): void {
    if (this.readyLoopRunning || this.node.isStopped) return;
    this.readyLoopRunning = true;
    this.readyLoop().then(
      () => {
        this.readyLoopRunning = false;
      },
      (error: unknown) => {
        this.readyLoopRunning = false;
        if (!this.node.isStopped) this.context.onFailure(error);
      },
    );
  }

  private async readyLoop(): Promise<void> {
    const checker = this.context.checkerOf(this.groupId);
    while (!this.node.isStopped && this.raft.hasReady()) {
      const ready = this.raft.ready();
      checker.observeAppended(this.node.id, ready.entries, (index) => this.raft.termAt(index) ?? ready.snapshot?.meta.term);
      // A leader's requests go out while it writes; everything else waits for the fdatasync
      // (the planted bug sends acknowledgements early too).
      const early = this.context.ackBeforeFsync ? ready.messages : ready.messages.filter(sendableBeforePersist);
      const late = this.context.ackBeforeFsync ? [] : ready.messages.filter((message) => !sendableBeforePersist(message));
      this.sendAll(early);
      await this.storage.persist(this.groupId, { hardState: ready.hardState, entries: ready.entries, snapshot: ready.snapshot });
      if (this.node.isStopped) return;
      this.sendAll(late);
      this.apply(ready, checker);
      this.serveReads(ready);
      this.raft.advance();
      await this.maybeSnapshot();
    }
  }

  private sendAll(messages: readonly Message[]): void {
    for (const message of messages) this.context.send({ groupId: this.groupId, message });
  }

  private apply(ready: Ready, checker: SafetyChecker): void {
    if (ready.snapshot !== null) {
      this.machine.restore(ready.snapshot.data);
      this.machineIndex = ready.snapshot.meta.index;
    }
    for (const entry of ready.committedEntries) {
      this.machineIndex = entry.index;
      checker.observeApplied(this.node.id, entry);
      const proposalId = this.machine.apply(entry);
      if (proposalId !== null) this.context.onApplied(this.groupId, this.node.id, proposalId);
    }
  }

  private serveReads(ready: Ready): void {
    this.readsWaiting.push(...ready.readStates);
    const servable = this.readsWaiting.filter((read) => read.index <= this.machineIndex);
    if (servable.length === 0) return;
    this.readsWaiting = this.readsWaiting.filter((read) => read.index > this.machineIndex);
    for (const read of servable) this.context.onRead(this.groupId, this.node.id, read.requestId, this.machine.ids());
  }

  private async maybeSnapshot(): Promise<void> {
    // The snapshot is of the machine, so it is taken at the index the machine has applied;
    // the core's applied index may already be ahead (a leader's snapshot being installed).
    if (!this.storage.shouldSnapshot(this.groupId, this.machineIndex)) return;
    const snapshot = this.raft.compact(this.machineIndex, this.machine.snapshot());
    if (snapshot !== null) await this.storage.saveLocalSnapshot(this.groupId, snapshot);
  }
}
