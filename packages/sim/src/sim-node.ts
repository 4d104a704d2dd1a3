import { RaftNode, createRandom } from '@quorumq/raft';
import type { Message, NodeId, PlantedBug, Ready } from '@quorumq/raft';
import { NodeStorage } from '@quorumq/storage';
import type { KvStore, WalFs } from '@quorumq/storage';
import type { SafetyChecker } from './checker.js';
import { ProposalLog } from './machine.js';

export const GROUP_ID = 'sim';

export interface SimNodeContext {
  readonly checker: SafetyChecker;
  readonly send: (message: Message) => void;
  readonly onApplied: (node: NodeId, proposalId: string) => void;
  readonly onFailure: (error: unknown) => void;
  readonly raftBugs: ReadonlySet<PlantedBug>;
  /** Planted driver bug: send a Ready's messages (acks, votes) before its data is durable. */
  readonly ackBeforeFsync: boolean;
  readonly voters: readonly NodeId[];
  readonly snapshotInterval: number;
  readonly appendEntriesMax: number;
  readonly inflightAppendsMax: number;
  /** Runs the WAL's group-commit flush as a simulator event, after the current one. */
  readonly scheduleFlush: (flush: () => void) => void;
}

/**
 * One simulated node: the real Raft core driven by the same Ready loop as a real node,
 * over the real NodeStorage on a fake disk.
 */
export class SimNode {
  readonly machine = new ProposalLog();
  /** The index the state machine has applied (the core's applied index may run ahead of the driver). */
  machineIndex = 0;
  private stopped = false;
  private readyLoopRunning = false;

  private constructor(
    readonly id: NodeId,
    readonly raft: RaftNode,
    private readonly storage: NodeStorage,
    private readonly context: SimNodeContext,
  ) {}

  static async start(id: NodeId, seed: number, fs: WalFs, kv: KvStore, context: SimNodeContext): Promise<SimNode> {
    const storage = await NodeStorage.open({
      dir: `/${id}`,
      fs,
      kv,
      snapshotInterval: context.snapshotInterval,
      segmentBytesMax: 16 * 1024,
      scheduleFlush: context.scheduleFlush,
      logger: { warn: () => {} },
    });
    const restored = storage.restoreGroup(GROUP_ID);
    const raft = new RaftNode(
      {
        id,
        random: createRandom(seed),
        initialConfig: { voters: [...context.voters], learners: [] },
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
    const node = new SimNode(id, raft, storage, context);
    if (restored.snapshot !== null) {
      node.machine.restore(restored.snapshot.data);
      node.machineIndex = restored.snapshot.meta.index;
    }
    return node;
  }

  get isStopped(): boolean {
    return this.stopped;
  }

  /** Crash: the object is abandoned; pending disk operations never complete for it. */
  stop(): void {
    this.stopped = true;
  }

  tick(): void {
    this.guard(() => this.raft.tick());
  }

  receive(message: Message): void {
    this.guard(() => this.raft.step(message));
  }

  propose(data: Uint8Array): boolean {
    let accepted = false;
    this.guard(() => {
      accepted = this.raft.propose(data).ok;
    });
    return accepted;
  }

  private guard(action: () => void): void {
    if (this.stopped) return;
    try {
      action();
    } catch (error) {
      this.context.onFailure(error);
      return;
    }
    this.kick();
  }

  private kick(): void {
    if (this.readyLoopRunning || this.stopped) return;
    this.readyLoopRunning = true;
    this.readyLoop().then(
      () => {
        this.readyLoopRunning = false;
      },
      (error: unknown) => {
        this.readyLoopRunning = false;
        if (!this.stopped) this.context.onFailure(error);
      },
    );
  }

  private async readyLoop(): Promise<void> {
    while (!this.stopped && this.raft.hasReady()) {
      const ready = this.raft.ready();
      this.context.checker.observeAppended(this.id, ready.entries, (index) => this.raft.termAt(index) ?? ready.snapshot?.meta.term);
      if (this.context.ackBeforeFsync) this.sendAll(ready);
      await this.storage.persist(GROUP_ID, { hardState: ready.hardState, entries: ready.entries, snapshot: ready.snapshot });
      if (this.stopped) return;
      if (!this.context.ackBeforeFsync) this.sendAll(ready);
      this.apply(ready);
      this.raft.advance();
      await this.maybeSnapshot();
    }
  }

  private sendAll(ready: Ready): void {
    for (const message of ready.messages) this.context.send(message);
  }

  private apply(ready: Ready): void {
    if (ready.snapshot !== null) {
      this.machine.restore(ready.snapshot.data);
      this.machineIndex = ready.snapshot.meta.index;
    }
    for (const entry of ready.committedEntries) {
      this.machineIndex = entry.index;
      this.context.checker.observeApplied(this.id, entry);
      const proposalId = this.machine.apply(entry);
      if (proposalId !== null) this.context.onApplied(this.id, proposalId);
    }
  }

  private async maybeSnapshot(): Promise<void> {
    // The snapshot is of the machine, so it is taken at the index the machine has applied;
    // the core's applied index may already be ahead (a leader's snapshot being installed).
    if (!this.storage.shouldSnapshot(GROUP_ID, this.machineIndex)) return;
    const snapshot = this.raft.compact(this.machineIndex, this.machine.snapshot());
    if (snapshot !== null) await this.storage.saveLocalSnapshot(GROUP_ID, snapshot);
  }
}
