import { assert } from './assert.js';
import {
  EMPTY_CONFIG,
  applyConfChange,
  encodeConfigEntry,
  isMember,
  isVoter,
  members,
  quorumMatchIndex,
  quorumSize,
  validateConfChange,
} from './config.js';
import { RaftLog } from './log.js';
import { Progress } from './progress.js';
import { sendableBeforePersist } from './types.js';
import type {
  AppendMessage,
  AppendResponse,
  ClusterConfig,
  ConfChange,
  Entry,
  HardState,
  HeartbeatMessage,
  HeartbeatResponse,
  Message,
  NodeId,
  ProposeResult,
  Random,
  ReadState,
  Ready,
  RestoredState,
  Role,
  Snapshot,
  SnapshotChunkMessage,
  SnapshotChunkResponse,
  SoftState,
  VoteMessage,
  PreVoteMessage,
} from './types.js';

/**
 * Deliberately planted bugs, for proving that the simulator's checkers can fail. Never set
 * outside tests.
 */
export type PlantedBug =
  /** Commit an entry of an earlier term by counting replicas (violates Figure 8 of the paper). */
  | 'commitPreviousTermByCount'
  /** Lose the vote of the current term on restart (allows two votes in one term). */
  | 'forgetVoteOnRestart'
  /** Grant votes without checking that the candidate's log is up to date. */
  | 'voteWithoutLogCheck'
  /** Release a read at once, without a quorum confirming that this node still leads. */
  | 'readIndexWithoutQuorum'
  /** A replica recovering from damaged storage votes and campaigns as if it were intact. */
  | 'recoveringVotes';

export interface RaftOptions {
  readonly id: NodeId;
  /** Membership of a brand-new group; ignored once a snapshot or config entry exists. */
  readonly initialConfig?: ClusterConfig;
  readonly random: Random;
  /** Followers campaign after electionTicks + random(electionTicks) ticks without a leader. */
  readonly electionTicks?: number;
  readonly heartbeatTicks?: number;
  readonly preVote?: boolean;
  readonly checkQuorum?: boolean;
  readonly appendEntriesMax?: number;
  readonly appendBytesMax?: number;
  readonly inflightAppendsMax?: number;
  readonly snapshotChunkBytes?: number;
  /** Entries kept in memory before a local snapshot, so slightly lagging followers avoid a snapshot. */
  readonly retainedEntriesAfterSnapshot?: number;
  /** ... and at most this many bytes of them (entries of a queue can be batches of a megabyte). */
  readonly retainedBytesAfterSnapshot?: number;
  readonly applyBytesMax?: number;
  /** Promote learners to voters once they have caught up with the commit index. */
  readonly promoteLearners?: boolean;
  /**
   * Tell followers a new commit index at once (an empty append when no entries carry it),
   * rather than with the next entries or heartbeat: for a group whose followers act on what
   * they apply (the metadata: each node creates a queue's replica when it applies its
   * declare). Costs a message per follower per commit.
   */
  readonly announceCommit?: boolean;
  /**
   * Let the group go quiet when idle (see RaftNode.isQuiet). Only for a driver that watches
   * its peer nodes and calls `wake` for a silent one: without that, a quiet follower would
   * never notice its leader's crash.
   */
  readonly quiesce?: boolean;
  /**
   * A follower that receives the last chunk of a snapshot holds it (`receivedSnapshot`)
   * instead of installing it: its driver prepares what the snapshot needs on this node (a
   * queue's message bytes, fetched from the sender) and then installs it
   * (`installReceivedSnapshot`, possibly re-encoded) or drops it (`dropReceivedSnapshot`).
   * Snapshot chunks that arrive meanwhile are ignored: the leader sends again once the
   * transfer stalls.
   */
  readonly holdReceivedSnapshots?: boolean;
  readonly testOnlyBugs?: ReadonlySet<PlantedBug>;
}

type ResolvedOptions = Required<Omit<RaftOptions, 'initialConfig' | 'testOnlyBugs'>> & {
  readonly testOnlyBugs: ReadonlySet<PlantedBug>;
};

export type ReadIndexResult =
  | { readonly ok: true }
  | { readonly ok: false; readonly reason: 'notLeader'; readonly leaderId: NodeId | null };

export type TransferResult =
  | { readonly ok: true }
  | { readonly ok: false; readonly reason: 'notLeader' | 'notAVoter'; readonly leaderId: NodeId | null };

export interface RaftStatus {
  readonly id: NodeId;
  readonly term: number;
  readonly vote: NodeId | null;
  readonly role: Role;
  readonly leaderId: NodeId | null;
  readonly commitIndex: number;
  readonly appliedIndex: number;
  readonly stableIndex: number;
  readonly firstIndex: number;
  readonly lastIndex: number;
  readonly lastTerm: number;
  readonly config: ClusterConfig;
  readonly leadTransferee: NodeId | null;
  readonly progress: ReadonlyMap<NodeId, { match: number; next: number; state: string; inflight: number }>;
  /** See RecoveryMark: the term this replica's log must reach before it votes again, or null. */
  readonly recoveringUntilTerm: number | null;
}

interface PendingRead {
  readonly requestId: string;
  readonly index: number;
  readonly seq: number;
  readonly acks: Set<NodeId>;
}

interface IncomingSnapshot {
  readonly leaderId: NodeId;
  readonly term: number;
  readonly index: number;
  /** The data's length: a leader that replaced the data (replaceSnapshotData) sends another. */
  readonly totalBytes: number;
  readonly chunks: Uint8Array[];
  received: number;
}

/** What an outstanding Ready promised, so advance() knows what became durable and applied. */
interface ReadyMarks {
  readonly lastEntry: { index: number; term: number } | null;
  readonly snapshot: Snapshot | null;
  readonly appliedIndex: number;
}

const DEFAULTS = {
  electionTicks: 10,
  heartbeatTicks: 1,
  preVote: true,
  checkQuorum: true,
  appendEntriesMax: 512,
  appendBytesMax: 1024 * 1024,
  inflightAppendsMax: 64,
  snapshotChunkBytes: 512 * 1024,
  retainedEntriesAfterSnapshot: 256,
  retainedBytesAfterSnapshot: 8 * 1024 * 1024,
  applyBytesMax: 16 * 1024 * 1024,
  promoteLearners: true,
  quiesce: false,
  announceCommit: false,
  holdReceivedSnapshots: false,
};

/**
 * The Raft core of one group. Single-threaded, synchronous and deterministic: time
 * arrives as tick(), randomness from the injected Random, and all I/O leaves as a Ready.
 */
export class RaftNode {
  readonly id: NodeId;
  private readonly options: ResolvedOptions;
  private readonly log: RaftLog;
  private term: number;
  private vote: NodeId | null;
  private role: Role = 'follower';
  private leaderId: NodeId | null = null;
  private readonly progress = new Map<NodeId, Progress>();
  private readonly votes = new Map<NodeId, boolean>();
  /** Ticks since the last election timeout reset. On a leader: since the last quorum check. */
  private electionElapsed = 0;
  private heartbeatElapsed = 0;
  private randomizedElectionTicks = 0;
  private leadTransferee: NodeId | null = null;
  private broadcastPending = false;
  private messages: Message[] = [];
  private readStates: ReadState[] = [];
  private pendingReads: PendingRead[] = [];
  /** Read requests that arrived before the leader committed an entry of its term. */
  private deferredReads: string[] = [];
  private readSeq = 0;
  private incomingSnapshot: IncomingSnapshot | null = null;
  /** A complete snapshot received and held for the driver (see RaftOptions.holdReceivedSnapshots). */
  private heldSnapshot: { readonly snapshot: Snapshot; readonly leaderId: NodeId; readonly term: number } | null = null;
  private previousSoftState: SoftState;
  private previousHardState: HardState;
  private outstandingReady: ReadyMarks | null = null;
  /** See isQuiet. Volatile: a restarted replica is never quiet. */
  private quiet = false;
  /**
   * See RecoveryMark: while set, this replica neither votes nor campaigns. Cleared once the
   * durable log holds an entry of at least this term (checked in advance()).
   */
  private recoveringTerm: number | null;

