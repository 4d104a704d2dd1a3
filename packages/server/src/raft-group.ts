/**
 * The driver of one Raft group on this node: it feeds the pure core with ticks and peer
 * messages, runs its Ready loop (send appends, persist to the node's shared WAL, send the
 * rest, apply, advance), snapshots when the machine says so, resolves local proposals once
 * their entry is applied, and serves linearizable reads (ReadIndex).
 *
 * It is the one Ready loop of the project: the broker's node and the simulator
 * (packages/sim) both drive their groups with it, on the clock and timers of a NodeEnv.
 */
import { RaftNode, createRandom, sendableBeforePersist } from '@quorumq/raft';
import type { ConfChange, Entry, Message, NodeId, PlantedBug, RaftOptions, RaftStatus, Ready, Snapshot, SoftState } from '@quorumq/raft';
import { StaleSnapshotError, type NodeStorage } from '@quorumq/storage';

import type { GroupTicker } from './group-ticker.js';
import { invariant } from './invariant.js';
import { BrokerError, Status, Reason } from './errors.js';
import type { NodeEnv } from './node-env.js';
import type { SnapshotSource } from './snapshot-bodies.js';

/** The replicated state machine a group drives. */
export interface GroupMachine<R> {
  /** Applies one committed entry. `leader` is true when this replica leads the group now. */
  apply(entry: Entry, leader: boolean): R;
  snapshot(): Uint8Array;
  /**
   * A machine whose snapshot takes long (a queue's: in proportion to its messages) takes it a
   * step at a time instead: the snapshot is of the state now, the steps run between other
   * work while the machine goes on applying entries.
   */
  snapshotSteps?(): SnapshotBuild;
  restore(data: Uint8Array): void;
  /**
   * Whether a snapshot is due, given `snapshotInterval` (default: once that many entries
   * were applied since the last one). A queue's snapshot holds its live messages, so it
   * decides by its own measure (see QueueReplica.snapshotDue).
   */
  snapshotDue?(snapshotInterval: number): boolean;
  /**
   * A machine whose snapshots reference bytes kept elsewhere on their node (a queue's message
   * store) prepares a snapshot received from the leader before it is installed: resolves with
   * the data to install (the same state, referencing what is now on this node), or rejects
   * (the snapshot is dropped and the leader sends one again). Meanwhile the Raft core holds
   * it (RaftOptions.holdReceivedSnapshots). What a snapshot references stays readable on its
   * node while it is the group's newest snapshot there.
   */
  prepareSnapshot?(data: Uint8Array, source: SnapshotSource): Promise<Uint8Array>;
  /**
   * Resolves with true once everything the snapshot just taken references is durable, or
   * with false when it cannot be made durable now (a full disk): that snapshot is then not
   * saved (the saved one and the WAL behind it stay). Rejects only when the node must stop.
   */
  snapshotDurable?(): Promise<boolean>;
  /** The snapshot last taken was saved. */
  snapshotSaved?(): void;
}

/** A snapshot built a step at a time (see GroupMachine.snapshotSteps). */
export interface SnapshotBuild {
  /** Does about `budget` units of work; returns the data once it is complete. */
  step(budget: number): Uint8Array | null;
}

/** Messages per step of a snapshot taken a step at a time (see GroupMachine.snapshotSteps): a few milliseconds. */
export const SNAPSHOT_STEP_BUDGET = 16_384;

/** Core settings a group may override (the simulator uses small ones to reach edge cases). */
export type RaftTuning = Pick<
  RaftOptions,
  'appendEntriesMax' | 'appendBytesMax' | 'inflightAppendsMax' | 'snapshotChunkBytes' | 'retainedEntriesAfterSnapshot'
>;

const TUNING: Required<RaftTuning> = {
  appendEntriesMax: 4096,
  appendBytesMax: 4 * 1024 * 1024,
  inflightAppendsMax: 64,
  snapshotChunkBytes: 1024 * 1024,
  retainedEntriesAfterSnapshot: 256,
};

/** What a checker (the simulator's) sees of a group's log; a real node has none. */
export interface GroupObserver {
  /** Entries about to be persisted; `termBefore` gives the term of the entry before them. */
  appending(entries: readonly Entry[], termBefore: (index: number) => number | undefined): void;
  /** A committed entry, as the machine is about to apply it. */
  applying(entry: Entry): void;
}

/** Bugs the simulator plants to prove its checkers catch them. Never set in a real node. */
export interface GroupTestOnlyBugs {
  readonly raft?: ReadonlySet<PlantedBug>;
  /** Send a Ready's acknowledgements and votes before its data is durable. */
  readonly ackBeforeFsync?: boolean;
}