  constructor(options: RaftOptions, restored: RestoredState) {
    this.id = options.id;
    this.options = {
      ...DEFAULTS,
      ...stripUndefined(options),
      id: options.id,
      random: options.random,
      testOnlyBugs: options.testOnlyBugs ?? new Set(),
    };
    assert(this.options.heartbeatTicks < this.options.electionTicks, 'heartbeatTicks must be below electionTicks');
    this.log = new RaftLog(restored.snapshot, restored.entries, restored.hardState.commit, options.initialConfig ?? EMPTY_CONFIG);
    this.term = restored.hardState.term;
    this.vote = this.options.testOnlyBugs.has('forgetVoteOnRestart') ? null : restored.hardState.vote;
    this.previousHardState = restored.hardState;
    const mark = restored.recovering ?? null;
    assert(mark === null || mark.term <= this.term, () => `recovering until term ${mark?.term} but restored term ${this.term} is below it`);
    this.recoveringTerm = mark === null ? null : mark.term;
    this.maybeEndRecovery();
    this.becomeFollower(this.term, null);
    this.previousSoftState = this.softState();
  }

  // ---------------------------------------------------------------- inputs

  tick(): void {
    if (this.quiet) return;
    if (this.role === 'leader') this.tickHeartbeat();
    else this.tickElection();
  }

  /**
   * A quiet group (ra's quiescence, TiKV's hibernation) costs nothing while idle: its leader
   * found every follower it hears from caught up with nothing pending, told them so (a
   * heartbeat with `quiesce`) and stopped heartbeating; a follower holding everything the
   * leader committed stopped its election timer. `tick` does nothing while quiet.
   *
   * Liveness then comes from the driver, which watches the peer *nodes* (one heartbeat per
   * node, not per group) and calls `wake` for the quiet groups of a node that went silent.
   * Any work wakes the group by itself: a proposal, a read, a transfer, and every message
   * but the quiesce heartbeat and a quiet follower's answer to it.
   */
  get isQuiet(): boolean {
    return this.quiet;
  }

  /**
   * Wakes a quiet replica (nothing happens to one that is not quiet). `memberSilent`: the
   * driver found a member's node silent for an election timeout. A follower whose leader is
   * that node then forgets it, as `leaderLost(false)`: it grants votes at once and
   * campaigns after a randomized election timeout. A leader
   * goes back to heartbeating and checks its quorum afresh: one that hears from no majority
   * steps down within an election timeout (a partitioned quiet leader stops leading).
   */
  wake(memberSilent: NodeId | null = null): void {
    this.wakeUp(memberSilent, true);
  }

  /**
   * The driver heard from `member`'s node again after a gap (it was out of reach). A quiet
   * leader wakes if that member lacks entries: it went quiet while the member was not heard
   * from (see canQuiesce), its appends to the member were lost, and a quiet group sends
   * nothing that would catch the member up. Liveness only, like `wake`.
   */
  memberBack(member: NodeId): void {
    if (!this.quiet || this.role !== 'leader' || member === this.id) return;
    const progress = this.progress.get(member);
    if (progress === undefined || progress.match >= this.log.lastIndex()) return;
    this.wakeUp(null, false);
  }

  /** `askLeader`: a follower asks its leader to heartbeat again (not when the leader woke it). */
  private wakeUp(memberSilent: NodeId | null, askLeader: boolean): void {
    if (!this.quiet) return;
    this.quiet = false;
    if (this.role === 'leader') {
      this.electionElapsed = 0;
      this.heartbeatElapsed = 0;
      for (const [id, progress] of this.progress) if (id !== this.id) progress.recentActive = false;
      this.broadcastHeartbeat(false);
      return;
    }
    if (memberSilent !== null && memberSilent === this.leaderId) {
      this.leaderLost(false);
      return;
    }
    this.electionElapsed = 0;
    // The leader is quiet and sends nothing: ask it to heartbeat again (a response that is
    // not quiet wakes it), or this follower would campaign against a healthy leader.
    if (askLeader && this.leaderId !== null && this.leaderId !== this.id) {
      this.send({ type: 'heartbeatResp', from: this.id, to: this.leaderId, term: this.term, readSeq: 0, wake: true });
    }
  }

  /**
   * The driver found this follower's leader silent: its node sent nothing for an election
   * timeout. The follower forgets that leader, so its lease is over (it grants votes at
   * once), and wakes if it was quiet. `first`: the driver chose this replica to campaign
   * first, the same choice on every live member (see RaftGroup.peerSilent). It campaigns
   * after half an election timeout, time for the others to find the leader silent too and
   * grant; the others campaign only after a whole randomized election timeout, should it
   * fail. Without a first, the survivors of a dead node that led thousands of groups would
   * all campaign at once in each of them and split their votes, over and over, on nodes too
   * loaded for randomized timeouts to tell them apart. Nothing happens on a replica that
   * is not a follower of a known leader.
   */
  leaderLost(first: boolean): void {
    if (this.role !== 'follower' || this.leaderId === null) return;
    this.quiet = false;
    this.leaderId = null;
    this.electionElapsed = 0;
    this.randomizedElectionTicks = first
      ? Math.ceil(this.options.electionTicks / 2)
      : this.options.electionTicks + this.options.random.nextInt(this.options.electionTicks);
  }

  /**
   * A replica that just started (restored from its storage, no leader known): when the
   * driver knows it holds many groups that all need a leader, `first` says this replica
   * should campaign first in this one (the same choice on every member, see
   * RaftGroup), after half an election timeout; any other waits a whole randomized election
   * timeout more, time for the first to win. Nothing happens on a replica that knows a
   * leader, leads, or campaigns already.
   */
  startupElection(first: boolean): void {
    if (this.role !== 'follower' || this.leaderId !== null) return;
    this.electionElapsed = 0;
    this.randomizedElectionTicks = first
      ? Math.ceil(this.options.electionTicks / 2)
      : 2 * this.options.electionTicks + this.options.random.nextInt(this.options.electionTicks);
  }

  /**
   * Whether the next `tick` starts an election (a pre-vote with preVote): a voter that does
   * not lead, is not quiet, and whose election timeout runs out. A driver that rations
   * concurrent elections (GroupTicker) holds back that tick until it grants a slot.
   */
  get campaignDue(): boolean {
    return !this.quiet && this.role !== 'leader' && this.electionElapsed + 1 >= this.randomizedElectionTicks && this.promotable();
  }

  /** Whether this replica is campaigning now (pre-candidate or candidate). */
  get campaigning(): boolean {
    return this.role === 'candidate' || this.role === 'preCandidate';
  }

  /** The voters of the latest configuration this node knows. */
  get voters(): readonly NodeId[] {
    return this.log.latestConfig().voters;
  }

  /**
   * Starts an election now rather than after an election timeout (the preferred leader of a
   * brand-new group: its replicas were all just created, none has a leader to lose). Does
   * nothing on a leader or on a replica that cannot vote. With pre-vote it is a pre-vote,
   * but in a group that never had a term (nobody to disrupt): a vote at once.
   */
  campaign(): void {
    this.wakeUp(null, false);
    if (this.role === 'leader' || !this.promotable()) return;
    this.startElection(this.options.preVote && this.term > 0 ? 'preElection' : 'election', false);
  }

  step(message: Message): void {
    assert(message.to === this.id, () => `message for ${message.to} stepped into ${this.id}`);
    if (this.quiet && !keepsQuiet(message)) this.wakeUp(null, message.from !== this.leaderId);
    if (message.term > this.term) {
      if (!this.stepHigherTerm(message)) return;
    } else if (message.term < this.term) {
      this.stepLowerTerm(message);
      return;
    }
    switch (message.type) {
      case 'preVote':
      case 'vote':
        this.handleVoteRequest(message);
        return;
      default:
        break;
    }
    switch (this.role) {
      case 'leader':
        this.stepLeader(message);
        return;
      case 'candidate':
      case 'preCandidate':
        this.stepCandidate(message);
        return;
      case 'follower':
        this.stepFollower(message);
        return;
    }
  }

  /** Whether the voters `isLive` accepts (this node counts as live) still make a majority. */
  quorumAlive(isLive: (id: NodeId) => boolean): boolean {
    const config = this.log.latestConfig();
    let live = 0;
    for (const voter of config.voters) if (voter === this.id || isLive(voter)) live++;
    return live >= quorumSize(config);
  }

  /** Whether `id` is a member (voter or learner) of the latest configuration this node knows. */
  hasMember(id: NodeId): boolean {
    return isMember(this.log.latestConfig(), id);
  }

  /**
   * Whether a message from `from` belongs to this group, for a driver to drop one that does
   * not before stepping it (a peer of the node that is no replica of this group, or one
   * spoofing another's id). True when `from` is a member of a configuration this node's log
   * holds (the one in force, the one a pending change leaves, the snapshot's), and always
   * while this node is not a member itself: a learner being added knows no configuration
   * naming its leader until the leader's appends or snapshot bring one.
   */
  acceptsMessageFrom(from: NodeId): boolean {
    if (!isMember(this.log.latestConfig(), this.id)) return true;
    return from !== this.id && this.log.namesMember(from);
  }

  propose(data: Uint8Array): ProposeResult {
    this.wake();
    const rejection = this.checkCanPropose();
    if (rejection !== null) return rejection;
    const entry = this.appendEntry('normal', data);
    return { ok: true, index: entry.index, term: entry.term };
  }

  proposeConfChange(change: ConfChange): ProposeResult {
    this.wake();
    const rejection = this.checkCanPropose();
    if (rejection !== null) return rejection;
    if (this.configChangePending() || !this.committedInCurrentTerm()) {
      return { ok: false, reason: 'configChangePending', leaderId: this.leaderId };
    }
    const config = this.log.latestConfig();
    if (validateConfChange(config, change) !== null) {
      return { ok: false, reason: 'invalidConfigChange', leaderId: this.leaderId };
    }
    const entry = this.appendEntry('config', encodeConfigEntry({ change, config: applyConfChange(config, change) }));
    return { ok: true, index: entry.index, term: entry.term };
  }

  /**
   * Requests a linearizable read (the ReadIndex protocol of the dissertation, section
   * 6.4; no clock-based lease). When a quorum has confirmed this node is still leader, a
   * ReadState with the commit index at request time appears in a Ready; the read may be
   * served once the state machine has applied that index. If leadership is lost first,
   * the request is dropped: the driver fails it when softState shows the change.
   */
  readIndex(requestId: string): ReadIndexResult {
    this.wake();
    if (this.role !== 'leader') return { ok: false, reason: 'notLeader', leaderId: this.leaderId };
    if (!this.committedInCurrentTerm()) {
      this.deferredReads.push(requestId);
      return { ok: true };
    }
    this.startRead(requestId);
    return { ok: true };
  }

  /** Hands leadership to `target` (which must be a voter) via TimeoutNow once it has caught up. */
  transferLeadership(target: NodeId): TransferResult {
    this.wake();
    if (this.role !== 'leader') return { ok: false, reason: 'notLeader', leaderId: this.leaderId };
    if (!isVoter(this.log.latestConfig(), target)) return { ok: false, reason: 'notAVoter', leaderId: this.leaderId };
    if (target === this.id || this.leadTransferee === target) return { ok: true };
    this.leadTransferee = target;
    // The transfer is aborted if it does not finish within an election timeout.
    this.electionElapsed = 0;
    const progress = this.progress.get(target);
    assert(progress !== undefined, () => `no progress for voter ${target}`);
    if (progress.match === this.log.lastIndex()) this.sendTimeoutNow(target);
    else this.maybeSendAppend(target, true);
    return { ok: true };
  }

  /**
   * Records a snapshot of the state machine taken at `index` (which the driver has applied)
   * and compacts the log before it. The driver persists the returned snapshot, then may
   * release the WAL. Returns null when there is nothing to do: a snapshot at or after
   * `index` exists already, for example one installed from the leader while the driver
   * was still applying older entries.
   */
  compact(index: number, data: Uint8Array): Snapshot | null {
    assert(index <= this.log.applied, () => `cannot snapshot at ${index}: applied is ${this.log.applied}`);
    if (index <= (this.log.snapshot?.meta.index ?? 0) || this.log.pendingSnapshot !== null) return null;
    const snapshot: Snapshot = {
      meta: { index, term: this.log.termForSnapshot(index), config: this.log.configAt(index) },
      data,
    };
    this.log.compact(snapshot, this.log.retainFrom(index, this.options.retainedEntriesAfterSnapshot, this.options.retainedBytesAfterSnapshot));
    return snapshot;
  }

  /** The newest snapshot, taken or installed (what a lagging follower is sent), or null. */
  currentSnapshot(): Snapshot | null {
    return this.log.snapshot;
  }

  /**
   * Replaces the data of the newest snapshot, which must be at `index`, by another encoding
   * of the same state (a state machine that snapshots references to bodies kept elsewhere
   * gives the form a follower can install on its own). Transfers of that snapshot in
   * progress restart from their first chunk with the new data. Returns false, changing
   * nothing, when the newest snapshot is not at `index` or one is being installed.
   */
  replaceSnapshotData(index: number, data: Uint8Array): boolean {
    const current = this.log.snapshot;
    if (current === null || current.meta.index !== index || this.log.pendingSnapshot !== null) return false;
    const replaced: Snapshot = { meta: current.meta, data };
    this.log.snapshot = replaced;
    if (this.role !== 'leader') return true;
    for (const [id, progress] of this.progress) {
      if (id === this.id || progress.state !== 'snapshot' || progress.snapshot?.meta.index !== index) continue;
      progress.becomeSnapshot(replaced);
      this.sendSnapshotChunk(id, progress);
    }
    return true;
  }

  // ---------------------------------------------------------------- outputs

  hasReady(): boolean {
    if (this.outstandingReady !== null) return false;
    this.flushBroadcast();
    return (
      this.messages.length > 0 ||
      this.readStates.length > 0 ||
      this.log.pendingSnapshot !== null ||
      this.log.stableIndex < this.log.lastIndex() ||
      Math.min(this.log.committed, this.log.stableIndex) > this.log.applied ||
      !sameHardState(this.hardState(), this.previousHardState) ||
      !sameSoftState(this.softState(), this.previousSoftState)
    );
  }