export interface RaftGroupOptions<R> {
  readonly groupId: string;
  readonly env: NodeEnv;
  readonly nodeId: NodeId;
  readonly storage: NodeStorage;
  readonly machine: GroupMachine<R>;
  /** The voters the group starts with when it has no state yet. */
  readonly initialVoters: readonly NodeId[];
  readonly send: (groupId: string, messages: readonly Message[]) => void;
  readonly onSoftState?: (state: SoftState) => void;
  /**
   * Whether the node's directory outside this group's log (the metadata) names `from` as a
   * member: a replica that lags behind a membership change must still hear the members it
   * does not know of yet (a new leader among them).
   */
  readonly knownMember?: (from: NodeId) => boolean;
  /** Called after each batch of committed entries was applied. */
  readonly onApplied?: () => void;
  /** The Ready loop failed (storage error, invariant): the node must stop. */
  readonly onFatal: (error: unknown) => void;
  /** The machine could not prepare a snapshot received from the leader (see GroupMachine.prepareSnapshot); it is sent again. */
  readonly onPrepareFailed?: (error: unknown) => void;
  /** A snapshot received from the leader was prepared in `ms` and handed to the core to install. */
  readonly onPrepared?: (index: number, ms: number) => void;
  readonly electionTicks: number;
  readonly heartbeatTicks: number;
  /**
   * The node's ticker, for a group that may go quiet (RaftNode.isQuiet): it is ticked only
   * while it has work, and its node watches the peers (PeerLiveness) and calls `peerSilent`.
   * Without one the group never goes quiet and its owner ticks it.
   */
  readonly ticker?: GroupTicker;
  /**
   * With a ticker: another member asks this quiet follower for its vote against `leader`.
   * A quiet follower counts no ticks, so its lease on its leader is the node's hearing of
   * the leader's node: the node confirms the leader silent if it heard nothing from it for
   * an election timeout (PeerLiveness.confirmSilent) and then calls `peerSilent` on every
   * group, this one included (which then grants its vote).
   */
  readonly doubtLeader?: (leader: NodeId) => void;
  /**
   * With a ticker: which peers the node finds silent now (PeerLiveness). A replica restored
   * from storage (the node restarted) with many groups needing a leader campaigns first only
   * in the groups whose `firstCandidate` it is among the live voters (RaftNode.startupElection).
   */
  readonly isPeerSilent?: (id: NodeId) => boolean;
  /**
   * With a ticker: false for a group whose elections the ticker must never hold back (the
   * metadata group, which every node needs before it serves). Default true.
   */
  readonly rationedElections?: boolean;
  /** See RaftOptions.announceCommit (the metadata group). */
  readonly announceCommit?: boolean;
  readonly tuning?: RaftTuning;
  /** A replica restored recovering from damaged storage caught up (see RecoveryMark): what it got from whom. */
  readonly onRecovered?: (report: RecoveryReport) => void;
  readonly observer?: GroupObserver;
  readonly testOnlyBugs?: GroupTestOnlyBugs;
}

/**
 * The options with every field present, in one order. The metadata group's and a queue's
 * options name different optional fields (and spreads add them in different orders), so
 * they had different hidden classes: the Ready loop, optimised while one group was busy,
 * was deoptimised on every node the first time the other group wrote (a declare after a run).
 */
function withEveryOption<R>(o: RaftGroupOptions<R>): RaftGroupOptions<R> {
  return {
    groupId: o.groupId,
    env: o.env,
    nodeId: o.nodeId,
    storage: o.storage,
    machine: o.machine,
    initialVoters: o.initialVoters,
    send: o.send,
    onSoftState: o.onSoftState,
    knownMember: o.knownMember,
    onApplied: o.onApplied,
    onFatal: o.onFatal,
    onPrepareFailed: o.onPrepareFailed,
    onPrepared: o.onPrepared,
    electionTicks: o.electionTicks,
    heartbeatTicks: o.heartbeatTicks,
    ticker: o.ticker,
    doubtLeader: o.doubtLeader,
    isPeerSilent: o.isPeerSilent,
    rationedElections: o.rationedElections,
    announceCommit: o.announceCommit,
    tuning: o.tuning,
    onRecovered: o.onRecovered,
    observer: o.observer,
    testOnlyBugs: o.testOnlyBugs,
  };
}

/**
 * Entry bytes up to which a leader writes its own entries on its event loop (after its
 * appends left) rather than on a pool thread: about one small operation. Larger writes
 * (a busy leader's batches) stay on the pool, so the loop goes on with its followers' answers.
 */
export const LEADER_INLINE_BYTES_MAX = 4 * 1024;

function isSmallLeaderWrite(entries: readonly Entry[], snapshot: Snapshot | null): boolean {
  if (snapshot !== null) return false;
  let bytes = 0;
  for (let i = 0; i < entries.length; i++) bytes += entries[i]!.data.byteLength;
  return bytes <= LEADER_INLINE_BYTES_MAX;
}

/** What a replica repaired after damage received from its leader until it was intact again. */
export interface RecoveryReport {
  readonly groupId: string;
  /** The leader whose entries (or snapshot) ended the recovery. */
  readonly leaderId: NodeId | null;
  readonly term: number;
  readonly entries: number;
  /** Bytes of entries and snapshot data persisted while recovering. */
  readonly bytes: number;
  readonly snapshots: number;
  readonly ms: number;
}

interface Pending<R> {
  readonly term: number;
  /** The time (env.now()) after which the proposer stops waiting (the outcome is then unknown). */
  readonly deadline: number;
  readonly what: string;
  readonly resolve: (reply: R) => void;
  readonly reject: (error: Error) => void;
}

export class RaftGroup<R> {
  readonly raft: RaftNode;
  private readonly pending = new Map<number, Pending<R>>();
  /** Proposals made while this leader hands leadership over (see unpark). */
  private parked: Array<{ readonly data: Uint8Array; readonly deadline: number; readonly what: string; resolve: (reply: R) => void; reject: (error: Error) => void }> = [];
  private loopRunning = false;
  /** A send of the messages that may leave before the loop's wait ends is queued (see kick). */
  private earlySendQueued = false;
  private stopped = false;
  private softState: SoftState = { leaderId: null, role: 'follower' };
  /** Elections this replica started since it was created (pre-votes included; see onSoftState). For /metrics. */
  private campaigns = 0;
  /** Leaders this replica learnt of, one per term (the same node re-elected counts again). For /metrics. */
  private leaders = 0;
  /** The term of the last leader counted in `leaders`. */
  private leaderTerm = -1;
  /** See whenLeaderOtherThan: each returns true (and is removed) once it fired. */
  private readonly leaderWatchers = new Set<() => boolean>();
  /** The index the machine has applied. */
  private machineIndex = 0;
  /** Callers of nextApplied. */
  private appliedWaiters: Array<() => void> = [];
  /** Reads confirmed by a quorum, waiting for the machine to apply their index. */
  private readsWaiting: Array<{ readonly index: number; readonly resolve: () => void; readonly reject: (error: Error) => void }> = [];
  /** Reads asked of the core, by request id, until it confirms or forgets them. */
  private readonly readsAsked = new Map<string, { readonly deadline: number; resolve: () => void; reject: (error: Error) => void }>();
  private nextRead = 0;
  /** The earliest deadline among pending proposals (Infinity when none has one). */
  private nextDeadline = Infinity;
  /** A snapshot received from the leader is being prepared (see GroupMachine.prepareSnapshot). */
  private preparing = false;
  /**
   * The snapshot being taken: built a step at a time (`build` set) for the state at `index`,
   * then saved in the background (`build` null). One at a time.
   */
  private snapshotting: { readonly index: number; build: SnapshotBuild | null } | null = null;
  /** While the replica recovers from damaged storage: what it received so far (see RecoveryReport). */
  private recovery: { readonly since: number; entries: number; bytes: number; snapshots: number } | null = null;

  private readonly options: RaftGroupOptions<R>;

  constructor(options: RaftGroupOptions<R>) {
    options = this.options = withEveryOption(options);
    const restored = options.storage.restoreGroup(options.groupId);
    this.raft = new RaftNode(
      {
        id: options.nodeId,
        random: createRandom(options.env.seed()),
        // The bootstrap configuration: the base config before any snapshot or config entry.
        initialConfig: { voters: [...options.initialVoters], learners: [] },
        electionTicks: options.electionTicks,
        heartbeatTicks: options.heartbeatTicks,
        quiesce: options.ticker !== undefined,
        announceCommit: options.announceCommit === true,
        holdReceivedSnapshots: options.machine.prepareSnapshot !== undefined,
        ...TUNING,
        ...options.tuning,
        ...(options.testOnlyBugs?.raft !== undefined ? { testOnlyBugs: options.testOnlyBugs.raft } : {}),
      },
      restored,
    );
    if (restored.snapshot !== null) {
      options.machine.restore(restored.snapshot.data);
      this.machineIndex = restored.snapshot.meta.index;
    }
    if (options.ticker !== undefined && restored.hardState.term > 0) {
      // Restarted: every replica of this node needs a leader at once; one member of each
      // group campaigns first, the same one on every member.
      const first = firstCandidate(options.groupId, restored.hardState.term, this.raft.voters, options.isPeerSilent ?? (() => false));
      this.raft.startupElection(first === options.nodeId);
    }
    if (this.raft.recovering) this.recovery = { since: options.env.now(), entries: 0, bytes: 0, snapshots: 0 };
    options.ticker?.activate(this);
  }

  /** Restored from damaged storage and not caught up yet: it neither votes nor campaigns (see RecoveryMark). */
  get recovering(): boolean {
    return this.raft.recovering;
  }

  private noteRecovery(ready: Ready): void {
    const recovery = this.recovery;
    if (recovery === null) return;
    recovery.entries += ready.entries.length;
    for (const entry of ready.entries) recovery.bytes += entry.data.byteLength;
    if (ready.snapshot !== null) {
      recovery.snapshots += 1;
      recovery.bytes += ready.snapshot.data.byteLength;
    }
    if (this.raft.recovering) return;
    this.recovery = null;
    this.options.onRecovered?.({
      groupId: this.groupId,
      leaderId: this.raft.currentLeaderId,
      term: this.raft.currentTerm,
      entries: recovery.entries,
      bytes: recovery.bytes,
      snapshots: recovery.snapshots,
      ms: this.options.env.now() - recovery.since,
    });
  }

  /** The next tick starts an election the node's ticker may hold back (see GroupTicker). */
  get campaignDue(): boolean {
    return this.options.rationedElections !== false && this.raft.campaignDue;
  }

  get campaigning(): boolean {
    return this.raft.campaigning;
  }

  /** A tick held back by the ticker: the Raft timer stays, proposals' deadlines still expire. */
  tickHeld(now = this.options.env.now()): void {
    if (now >= this.nextDeadline) this.expirePending(now);
  }

  /** No ticks needed until something wakes the group: it is quiet and nothing here waits on the clock. */
  get restful(): boolean {
    return this.stopped || (this.raft.isQuiet && this.pending.size === 0 && this.parked.length === 0 && this.readsAsked.size === 0 && this.readsWaiting.length === 0);
  }

  get isQuiet(): boolean {
    return this.raft.isQuiet;
  }