  ready(): Ready {
    assert(this.outstandingReady === null, 'ready() called again before advance()');
    this.flushBroadcast();
    const hardState = this.hardState();
    const softState = this.softState();
    const entries = this.log.unstableEntries();
    const committedEntries = this.log.entriesToApply(this.options.applyBytesMax);
    const snapshot = this.log.pendingSnapshot;
    const hardStateChanged = !sameHardState(hardState, this.previousHardState);
    const ready: Ready = {
      softState: sameSoftState(softState, this.previousSoftState) ? null : softState,
      hardState: hardStateChanged ? hardState : null,
      entries,
      snapshot,
      committedEntries,
      messages: this.messages,
      readStates: this.readStates,
      mustSync:
        entries.length > 0 ||
        snapshot !== null ||
        hardState.term !== this.previousHardState.term ||
        hardState.vote !== this.previousHardState.vote,
    };
    this.messages = [];
    this.readStates = [];
    this.previousHardState = hardState;
    this.previousSoftState = softState;
    const lastEntry = entries[entries.length - 1];
    const lastApplied = committedEntries[committedEntries.length - 1];
    this.outstandingReady = {
      lastEntry: lastEntry === undefined ? null : { index: lastEntry.index, term: lastEntry.term },
      snapshot,
      appliedIndex: lastApplied?.index ?? this.log.applied,
    };
    return ready;
  }

  /**
   * Takes the messages waiting for the next Ready that may leave before anything is
   * persisted (`sendableBeforePersist`: a leader's appends, heartbeats, snapshot chunks,
   * TimeoutNow), in order; the rest stay for the Ready. A driver whose Ready loop waits on
   * a slow disk sends these at once, so that its followers keep hearing from their leader
   * (and its appends keep flowing) instead of electing another one.
   */
  takeEarlyMessages(): Message[] {
    this.flushBroadcast();
    if (this.messages.length === 0) return [];
    const early = this.messages.filter(sendableBeforePersist);
    if (early.length > 0) this.messages = this.messages.filter((m) => !sendableBeforePersist(m));
    return early;
  }

  /** Acknowledges that the last Ready was persisted, sent and applied. */
  advance(): void {
    const marks = this.outstandingReady;
    assert(marks !== null, 'advance() without an outstanding ready()');
    this.outstandingReady = null;
    if (marks.snapshot !== null && this.log.pendingSnapshot === marks.snapshot) this.log.pendingSnapshot = null;
    if (marks.lastEntry !== null) this.log.stableTo(marks.lastEntry.index, marks.lastEntry.term);
    this.log.appliedTo(marks.appliedIndex);
    this.maybeEndRecovery();
    if (this.role === 'leader') this.onLeaderDurable();
    this.checkInvariants();
  }

  status(): RaftStatus {
    const progress = new Map<NodeId, { match: number; next: number; state: string; inflight: number }>();
    for (const [id, pr] of this.progress) {
      progress.set(id, { match: pr.match, next: pr.next, state: pr.state, inflight: pr.inflightCount() });
    }
    return {
      id: this.id,
      term: this.term,
      vote: this.vote,
      role: this.role,
      leaderId: this.leaderId,
      commitIndex: this.log.committed,
      appliedIndex: this.log.applied,
      stableIndex: this.log.stableIndex,
      firstIndex: this.log.firstIndex(),
      lastIndex: this.log.lastIndex(),
      lastTerm: this.log.lastTerm(),
      config: this.log.latestConfig(),
      leadTransferee: this.leadTransferee,
      progress,
      recoveringUntilTerm: this.recoveringTerm,
    };
  }

  /** Whether the latest configuration is committed (a leader proposes the next change only then). */
  get configCommitted(): boolean {
    return !this.configChangePending();
  }

  /** True while this replica recovers from damaged storage (see RecoveryMark): it does not vote. */
  get recovering(): boolean {
    return this.recoveringTerm !== null;
  }

  /** The current role, without building a whole status. */
  get currentRole(): Role {
    return this.role;
  }

  /** The leader this node knows of now, without building a whole status. */
  get currentLeaderId(): NodeId | null {
    return this.leaderId;
  }

  get currentTerm(): number {
    return this.term;
  }

  get commitIndex(): number {
    return this.log.committed;
  }

  get lastIndex(): number {
    return this.log.lastIndex();
  }

  get appliedIndex(): number {
    return this.log.applied;
  }

  /** The term of the entry at `index` if this node still has it (for checkers and tests). */
  termAt(index: number): number | undefined {
    return this.log.term(index);
  }

  entryAt(index: number): Entry | undefined {
    return this.log.entry(index);
  }

  // ---------------------------------------------------------------- roles

  private becomeFollower(term: number, leaderId: NodeId | null): void {
    assert(term >= this.term, () => `term going back from ${this.term} to ${term}`);
    if (term > this.term) {
      this.term = term;
      this.vote = null;
    }
    this.role = 'follower';
    this.leaderId = leaderId;
    this.resetRoleState();
  }

  private becomePreCandidate(): void {
    assert(this.role !== 'leader', 'a leader cannot become a pre-candidate');
    // Neither the term nor the vote changes: a pre-vote that fails leaves no trace.
    this.role = 'preCandidate';
    this.leaderId = null;
    this.resetRoleState();
  }

  private becomeCandidate(): void {
    assert(this.role !== 'leader', 'a leader cannot become a candidate');
    this.term += 1;
    this.vote = this.id;
    this.role = 'candidate';
    this.leaderId = null;
    this.resetRoleState();
  }

  private becomeLeader(): void {
    assert(this.role === 'candidate', 'only a candidate becomes leader');
    this.role = 'leader';
    this.leaderId = this.id;
    this.resetRoleState();
    this.syncProgressWithConfig();
    const self = this.progress.get(this.id);
    if (self !== undefined) {
      self.match = this.log.stableIndex;
      self.becomeReplicate();
    }
    // The no-op lets the leader commit entries of earlier terms (Figure 8 of the paper).
    this.appendEntry('normal', new Uint8Array(0));
  }

  private resetRoleState(): void {
    this.electionElapsed = 0;
    this.heartbeatElapsed = 0;
    this.randomizedElectionTicks = this.options.electionTicks + this.options.random.nextInt(this.options.electionTicks);
    this.votes.clear();
    this.progress.clear();
    this.leadTransferee = null;
    this.pendingReads = [];
    this.deferredReads = [];
    this.broadcastPending = false;
    this.quiet = false;
  }

  private startElection(kind: 'preElection' | 'election', leaderTransfer: boolean): void {
    if (kind === 'preElection') this.becomePreCandidate();
    else this.becomeCandidate();
    const voteTerm = kind === 'preElection' ? this.term + 1 : this.term;
    if (this.poll(this.id, true) === 'won') {
      this.onElectionWon(kind);
      return;
    }
    for (const voter of this.log.latestConfig().voters) {
      if (voter === this.id) continue;
      const request = { from: this.id, to: voter, term: voteTerm, lastLogIndex: this.log.lastIndex(), lastLogTerm: this.log.lastTerm() };
      if (kind === 'preElection') this.send({ type: 'preVote', ...request });
      else this.send({ type: 'vote', ...request, leaderTransfer });
    }
  }

  private onElectionWon(kind: 'preElection' | 'election'): void {
    if (kind === 'preElection') {
      this.startElection('election', false);
    } else {
      this.becomeLeader();
    }
  }

  private poll(from: NodeId, granted: boolean): 'won' | 'lost' | 'pending' {
    if (!this.votes.has(from)) this.votes.set(from, granted);
    const config = this.log.latestConfig();
    let granting = 0;
    let rejecting = 0;
    for (const voter of config.voters) {
      const vote = this.votes.get(voter);
      if (vote === true) granting++;
      else if (vote === false) rejecting++;
    }
    const quorum = quorumSize(config);
    if (granting >= quorum) return 'won';
    if (rejecting > config.voters.length - quorum) return 'lost';
    return 'pending';
  }

  /** A voter that may campaign: one recovering from damaged storage may not (see RecoveryMark). */
  private promotable(): boolean {
    if (this.recoveringTerm !== null && !this.options.testOnlyBugs.has('recoveringVotes')) return false;
    return isVoter(this.log.latestConfig(), this.id);
  }