  /**
   * The node found `peer` silent for an election timeout (PeerLiveness; `isSilent` says which
   * peers are). A quiet replica whose leader it is forgets that leader (RaftNode.leaderLost)
   * and elects another (one that is not quiet counts its own ticks without the leader's
   * heartbeats, as any Raft follower): one live member, chosen by a hash of the
   * group's id (`firstCandidate`), campaigns first and the others grant it their votes, so
   * the groups of a dead node elect at once without split votes, their new leaders spread
   * over the survivors. A quiet leader wakes (and checks its quorum, stepping down without
   * one) only once the silent members leave it no majority: a leader that still has one has
   * nothing to do, and waking every group a dead follower belonged to would load the
   * survivors just as they elect new leaders for the dead node's groups. Others stay as they
   * are.
   */
  peerSilent(peer: NodeId, isSilent: (id: NodeId) => boolean): void {
    if (this.stopped) return;
    if (this.raft.currentRole === 'leader') {
      if (this.raft.isQuiet && this.raft.hasMember(peer) && !this.raft.quorumAlive((id) => !isSilent(id))) this.guard(() => this.raft.wake(peer));
      return;
    }
    if (this.raft.currentLeaderId !== peer || !this.raft.isQuiet) return;
    const first = firstCandidate(this.groupId, this.raft.currentTerm, this.raft.voters, isSilent) === this.options.nodeId;
    this.guard(() => this.raft.leaderLost(first));
  }

  /** `peer`'s node is heard from again after a gap: a quiet leader that left it behind wakes (RaftNode.memberBack). */
  peerBack(peer: NodeId): void {
    if (this.stopped || !this.raft.isQuiet || this.raft.currentRole !== 'leader') return;
    this.guard(() => this.raft.memberBack(peer));
  }

  get groupId(): string {
    return this.options.groupId;
  }

  get isLeader(): boolean {
    return this.softState.role === 'leader';
  }

  get leaderId(): NodeId | null {
    return this.softState.leaderId;
  }

  /**
   * Whether this replica is a member (voter or learner) of the latest configuration it knows.
   * A joining node's replica is not until its leader's appends bring one naming it: it hears
   * from no leader, so whoever proposes through it must find the leader among the members.
   */
  get isMember(): boolean {
    return this.raft.hasMember(this.options.nodeId);
  }

  get appliedIndex(): number {
    return this.machineIndex;
  }

  status(): RaftStatus {
    return this.raft.status();
  }

  /** Elections this replica started and leaders it learnt of (one per term), since it was created. */
  get elections(): { readonly started: number; readonly leaders: number } {
    return { started: this.campaigns, leaders: this.leaders };
  }

  /** The index of the newest snapshot (taken or installed), or null when there is none. */
  get snapshotIndex(): number | null {
    return this.raft.currentSnapshot()?.meta.index ?? null;
  }

  /** A snapshot is being built or saved. */
  get snapshotInProgress(): boolean {
    return this.snapshotting !== null;
  }

  /**
   * Whether compacting this replica's log to what it applied keeps every member able to
   * catch up from entries: true on a follower (it serves no one), and on a leader whose
   * every member has matched what it applied (one that has not would need a snapshot).
   */
  membersHaveApplied(): boolean {
    const status = this.raft.status();
    if (status.role !== 'leader') return true;
    for (const progress of status.progress.values()) if (progress.match < this.machineIndex) return false;
    return true;
  }

  /**
   * Takes a snapshot if the machine finds one due now: the node's idle check asks (see
   * QueueReplica.idleCheck), as nothing else would while no entry is applied. A turn of the
   * Ready loop that is running checks at its end.
   */
  snapshotIfDue(): void {
    if (this.loopRunning || this.stopped) return;
    void this.maybeSnapshot().catch((error: unknown) => this.fatal(error));
  }

  /** Drives the core's clock; also fails proposals whose deadline passed (see `propose`). */
  tick(now = this.options.env.now()): void {
    if (now >= this.nextDeadline) this.expirePending(now);
    this.guard(() => this.raft.tick());
    this.unpark(now);
  }

  private expirePending(now: number): void {
    let next = Infinity;
    for (const [index, p] of this.pending) {
      if (p.deadline > now) {
        next = Math.min(next, p.deadline);
        continue;
      }
      this.pending.delete(index);
      p.reject(new BrokerError(Status.UNAVAILABLE, Reason.OUTCOME_UNKNOWN, `${p.what} did not commit within the request timeout (no quorum?); the outcome is unknown`));
    }
    for (const [requestId, read] of this.readsAsked) {
      if (read.deadline > now) {
        next = Math.min(next, read.deadline);
        continue;
      }
      this.readsAsked.delete(requestId);
      read.reject(new BrokerError(Status.UNAVAILABLE, Reason.NO_QUORUM, `no quorum confirmed a read of ${this.groupId} within the request timeout`));
    }
    this.nextDeadline = next;
  }

  /**
   * Steps a peer's message. Returns false, stepping nothing, when its sender is no member
   * of the group as far as this replica knows: neither a configuration its log holds (see
   * RaftNode.acceptsMessageFrom) nor the node's directory (`knownMember`, the metadata) names
   * it. A peer of the node that does not replicate this group cannot move its term or its log.
   */
  receive(message: Message): boolean {
    const from = message.from;
    if (from === this.options.nodeId) return false;
    if (!this.raft.acceptsMessageFrom(from) && !(this.options.knownMember?.(from) ?? false)) return false;
    if (this.raft.isQuiet && (message.type === 'preVote' || message.type === 'vote')) {
      const leader = this.raft.currentLeaderId;
      if (this.raft.currentRole === 'follower' && leader !== null && from !== leader) this.options.doubtLeader?.(leader);
    }
    this.guard(() => this.raft.step(message));
    if (message.type === 'snapshot') this.prepareReceived(from);
    return true;
  }

  /**
   * The core holds a snapshot `from` sent in full (RaftOptions.holdReceivedSnapshots): the
   * machine prepares it (a queue fetches the bytes it lists), then it is installed with the
   * data the machine gives, or dropped when that failed (the leader sends one again). One at
   * a time; the core ignores snapshot chunks meanwhile.
   */
  private prepareReceived(from: NodeId): void {
    const held = this.raft.receivedSnapshot;
    const machine = this.options.machine;
    if (held === null || this.preparing || this.stopped || machine.prepareSnapshot === undefined) return;
    const index = held.meta.index;
    this.preparing = true;
    const { env } = this.options;
    const pause = (): Promise<void> => new Promise((resolve) => env.endOfTurn(resolve));
    const started = env.now();
    machine.prepareSnapshot(held.data, { groupId: this.groupId, from, index, pause }).then(
      (data) => {
        this.preparing = false;
        if (this.stopped) return;
        this.options.onPrepared?.(index, env.now() - started);
        this.guard(() => this.raft.installReceivedSnapshot(index, data));
      },
      (error: unknown) => {
        this.preparing = false;
        if (this.stopped) return;
        this.options.onPrepareFailed?.(error);
        this.guard(() => this.raft.dropReceivedSnapshot(index));
      },
    );
  }

  /**
   * Proposes `data`; resolves with the machine's reply once the entry is applied here.
   * Rejects with UNAVAILABLE when this replica does not lead the group (nothing was
   * proposed: safe to retry elsewhere) or when the entry was overwritten by a new leader,
   * and with UNAVAILABLE / OUTCOME_UNKNOWN when it is not applied by `deadline` (checked
   * on each tick, so up to one tick late; no timer per proposal).
   */
  propose(data: Uint8Array, deadline = Infinity, what = this.groupId): Promise<R> {
    const proposed = this.tryPropose(data, deadline, what);
    return proposed instanceof BrokerError ? Promise.reject(proposed) : proposed;
  }

  /** As `propose`, but says at once (with the error) when nothing was proposed. */
  tryPropose(data: Uint8Array, deadline = Infinity, what = this.groupId): Promise<R> | BrokerError {
    if (this.stopped) return new BrokerError(Status.UNAVAILABLE, Reason.GROUP_STOPPED, `group ${this.groupId} is stopping`);
    // Earlier proposals wait for a hand-over to end: this one goes after them.
    if (this.parked.length > 0) this.unpark();
    if (this.parked.length > 0) return this.park(data, deadline, what);
    const result = this.raft.propose(data);
    // This leader is handing leadership over (the core takes no proposal meanwhile): the
    // proposal waits for the outcome, at most an election timeout (see unpark).
    if (!result.ok && result.reason === 'leadershipTransfer') return this.park(data, deadline, what);
    if (!result.ok) return new BrokerError(Status.UNAVAILABLE, Reason.NOT_LEADER, `this node does not lead ${this.groupId} (${result.reason})`);
    this.kick();
    if (deadline < this.nextDeadline) this.nextDeadline = deadline;
    // An earlier proposal of this node at that index (an older term; the log was cut back
    // since) can no longer commit: fail it now rather than leave it waiting forever.
    const overwritten = this.pending.get(result.index);
    if (overwritten !== undefined) {
      overwritten.reject(this.overwrittenError());
    }
    return new Promise<R>((resolve, reject) => {
      this.pending.set(result.index, { term: result.term, deadline, what, resolve, reject });
    });
  }

  private park(data: Uint8Array, deadline: number, what: string): Promise<R> {
    return new Promise<R>((resolve, reject) => this.parked.push({ data, deadline, what, resolve, reject }));
  }

  /**
   * The proposals parked during a hand-over: proposed, in order, once it ended with this
   * node still leading (the target did not take over in time); failed as NOT_LEADER, nothing
   * proposed, once another node leads; failed the same at their deadline.
   */
  private unpark(now = this.options.env.now()): void {
    if (this.parked.length === 0) return;
    if (this.softState.role === 'leader' && this.raft.status().leadTransferee !== null) {
      const expired = this.parked.filter((p) => p.deadline <= now);
      if (expired.length === 0) return;
      this.parked = this.parked.filter((p) => p.deadline > now);
      for (const p of expired) p.reject(new BrokerError(Status.UNAVAILABLE, Reason.NOT_LEADER, `${p.what}: leadership is being handed over; retry`));
      return;
    }
    const parked = this.parked;
    this.parked = [];
    for (const p of parked) {
      if (this.softState.role !== 'leader' || this.stopped) {
        p.reject(new BrokerError(Status.UNAVAILABLE, Reason.NOT_LEADER, `this node no longer leads ${this.groupId} (leadership was handed over)`));
        continue;
      }
      const proposed = this.tryPropose(p.data, p.deadline, p.what);
      if (proposed instanceof BrokerError) p.reject(proposed);
      else proposed.then(p.resolve, p.reject);
    }
  }

  /** Starts an election now (see RaftNode.campaign): the preferred leader of a brand-new group. */
  campaign(): void {
    this.guard(() => this.raft.campaign());
  }

  /** Whether the group has no state yet: no term, no entry, no snapshot (it was just created). */
  get isBrandNew(): boolean {
    return this.raft.currentTerm === 0 && this.raft.lastIndex === 0;
  }

  proposeConfChange(change: ConfChange): boolean {
    const result = this.raft.proposeConfChange(change);
    this.kick();
    return result.ok;
  }

  transferLeadership(to: NodeId): boolean {
    const result = this.raft.transferLeadership(to);
    this.kick();
    return result.ok;
  }