  /**
   * Ends recovery once the durable log (not a snapshot still being persisted) holds an entry
   * of the mark's term or later: terms never decrease along a log, so the last durable one
   * is the highest.
   */
  private maybeEndRecovery(): void {
    if (this.recoveringTerm === null || this.log.pendingSnapshot !== null) return;
    const durableTerm = this.log.term(this.log.stableIndex) ?? 0;
    if (durableTerm >= this.recoveringTerm) this.recoveringTerm = null;
  }

  // ---------------------------------------------------------------- ticks

  private tickElection(): void {
    this.electionElapsed++;
    if (this.electionElapsed < this.randomizedElectionTicks) return;
    if (this.recoveringTerm !== null && !this.options.testOnlyBugs.has('recoveringVotes')) {
      this.electionElapsed = 0;
      this.callForLeader();
      return;
    }
    if (!this.promotable()) return;
    this.electionElapsed = 0;
    this.startElection(this.options.preVote ? 'preElection' : 'election', false);
  }

  /**
   * A recovering replica that hears from no leader cannot campaign (see RecoveryMark), and a
   * quiet leader would never send it anything: it asks every other member to wake (a
   * heartbeat answer with `wake`), in its own term. A leader of an older term (one that may
   * count this replica's lost acknowledgements) steps down on it; the others move to this
   * term and elect a leader of it, which is what ends the recovery.
   */
  private callForLeader(): void {
    for (const member of members(this.log.latestConfig())) {
      if (member === this.id) continue;
      this.send({ type: 'heartbeatResp', from: this.id, to: member, term: this.term, readSeq: 0, wake: true });
    }
  }

  private tickHeartbeat(): void {
    this.heartbeatElapsed++;
    this.electionElapsed++;
    if (this.electionElapsed >= this.options.electionTicks) {
      this.electionElapsed = 0;
      if (this.options.checkQuorum && !this.checkQuorumActive()) {
        this.becomeFollower(this.term, null);
        return;
      }
      if (this.leadTransferee !== null) {
        // A transfer that did not finish is given up. A learner that caught up meanwhile was
        // not promoted (see maybePromoteLearner), and an idle one sends nothing that would
        // check again: check now, or the group goes quiet with it a learner for good.
        this.leadTransferee = null;
        this.promoteCaughtUpLearners();
      }
    }
    this.retryStalledSnapshots();
    if (this.heartbeatElapsed >= this.options.heartbeatTicks) {
      this.heartbeatElapsed = 0;
      const quiesce = this.options.quiesce && this.canQuiesce();
      this.broadcastHeartbeat(quiesce);
      if (quiesce) this.quiet = true;
    }
  }

  /**
   * Whether this leader may go quiet (see isQuiet): nothing pending (no transfer, no read,
   * every entry durable here and committed in this term), a majority heard from in this
   * check-quorum window, every follower heard from caught up with nothing in flight, and no
   * snapshot being sent. A follower not heard from (down, partitioned) does not keep the
   * group awake: it is caught up by appends once it answers again (a restarted replica is
   * never quiet, and its first message wakes the leader). A snapshot transfer does, heard
   * from or not: only the leader's retry (retryStalledSnapshots) recovers a lost answer to
   * its last chunk, and a replica that installed it may never speak again by itself (a
   * learner never campaigns).
   */
  private canQuiesce(): boolean {
    if (this.leadTransferee !== null || this.pendingReads.length > 0 || this.deferredReads.length > 0) return false;
    for (const progress of this.progress.values()) if (progress.state === 'snapshot') return false;
    const last = this.log.lastIndex();
    if (this.log.committed !== last || this.log.stableIndex !== last || this.log.pendingSnapshot !== null || !this.committedInCurrentTerm()) return false;
    const config = this.log.latestConfig();
    let heard = 0;
    for (const voter of config.voters) if (voter === this.id || this.progress.get(voter)?.recentActive === true) heard++;
    if (heard < quorumSize(config)) return false;
    for (const [id, progress] of this.progress) {
      if (id === this.id || !progress.recentActive) continue;
      if (progress.state !== 'replicate' || progress.match !== last || progress.inflightCount() > 0) return false;
    }
    return true;
  }

  /** Check-quorum: a leader that has not heard from a majority within an election timeout steps down. */
  private checkQuorumActive(): boolean {
    const config = this.log.latestConfig();
    let active = 0;
    for (const voter of config.voters) {
      const progress = this.progress.get(voter);
      if (voter === this.id || progress?.recentActive === true) active++;
    }
    for (const [id, progress] of this.progress) if (id !== this.id) progress.recentActive = false;
    return active >= quorumSize(config);
  }

  private retryStalledSnapshots(): void {
    for (const [id, progress] of this.progress) {
      if (progress.state !== 'snapshot') continue;
      progress.snapshotStallTicks++;
      if (progress.snapshotStallTicks >= this.options.electionTicks) {
        progress.snapshotStallTicks = 0;
        // Start over with the newest snapshot when one was taken since: the follower gets
        // less to catch up on, and a driver that sends only the newest snapshot's data (one
        // whose machine snapshots references, see replaceSnapshotData) never sees the old one.
        const newest = this.log.snapshot;
        if (newest !== null && progress.snapshot !== null && newest.meta.index > progress.snapshot.meta.index) progress.becomeSnapshot(newest);
        this.sendSnapshotChunk(id, progress);
      }
    }
  }

  // ---------------------------------------------------------------- step by term

  /** Returns false if the message must be dropped. */
  private stepHigherTerm(message: Message): boolean {
    if (message.type === 'preVote' || message.type === 'vote') {
      const forced = message.type === 'vote' && message.leaderTransfer;
      const inLease = this.options.checkQuorum && this.leaderId !== null && this.electionElapsed < this.options.electionTicks;
      // A node that heard from a leader recently ignores elections: a partitioned node
      // that rejoins cannot depose a healthy leader.
      if (!forced && inLease) return false;
    }
    if (message.type === 'preVote') return true; // a pre-vote never changes our term
    if (message.type === 'preVoteResp' && !message.reject) return true; // counted in the pre-candidate's poll
    const fromLeader = message.type === 'append' || message.type === 'heartbeat' || message.type === 'snapshot';
    this.becomeFollower(message.term, fromLeader ? message.from : null);
    return true;
  }

  private stepLowerTerm(message: Message): void {
    switch (message.type) {
      case 'append':
      case 'heartbeat':
      case 'snapshot':
        // Tell a stale leader about the newer term so it steps down; with check-quorum
        // and pre-vote it would otherwise never learn of it.
        this.send({ type: 'appendResp', from: this.id, to: message.from, term: this.term, reject: true, index: 0, hintIndex: 0, hintTerm: 0 });
        return;
      case 'preVote':
        this.send({ type: 'preVoteResp', from: this.id, to: message.from, term: this.term, reject: true });
        return;
      default:
        return; // stale responses and requests are dropped
    }
  }

  private handleVoteRequest(message: PreVoteMessage | VoteMessage): void {
    // A replica recovering from damaged storage may lack entries committed with its own
    // acknowledgement: its vote could elect a leader without them (see RecoveryMark).
    const intact = this.recoveringTerm === null || this.options.testOnlyBugs.has('recoveringVotes');
    const canVote =
      intact &&
      (this.vote === message.from ||
        (this.vote === null && this.leaderId === null) ||
        (message.type === 'preVote' && message.term > this.term));
    const logOk =
      this.options.testOnlyBugs.has('voteWithoutLogCheck') || this.log.isUpToDate(message.lastLogIndex, message.lastLogTerm);
    const responseType = message.type === 'preVote' ? 'preVoteResp' : 'voteResp';
    if (canVote && logOk) {
      this.send({ type: responseType, from: this.id, to: message.from, term: message.term, reject: false });
      if (message.type === 'vote') {
        this.electionElapsed = 0;
        this.vote = message.from;
      }
    } else {
      this.send({ type: responseType, from: this.id, to: message.from, term: this.term, reject: true });
    }
  }