  /**
   * A linearizable read (ReadIndex): resolves once this replica's machine has applied
   * everything committed before the call, as confirmed by a quorum; it then reads the
   * machine directly. Rejects with UNAVAILABLE when this replica does not lead the group or
   * loses leadership before the quorum confirmed it, and when no quorum confirmed it by
   * `deadline` (checked on each tick). No log entry is written.
   */
  readIndex(deadline = Infinity): Promise<void> {
    if (this.stopped) return Promise.reject(new BrokerError(Status.UNAVAILABLE, Reason.GROUP_STOPPED, `group ${this.groupId} is stopping`));
    const requestId = `r${++this.nextRead}`;
    const result = this.raft.readIndex(requestId);
    if (!result.ok) {
      return Promise.reject(new BrokerError(Status.UNAVAILABLE, Reason.NOT_LEADER, `this node cannot serve a read of ${this.groupId} (${result.reason})`));
    }
    this.kick();
    if (deadline < this.nextDeadline) this.nextDeadline = deadline;
    return new Promise<void>((resolve, reject) => this.readsAsked.set(requestId, { deadline, resolve, reject }));
  }

  /**
   * Resolves once this node knows a leader other than `leader` (an election elsewhere), or
   * when `cancel` is called; lets a request forwarded to `leader` stop waiting for it.
   */
  whenLeaderOtherThan(leader: NodeId): { readonly moved: Promise<boolean>; cancel(): void } {
    let settle: (moved: boolean) => void = () => {};
    const moved = new Promise<boolean>((resolve) => (settle = resolve));
    const check = (): boolean => {
      const current = this.softState.leaderId;
      if (current === null || current === leader) return false;
      settle(true);
      return true;
    };
    if (check()) return { moved, cancel: () => {} };
    this.leaderWatchers.add(check);
    return {
      moved,
      cancel: () => {
        this.leaderWatchers.delete(check);
        settle(false);
      },
    };
  }

  /** Resolves with the leader once this node knows one (at once if it does). */
  whenLeaderKnown(): Promise<NodeId> {
    const leader = this.softState.leaderId;
    if (leader !== null) return Promise.resolve(leader);
    return new Promise<NodeId>((resolve) => {
      this.leaderWatchers.add(() => {
        const known = this.softState.leaderId;
        if (known === null) return false;
        resolve(known);
        return true;
      });
    });
  }

  /** Resolves after the next batch of committed entries is applied here. */
  nextApplied(): Promise<void> {
    return new Promise<void>((resolve) => this.appliedWaiters.push(resolve));
  }

  /**
   * Stops driving the group: pending proposals fail, nothing more is persisted. One in the
   * log may still commit on the other members (this replica was removed, the node is
   * shutting down): its outcome is unknown (OUTCOME_UNKNOWN, not to be proposed again as
   * if it had failed). One parked during a hand-over never reached the log.
   */
  stop(reason: string): void {
    if (this.stopped) return;
    this.stopped = true;
    this.options.ticker?.remove(this);
    const pending = [...this.pending.values()];
    const parked = this.parked;
    this.pending.clear();
    this.parked = [];
    for (const p of pending) p.reject(new BrokerError(Status.UNAVAILABLE, Reason.OUTCOME_UNKNOWN, `${reason}; ${p.what} may still commit: the outcome is unknown`));
    const stopped = new BrokerError(Status.UNAVAILABLE, Reason.GROUP_STOPPED, reason);
    for (const p of parked) p.reject(stopped);
    this.failReads(stopped, true);
  }

  /** Fails the reads not confirmed yet, and with `confirmedToo` those waiting for the apply. */
  private failReads(error: Error, confirmedToo: boolean): void {
    const failed: Array<{ reject: (error: Error) => void }> = [...this.readsAsked.values()];
    this.readsAsked.clear();
    if (confirmedToo) {
      failed.push(...this.readsWaiting);
      this.readsWaiting = [];
    }
    for (const read of failed) read.reject(error);
  }

  private guard(action: () => void): void {
    if (this.stopped) return;
    try {
      action();
    } catch (error) {
      this.fatal(error);
      return;
    }
    this.kick();
  }

  private fatal(error: unknown): void {
    if (this.stopped) return;
    this.stop(`group ${this.groupId} failed`);
    this.options.onFatal(error);
  }

  private overwrittenError(): BrokerError {
    return new BrokerError(Status.UNAVAILABLE, Reason.NOT_COMMITTED, `the proposal was overwritten by a new leader of ${this.groupId}; retry`);
  }

  private kick(): void {
    if (this.stopped) return;
    // Woken (or busy): ticked again until it is quiet.
    if (this.options.ticker !== undefined && !this.restful) this.options.ticker.activate(this);
    if (this.loopRunning) {
      // The loop waits (on the disk, mostly): what may leave before anything is persisted
      // leaves at the end of this turn rather than after the wait (heartbeats among it).
      if (!this.earlySendQueued) {
        this.earlySendQueued = true;
        this.options.env.soon(this.sendEarly);
      }
      return;
    }
    if (!this.raft.hasReady()) return;
    this.loopRunning = true;
    // After this callback's microtasks (everything proposed in them leaves in one Ready), or
    // at the end of a busy turn (see NodeEnv.soon).
    this.options.env.soon(this.startLoop);
  }

  private readonly sendEarly = (): void => {
    this.earlySendQueued = false;
    if (this.stopped || !this.loopRunning) return;
    if (this.options.testOnlyBugs?.ackBeforeFsync === true) return;
    let early: Message[];
    try {
      early = this.raft.takeEarlyMessages();
    } catch (error) {
      this.fatal(error);
      return;
    }
    if (early.length > 0) this.sendMessages(early);
  };

  private readonly startLoop = (): void => {
    this.readyLoop().then(
      () => {
        this.loopRunning = false;
        if (!this.stopped && this.raft.hasReady()) this.kick();
      },
      (error: unknown) => {
        this.loopRunning = false;
        this.fatal(error);
      },
    );
  };

  private async readyLoop(): Promise<void> {
    while (!this.stopped && this.raft.hasReady()) {
      const ready = this.raft.ready();
      if (ready.softState !== null) this.onSoftState(ready.softState);
      this.options.observer?.appending(ready.entries, (index) => this.raft.termAt(index) ?? ready.snapshot?.meta.term);
      const ackBeforeFsync = this.options.testOnlyBugs?.ackBeforeFsync === true;
      const early = ackBeforeFsync ? ready.messages : ready.messages.filter(sendableBeforePersist);
      if (early.length > 0) this.sendMessages(early);
      if (ready.mustSync) {
        // A leader's loop has its followers' answers to handle while its own write is under
        // way; anyone else's waits for the write (a follower answers its leader after it).
        // A leader's small write (one operation in flight, about) goes on the loop too, but a
        // turn later: the appends just sent leave at the start of that turn's check phase,
        // and the write then costs no hand-off to a pool thread and back.
        const leader = this.softState.role === 'leader';
        const small = leader && isSmallLeaderWrite(ready.entries, ready.snapshot);
        if (small) await new Promise<void>((resolve) => this.options.env.endOfTurn(resolve));
        if (this.stopped) return;
        await this.options.storage.persist(
          this.groupId,
          { hardState: ready.hardState, entries: ready.entries, snapshot: ready.snapshot },
          leader && !small ? 'pooled' : 'inline',
        );
      } else if (ready.hardState !== null) {
        // Only the commit index moved: it is recomputed after a crash, so nothing waits
        // for this write, and it costs no fdatasync of its own: it goes with the next
        // write that needs one (the storage keeps the group's writes in order).
        this.options.storage
          .persist(this.groupId, { hardState: ready.hardState, entries: [], snapshot: null }, 'lazy')
          .catch((error: unknown) => this.fatal(error));
      }
      if (this.stopped) return;
      const late = ackBeforeFsync ? [] : ready.messages.filter((message) => !sendableBeforePersist(message));
      if (late.length > 0) {
        this.sendMessages(late);
        // Let the transport's flush (a microtask) run before applying: a follower's
        // append response then leaves before it applies anything, and the responses of
        // all groups that resumed from the same WAL flush leave in one batch.
        await undefined;
        if (this.stopped) return;
      }
      this.apply(ready);
      this.serveReads(ready);
      this.raft.advance();
      this.noteRecovery(ready);
      await this.maybeSnapshot();
    }
  }

  private sendMessages(messages: readonly Message[]): void {
    if (messages.length > 0) this.options.send(this.groupId, messages);
  }

  private onSoftState(state: SoftState): void {
    const wasLeader = this.softState.role === 'leader';
    // A Ready shows the role after a step: a campaign began when the role turns candidate
    // (or preCandidate) from anything else, or straight to leader (a lone voter's
    // campaign is won within the step that started it).
    const wasCampaigning = isCampaigning(this.softState.role);
    if (!wasCampaigning && (isCampaigning(state.role) || (state.role === 'leader' && !wasLeader))) this.campaigns += 1;
    const term = this.raft.currentTerm;
    if (state.leaderId !== null && term !== this.leaderTerm) {
      this.leaderTerm = term;
      this.leaders += 1;
    }
    this.softState = state;
    // Entries this leader proposed may still commit under the next leader; they are resolved
    // (or failed as overwritten) when applied. Reads it had not confirmed are lost with it.
    if (wasLeader && state.role !== 'leader') {
      this.failReads(new BrokerError(Status.UNAVAILABLE, Reason.NOT_LEADER, `this node stopped leading ${this.groupId} before the read was confirmed`), false);
    }
    for (const watcher of this.leaderWatchers) if (watcher()) this.leaderWatchers.delete(watcher);
    if (wasLeader && state.role !== 'leader') this.unpark();
    // An election ended (won, or another member won): its slot goes to a waiting group now.
    if (state.role !== 'candidate' && state.role !== 'preCandidate') this.options.ticker?.campaignOver(this, this.options.env.now());
    this.options.onSoftState?.(state);
  }

  private apply(ready: Ready): void {
    if (ready.snapshot !== null) {
      // A snapshot being built holds the replaced state: drop it (one being saved is older
      // than this one, and the storage refuses it as stale).
      if (this.snapshotting?.build != null) this.snapshotting = null;
      this.options.machine.restore(ready.snapshot.data);
      this.machineIndex = ready.snapshot.meta.index;
      // Proposals at or below the snapshot cannot be matched to a reply any more.
      for (const [index, p] of this.pending) {
        if (index <= this.machineIndex) {
          this.pending.delete(index);
          p.reject(new BrokerError(Status.UNAVAILABLE, Reason.OUTCOME_UNKNOWN, `replica of ${this.groupId} was replaced by a snapshot`));
        }
      }
    }
    if (ready.committedEntries.length === 0) return;
    const leader = this.softState.role === 'leader';
    for (const entry of ready.committedEntries) {
      // The hand-off from the core: committed entries come in order, none skipped.
      invariant(entry.index === this.machineIndex + 1, () => `group ${this.groupId}: committed entry ${entry.index} does not follow the applied index ${this.machineIndex}`);
      this.machineIndex = entry.index;
      this.options.observer?.applying(entry);
      const reply = entry.type === 'normal' ? this.options.machine.apply(entry, leader) : undefined;
      const pending = this.pending.get(entry.index);
      if (pending === undefined) continue;
      this.pending.delete(entry.index);
      if (pending.term === entry.term && reply !== undefined) pending.resolve(reply);
      else pending.reject(this.overwrittenError());
    }
    this.options.onApplied?.();
    if (this.appliedWaiters.length > 0) {
      const waiters = this.appliedWaiters;
      this.appliedWaiters = [];
      for (const resolve of waiters) resolve();
    }
  }