  // ---------------------------------------------------------------- step by role

  private stepFollower(message: Message): void {
    switch (message.type) {
      case 'append':
        this.onLeaderContact(message.from);
        this.handleAppend(message);
        return;
      case 'heartbeat':
        this.onLeaderContact(message.from);
        this.handleHeartbeat(message);
        return;
      case 'snapshot':
        this.onLeaderContact(message.from);
        this.handleSnapshotChunk(message);
        return;
      case 'timeoutNow':
        // A transfer target campaigns at once, skipping pre-vote, and voters ignore their lease.
        if (this.promotable()) this.startElection('election', true);
        return;
      default:
        return; // responses to requests of an earlier role
    }
  }

  private onLeaderContact(leaderId: NodeId): void {
    this.electionElapsed = 0;
    this.leaderId = leaderId;
  }

  private stepCandidate(message: Message): void {
    switch (message.type) {
      case 'append':
      case 'heartbeat':
      case 'snapshot':
        // Another node won this term.
        this.becomeFollower(this.term, message.from);
        this.stepFollower(message);
        return;
      case 'preVoteResp':
      case 'voteResp': {
        const expected = this.role === 'preCandidate' ? 'preVoteResp' : 'voteResp';
        if (message.type !== expected) return;
        const result = this.poll(message.from, !message.reject);
        if (result === 'won') this.onElectionWon(this.role === 'preCandidate' ? 'preElection' : 'election');
        else if (result === 'lost') this.becomeFollower(this.term, null);
        return;
      }
      default:
        return;
    }
  }

  private stepLeader(message: Message): void {
    const progress = this.progress.get(message.from);
    if (progress === undefined) return; // not (or no longer) a member
    progress.recentActive = true;
    switch (message.type) {
      case 'appendResp':
        if (message.reject) this.handleAppendRejected(message, progress);
        else this.handleAppendAccepted(message, progress);
        return;
      case 'heartbeatResp':
        this.handleHeartbeatResponse(message, progress);
        return;
      case 'snapshotResp':
        this.handleSnapshotResponse(message, progress);
        return;
      case 'append':
      case 'heartbeat':
      case 'snapshot':
        assert(false, () => `two leaders in term ${this.term}: ${this.id} and ${message.from}`);
        return;
      default:
        return;
    }
  }

  // ---------------------------------------------------------------- follower handlers

  private handleAppend(message: AppendMessage): void {
    if (message.prevLogIndex < this.log.committed) {
      this.sendAppendResponse(message.from, this.log.committed);
      return;
    }
    const lastNewIndex = this.log.maybeAppend(message.prevLogIndex, message.prevLogTerm, message.entries);
    if (lastNewIndex !== null) {
      this.log.commitTo(Math.min(message.commit, lastNewIndex));
      this.sendAppendResponse(message.from, lastNewIndex);
      return;
    }
    // Fast back-tracking: point the leader at the last index whose term could match.
    const hintIndex = this.log.findConflictByTerm(Math.min(message.prevLogIndex, this.log.lastIndex()), message.prevLogTerm);
    this.send({
      type: 'appendResp',
      from: this.id,
      to: message.from,
      term: this.term,
      reject: true,
      index: message.prevLogIndex,
      hintIndex,
      hintTerm: this.log.term(hintIndex) ?? 0,
    });
  }

  private sendAppendResponse(to: NodeId, index: number): void {
    this.send({ type: 'appendResp', from: this.id, to, term: this.term, reject: false, index, hintIndex: 0, hintTerm: 0 });
  }

  private handleHeartbeat(message: HeartbeatMessage): void {
    // The leader sends min(match, commit), so everything up to it matches the leader's log.
    this.log.commitTo(Math.min(message.commit, this.log.lastIndex()));
    // Quiet only holding all the leader committed: a follower missing some (or not letting
    // its groups go quiet) answers the quiesce heartbeat with `wake`, which wakes the leader
    // to send them.
    if (message.quiesce && this.options.quiesce && this.log.committed >= message.commit) this.quiet = true;
    const wake = message.quiesce && !this.quiet;
    this.send({ type: 'heartbeatResp', from: this.id, to: message.from, term: this.term, readSeq: message.readSeq, wake });
  }

  private handleSnapshotChunk(message: SnapshotChunkMessage): void {
    // One held for the driver is being prepared: the leader sends again once it stalls.
    if (this.heldSnapshot !== null) return;
    if (message.meta.index <= this.log.committed) {
      this.incomingSnapshot = null;
      this.sendAppendResponse(message.from, this.log.committed);
      return;
    }
    const incoming = this.incomingSnapshotFor(message);
    if (incoming === null || message.offset !== incoming.received) {
      const nextOffset = incoming?.received ?? 0;
      this.send({
        type: 'snapshotResp',
        from: this.id,
        to: message.from,
        term: this.term,
        snapshotIndex: message.meta.index,
        nextOffset,
        reject: message.offset > nextOffset,
      });
      return;
    }
    incoming.chunks.push(message.chunk);
    incoming.received += message.chunk.byteLength;
    if (!message.done) {
      this.send({ type: 'snapshotResp', from: this.id, to: message.from, term: this.term, snapshotIndex: message.meta.index, nextOffset: incoming.received, reject: false });
      return;
    }
    this.incomingSnapshot = null;
    if (incoming.received !== message.totalBytes) {
      // Chunks that do not add up to the size they announce: start the transfer over.
      this.send({ type: 'snapshotResp', from: this.id, to: message.from, term: this.term, snapshotIndex: message.meta.index, nextOffset: 0, reject: true });
      return;
    }
    const snapshot: Snapshot = { meta: message.meta, data: concatChunks(incoming.chunks, incoming.received) };
    if (this.options.holdReceivedSnapshots && !this.log.matchTerm(snapshot.meta.index, snapshot.meta.term)) {
      this.heldSnapshot = { snapshot, leaderId: message.from, term: this.term };
      return;
    }
    this.installSnapshot(snapshot, message.from);
  }

  /** The snapshot received and held for the driver to prepare, or null (see RaftOptions.holdReceivedSnapshots). */
  get receivedSnapshot(): Snapshot | null {
    return this.heldSnapshot?.snapshot ?? null;
  }

  /**
   * Installs the held snapshot at `index` with `data` (the same state, as the driver encoded
   * it for this node), as if its last chunk arrived now. Returns false, installing nothing
   * and dropping it, when none is held at `index` or this replica is no longer the follower
   * of the leader that sent it in that term (a newer leader sends what it has); the held one
   * is dropped then too.
   */
  installReceivedSnapshot(index: number, data: Uint8Array): boolean {
    const held = this.heldSnapshot;
    if (held === null || held.snapshot.meta.index !== index) return false;
    this.heldSnapshot = null;
    if (this.role !== 'follower' || this.term !== held.term || this.leaderId !== held.leaderId) return false;
    if (index <= this.log.committed) {
      this.sendAppendResponse(held.leaderId, this.log.committed);
      return false;
    }
    this.installSnapshot({ meta: held.snapshot.meta, data }, held.leaderId);
    return true;
  }

  /** Drops the held snapshot at `index` (the driver could not prepare it); the leader sends one again. */
  dropReceivedSnapshot(index: number): void {
    if (this.heldSnapshot?.snapshot.meta.index === index) this.heldSnapshot = null;
  }