  /** Resolves the reads whose index the machine has now applied. */
  private serveReads(ready: Ready): void {
    for (const state of ready.readStates) {
      const asked = this.readsAsked.get(state.requestId);
      if (asked === undefined) continue;
      this.readsAsked.delete(state.requestId);
      this.readsWaiting.push({ index: state.index, resolve: asked.resolve, reject: asked.reject });
    }
    if (this.readsWaiting.length === 0) return;
    const servable = this.readsWaiting.filter((read) => read.index <= this.machineIndex);
    if (servable.length === 0) return;
    this.readsWaiting = this.readsWaiting.filter((read) => read.index > this.machineIndex);
    for (const read of servable) read.resolve();
  }

  private async maybeSnapshot(): Promise<void> {
    if (this.snapshotting !== null) return;
    const machine = this.options.machine;
    const storage = this.options.storage;
    if (machine.snapshotDue === undefined) {
      // By entries, or when this group's few entries keep an old WAL segment (the metadata
      // group: see NodeStorage.pinsOldSegment). A queue decides by its own measure, which
      // bounds its log by bytes: a long queue's log spans several segments by design.
      if (!storage.shouldSnapshot(this.groupId, this.machineIndex) && !storage.pinsOldSegment(this.groupId, this.machineIndex)) return;
    } else if (!machine.snapshotDue(storage.snapshotInterval)) {
      return;
    }
    if (machine.snapshotSteps !== undefined) {
      // Built between other work, then saved in the background: the Ready loop goes on
      // (appends, heartbeats) while a long queue is snapshotted.
      this.snapshotting = { index: this.machineIndex, build: machine.snapshotSteps() };
      this.options.env.endOfTurn(this.stepSnapshot);
      return;
    }
    const index = this.machineIndex;
    this.snapshotting = { index, build: null };
    try {
      await this.saveSnapshot(index, machine.snapshot());
    } finally {
      this.snapshotting = null;
    }
  }

  /** One step of the snapshot being built; once built, it is saved in the background. */
  private readonly stepSnapshot = (): void => {
    const taking = this.snapshotting;
    if (taking === null || taking.build === null || this.stopped) return;
    let data: Uint8Array | null;
    try {
      data = taking.build.step(SNAPSHOT_STEP_BUDGET);
    } catch (error) {
      this.snapshotting = null;
      this.fatal(error);
      return;
    }
    if (data === null) {
      this.options.env.endOfTurn(this.stepSnapshot);
      return;
    }
    taking.build = null;
    this.saveSnapshot(taking.index, data).then(
      () => {
        if (this.snapshotting === taking) this.snapshotting = null;
        // Another may be due already (the log grew while this one was taken).
        if (!this.loopRunning && !this.stopped) void this.maybeSnapshot().catch((error: unknown) => this.fatal(error));
      },
      (error: unknown) => {
        if (this.snapshotting === taking) this.snapshotting = null;
        this.fatal(error);
      },
    );
  };

  /**
   * Compacts the log to a snapshot of the state at `index` and saves it. Nothing happens
   * when a newer snapshot was installed meanwhile (the core or the storage has it already).
   */
  private async saveSnapshot(index: number, data: Uint8Array): Promise<void> {
    const machine = this.options.machine;
    if (this.stopped) return;
    const snapshot = this.raft.compact(index, data);
    if (snapshot === null) return;
    if (machine.snapshotDurable !== undefined && !(await machine.snapshotDurable())) return;
    if (this.stopped) return;
    try {
      await this.options.storage.saveLocalSnapshot(this.groupId, snapshot);
    } catch (error) {
      if (error instanceof StaleSnapshotError) return;
      throw error;
    }
    machine.snapshotSaved?.();
  }
}

function isCampaigning(role: SoftState['role']): boolean {
  return role === 'candidate' || role === 'preCandidate';
}

/**
 * The member of a group that campaigns first once its leader's node went silent: one of the
 * voters not silent, picked by a hash of the group's id and term. Every live member picks
 * the same one (they see the same silent peers and followed the same leader in that term),
 * the groups of a dead node spread evenly over the survivors, and a group that loses leader
 * after leader does not always fall to the same member. Null when no voter is live.
 */
export function firstCandidate(groupId: string, term: number, voters: readonly NodeId[], isSilent: (id: NodeId) => boolean): NodeId | null {
  const live = voters.filter((id) => !isSilent(id)).sort();
  if (live.length === 0) return null;
  // FNV-1a, then MurmurHash3's finalizer: FNV-1a's low bits alone follow the parity of the
  // characters, which the names and indexes of queues placed on the same nodes share.
  let hash = 2166136261;
  for (let i = 0; i < groupId.length; i++) hash = Math.imul(hash ^ groupId.charCodeAt(i), 16777619);
  hash = Math.imul(hash ^ (term >>> 0), 16777619);
  hash = Math.imul(hash ^ (hash >>> 16), 0x85ebca6b);
  hash = Math.imul(hash ^ (hash >>> 13), 0xc2b2ae35);
  hash = (hash ^ (hash >>> 16)) >>> 0;
  return live[hash % live.length]!;
}