  /**
   * The transfer `message` continues, or a new one when it is a first chunk: a first chunk
   * always starts over, so that a transfer whose data the leader replaced (the same index,
   * other bytes) never mixes the two. A later chunk of another transfer gets null.
   */
  private incomingSnapshotFor(message: SnapshotChunkMessage): IncomingSnapshot | null {
    const current = this.incomingSnapshot;
    if (message.offset !== 0) {
      const matches =
        current !== null &&
        current.leaderId === message.from &&
        current.term === message.term &&
        current.index === message.meta.index &&
        current.totalBytes === message.totalBytes;
      return matches ? current : null;
    }
    this.incomingSnapshot = { leaderId: message.from, term: message.term, index: message.meta.index, totalBytes: message.totalBytes, chunks: [], received: 0 };
    return this.incomingSnapshot;
  }

  private installSnapshot(snapshot: Snapshot, leaderId: NodeId): void {
    if (this.log.matchTerm(snapshot.meta.index, snapshot.meta.term)) {
      // We already have the snapshot's last entry, so our log is a superset: keep it.
      this.log.commitTo(snapshot.meta.index);
      this.sendAppendResponse(leaderId, this.log.committed);
      return;
    }
    this.log.restore(snapshot);
    this.sendAppendResponse(leaderId, snapshot.meta.index);
  }

  // ---------------------------------------------------------------- leader handlers

  private handleAppendRejected(message: AppendResponse, progress: Progress): void {
    if (message.index === 0 && message.hintIndex === 0) return; // a term notice, handled by the term check
    const probeFrom = message.hintTerm > 0 ? this.log.findConflictByTerm(message.hintIndex, message.hintTerm) : message.hintIndex;
    if (!progress.maybeDecrTo(message.index, probeFrom)) return;
    if (progress.state === 'replicate') progress.becomeProbe();
    this.maybeSendAppend(message.from, true);
  }

  private handleAppendAccepted(message: AppendResponse, progress: Progress): void {
    const wasPaused = progress.isPaused();
    if (!progress.maybeUpdate(message.index)) {
      if (wasPaused && !progress.isPaused()) this.sendAppendsWhileWindowOpen(message.from);
      return;
    }
    if (progress.state === 'probe') {
      progress.becomeReplicate();
    } else if (progress.state === 'snapshot' && progress.match + 1 >= this.log.firstIndex()) {
      progress.becomeProbe();
      progress.becomeReplicate();
    } else if (progress.state === 'snapshot' && progress.match >= (progress.snapshot?.meta.index ?? 0)) {
      // The follower has the snapshot we sent, but we compacted past it meanwhile: the
      // probe below finds the entries gone and starts over with the newest snapshot.
      progress.becomeProbe();
    }
    if (this.maybeCommit()) this.broadcastPending = true;
    this.sendAppendsWhileWindowOpen(message.from);
    if (this.leadTransferee === message.from && progress.match === this.log.lastIndex()) this.sendTimeoutNow(message.from);
    this.maybePromoteLearner(message.from, progress);
  }

  private handleHeartbeatResponse(message: HeartbeatResponse, progress: Progress): void {
    progress.probeSent = false;
    if (progress.match < this.log.lastIndex()) {
      // A full window may hold appends that were all lost, and only acks reopen it: send an
      // empty append (not counted in the window) whose ack or rejection unblocks the follower.
      const prevLogTerm = this.log.term(progress.next - 1);
      if (progress.state === 'replicate' && progress.isPaused() && prevLogTerm !== undefined) {
        this.send({ type: 'append', from: this.id, to: message.from, term: this.term, prevLogIndex: progress.next - 1, prevLogTerm, entries: [], commit: this.log.committed });
      } else {
        // (With the window's entries compacted away, probing falls back to a snapshot.)
        if (progress.state === 'replicate' && progress.isPaused()) progress.becomeProbe();
        this.maybeSendAppend(message.from, true);
      }
    }
    if (message.readSeq > 0) this.acknowledgeReads(message.from, message.readSeq);
  }

  private handleSnapshotResponse(message: SnapshotChunkResponse, progress: Progress): void {
    const snapshot = progress.snapshot;
    if (progress.state !== 'snapshot' || snapshot === null || snapshot.meta.index !== message.snapshotIndex) return;
    // A duplicated or reordered ack must not trigger another send: each would keep one
    // more copy of every following chunk in flight until the transfer ends.
    if (!message.reject && message.nextOffset <= progress.snapshotAckedOffset) return;
    progress.snapshotAckedOffset = message.nextOffset;
    progress.snapshotStallTicks = 0;
    // Starting over: with the newest snapshot when one was taken since (see retryStalledSnapshots).
    const newest = this.log.snapshot;
    if (message.nextOffset === 0 && newest !== null && newest.meta.index > snapshot.meta.index) progress.becomeSnapshot(newest);
    if (message.nextOffset < snapshot.data.byteLength || message.reject) this.sendSnapshotChunk(message.from, progress);
  }

  private maybePromoteLearner(id: NodeId, progress: Progress): void {
    if (!this.options.promoteLearners || !this.log.latestConfig().learners.includes(id)) return;
    if (progress.match < this.log.committed || this.configChangePending() || !this.committedInCurrentTerm()) return;
    if (this.leadTransferee !== null) return;
    this.proposeConfChange({ type: 'promote', nodeId: id });
  }

  private readonly matchOf = (id: NodeId): number => this.progress.get(id)?.match ?? 0;

  /** Advances the commit index to what a quorum of voters has durably; only entries of this term count. */
  private maybeCommit(): boolean {
    const config = this.log.latestConfig();
    const index = quorumMatchIndex(config, this.matchOf);
    if (index <= this.log.committed) return false;
    const countsByReplica = this.log.term(index) === this.term || this.options.testOnlyBugs.has('commitPreviousTermByCount');
    if (!countsByReplica) return false;
    this.log.commitTo(index);
    this.onCommitAdvanced();
    return true;
  }

  private onCommitAdvanced(): void {
    if (this.committedInCurrentTerm() && this.deferredReads.length > 0) {
      const deferred = this.deferredReads;
      this.deferredReads = [];
      for (const requestId of deferred) this.startRead(requestId);
    }
    // A leader removed from the configuration steps down once the removal is committed.
    if (!isVoter(this.log.latestConfig(), this.id) && this.log.committed >= this.log.latestConfigIndex()) {
      this.becomeFollower(this.term, null);
      return;
    }
    // A learner that caught up before the commit index (or its own addLearner entry) was
    // committed sends no further ack when idle: re-check promotion now.
    this.promoteCaughtUpLearners();
  }

  private promoteCaughtUpLearners(): void {
    for (const learner of this.log.latestConfig().learners) {
      const progress = this.progress.get(learner);
      if (progress !== undefined) this.maybePromoteLearner(learner, progress);
    }
  }

  /** The leader's own entries count toward commit only once durable here (after advance). */
  private onLeaderDurable(): void {
    const self = this.progress.get(this.id);
    if (self === undefined) return;
    if (self.maybeUpdate(this.log.stableIndex) && this.maybeCommit()) this.broadcastPending = true;
  }

  // ---------------------------------------------------------------- sending

  private send(message: Message): void {
    assert(message.to !== this.id, 'sending a message to self');
    this.messages.push(message);
  }

  private appendEntry(type: Entry['type'], data: Uint8Array): Entry {
    const entry: Entry = { index: this.log.lastIndex() + 1, term: this.term, type, data };
    this.log.append([entry]);
    if (type === 'config') this.syncProgressWithConfig();
    this.broadcastPending = true;
    return entry;
  }

  /** Appends are sent once per Ready, so all proposals of one event-loop turn share a message. */
  private flushBroadcast(): void {
    if (!this.broadcastPending) return;
    this.broadcastPending = false;
    if (this.role !== 'leader') return;
    for (const [id, progress] of this.progress) {
      if (id === this.id) continue;
      this.sendAppendsWhileWindowOpen(id);
      // No entries left to carry the new commit index: an empty append tells it now.
      if (this.options.announceCommit && progress.commitSent < this.log.committed) this.maybeSendAppend(id, true);
    }
  }

  private sendAppendsWhileWindowOpen(to: NodeId): void {
    while (this.maybeSendAppend(to, false)) {
      // keep filling the in-flight window
    }
  }

  /** Sends the next batch of entries to `to` unless its progress is paused. Returns whether it sent. */
  private maybeSendAppend(to: NodeId, sendIfEmpty: boolean): boolean {
    const progress = this.progress.get(to);
    if (progress === undefined || progress.isPaused()) return false;
    const prevLogIndex = progress.next - 1;
    const prevLogTerm = this.log.term(prevLogIndex);
    if (prevLogTerm === undefined) {
      this.sendSnapshot(to, progress);
      return false;
    }
    const lastIndex = this.log.lastIndex();
    const entries =
      progress.next <= lastIndex
        ? this.log.slice(progress.next, lastIndex + 1, this.options.appendEntriesMax, this.options.appendBytesMax)
        : [];
    if (entries.length === 0 && !sendIfEmpty) return false;
    this.send({ type: 'append', from: this.id, to, term: this.term, prevLogIndex, prevLogTerm, entries, commit: this.log.committed });
    progress.commitSent = this.log.committed;
    progress.sentAppend(prevLogIndex + entries.length, entries.length);
    return entries.length > 0;
  }

  private sendSnapshot(to: NodeId, progress: Progress): void {
    const snapshot = this.log.snapshot;
    assert(snapshot !== null, () => `follower ${to} needs compacted entries but there is no snapshot`);
    progress.becomeSnapshot(snapshot);
    this.sendSnapshotChunk(to, progress);
  }

  private sendSnapshotChunk(to: NodeId, progress: Progress): void {
    const snapshot = progress.snapshot;
    assert(snapshot !== null, 'snapshot state without a snapshot');
    const offset = progress.snapshotAckedOffset;
    const end = Math.min(offset + this.options.snapshotChunkBytes, snapshot.data.byteLength);
    this.send({
      type: 'snapshot',
      from: this.id,
      to,
      term: this.term,
      meta: snapshot.meta,
      offset,
      totalBytes: snapshot.data.byteLength,
      chunk: snapshot.data.subarray(offset, end),
      done: end === snapshot.data.byteLength,
    });
    progress.snapshotSentOffset = end;
  }

  /** `quiesce`: the group goes quiet; a follower behind the commit index is not asked to. */
  private broadcastHeartbeat(quiesce: boolean): void {
    const readSeq = this.pendingReads[this.pendingReads.length - 1]?.seq ?? 0;
    for (const [id, progress] of this.progress) {
      if (id === this.id) continue;
      const commit = Math.min(progress.match, this.log.committed);
      this.send({ type: 'heartbeat', from: this.id, to: id, term: this.term, commit, readSeq, quiesce: quiesce && commit === this.log.committed });
    }
  }

  private sendTimeoutNow(to: NodeId): void {
    this.send({ type: 'timeoutNow', from: this.id, to, term: this.term });
  }

  // ---------------------------------------------------------------- reads

  private startRead(requestId: string): void {
    const read: PendingRead = { requestId, index: this.log.committed, seq: ++this.readSeq, acks: new Set([this.id]) };
    this.pendingReads.push(read);
    if (this.hasReadQuorum(read)) {
      this.releaseReadsUpTo(read.seq);
      return;
    }
    this.broadcastHeartbeat(false);
  }

  private acknowledgeReads(from: NodeId, seq: number): void {
    let releasable = 0;
    for (const read of this.pendingReads) {
      if (read.seq > seq) break;
      read.acks.add(from);
      if (this.hasReadQuorum(read)) releasable = read.seq;
    }
    if (releasable > 0) this.releaseReadsUpTo(releasable);
  }

  private hasReadQuorum(read: PendingRead): boolean {
    if (this.options.testOnlyBugs.has('readIndexWithoutQuorum')) return true;
    const config = this.log.latestConfig();
    return config.voters.filter((id) => read.acks.has(id)).length >= quorumSize(config);
  }

  private releaseReadsUpTo(seq: number): void {
    while (this.pendingReads.length > 0 && (this.pendingReads[0]?.seq ?? Infinity) <= seq) {
      const read = this.pendingReads.shift();
      if (read !== undefined) this.readStates.push({ requestId: read.requestId, index: read.index });
    }
  }

  // ---------------------------------------------------------------- membership

  private configChangePending(): boolean {
    return this.log.latestConfigIndex() > this.log.committed;
  }

  private committedInCurrentTerm(): boolean {
    return this.log.term(this.log.committed) === this.term;
  }

  private checkCanPropose(): ProposeResult | null {
    if (this.role !== 'leader') return { ok: false, reason: 'notLeader', leaderId: this.leaderId };
    if (this.leadTransferee !== null) return { ok: false, reason: 'leadershipTransfer', leaderId: this.leaderId };
    return null;
  }

  /** Keeps one Progress per member of the latest configuration (leader only). */
  private syncProgressWithConfig(): void {
    const config = this.log.latestConfig();
    for (const id of members(config)) {
      if (!this.progress.has(id)) {
        const progress = new Progress(this.log.lastIndex() + 1, this.options.inflightAppendsMax);
        progress.recentActive = true;
        this.progress.set(id, progress);
      }
    }
    for (const id of [...this.progress.keys()]) {
      if (!isMember(config, id)) this.progress.delete(id);
    }
    if (this.leadTransferee !== null && !isVoter(config, this.leadTransferee)) this.leadTransferee = null;
  }

  // ---------------------------------------------------------------- state

  private hardState(): HardState {
    return { term: this.term, vote: this.vote, commit: this.log.committed };
  }

  private softState(): SoftState {
    return { leaderId: this.leaderId, role: this.role };
  }

  private checkInvariants(): void {
    const log = this.log;
    assert(log.applied <= log.committed, () => `applied ${log.applied} > commit ${log.committed}`);
    assert(log.committed <= log.lastIndex(), () => `commit ${log.committed} > last index ${log.lastIndex()}`);
    assert(log.stableIndex <= log.lastIndex(), 'stable index beyond the log');
    assert(this.role !== 'leader' || this.leaderId === this.id, 'a leader must know itself as leader');
    assert(this.role !== 'candidate' || this.vote === this.id, 'a candidate votes for itself');
  }
}

/**
 * The messages a quiet replica takes without waking: the quiesce heartbeat, and heartbeat
 * answers that do not ask to `wake` (a quiet follower's, or one to a heartbeat sent before
 * the leader went quiet: on a loaded node those arrive after it, and waking on them would
 * start heartbeats that draw more late answers, keeping every group awake for good).
 */
function keepsQuiet(message: Message): boolean {
  return (message.type === 'heartbeat' && message.quiesce) || (message.type === 'heartbeatResp' && !message.wake);
}

function sameHardState(a: HardState, b: HardState): boolean {
  return a.term === b.term && a.vote === b.vote && a.commit === b.commit;
}

function sameSoftState(a: SoftState, b: SoftState): boolean {
  return a.leaderId === b.leaderId && a.role === b.role;
}

function concatChunks(chunks: readonly Uint8Array[], totalBytes: number): Uint8Array {
  const data = new Uint8Array(totalBytes);
  let offset = 0;
  for (const chunk of chunks) {
    data.set(chunk, offset);
    offset += chunk.byteLength;
  }
  return data;
}

function stripUndefined<T extends object>(value: T): Partial<T> {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as Partial<T>;
}
