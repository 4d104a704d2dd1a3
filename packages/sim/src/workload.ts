import type { NodeId, Random } from '@quorumq/raft';
import { SafetyChecker, SafetyViolation } from './checker.js';
import { encodeProposal } from './machine.js';
import type { Scheduler } from './scheduler.js';
import type { GroupReplica } from './sim-node.js';

const PROPOSAL_EVERY_MS = 8;
const PROPOSALS_IN_FLIGHT_MAX = 32;
const RETRY_CHECK_EVERY_MS = 50;
const RETRY_AFTER_MS = 1000;
const READ_EVERY_MS = 40;

interface Submission {
  submittedAt: number;
  term: number;
  leader: NodeId | null;
}

/**
 * The clients of one group, and what the checkers know about it. Clients keep a bounded
 * number of proposals in flight. A proposal is retried (to the current leader) when the
 * leader it went to lost its term, or after a timeout: a client never learns whether a lost
 * proposal was committed, so delivery is at least once.
 */
export class GroupWorkload {
  readonly checker = new SafetyChecker();
  readonly pending = new Map<string, Submission>();
  readonly acknowledged = new Set<string>();
  private readonly observedLeaders = new Set<string>();
  private nextProposal = 0;
  /** Reads in flight: what had been acknowledged when each was issued. */
  private readonly reads = new Map<string, readonly string[]>();
  private nextRead = 0;
  readsServed = 0;

  constructor(
    readonly groupId: string,
    private readonly scheduler: Scheduler,
    private readonly random: Random,
    /** The live replica of this group on a node, or null if the node is down or paused. */
    private readonly replicaOn: (node: NodeId) => GroupReplica | null,
    private readonly nodeIds: readonly NodeId[],
  ) {}

  start(untilMs: number): void {
    this.scheduleProposals(untilMs);
    this.scheduleRetries();
    this.scheduleReads(untilMs);
  }

  private scheduleProposals(untilMs: number): void {
    this.scheduler.after(PROPOSAL_EVERY_MS, `propose ${this.groupId}`, () => {
      if (this.scheduler.now >= untilMs) return;
      if (this.pending.size < PROPOSALS_IN_FLIGHT_MAX) {
        const proposalId = `${this.groupId}:p${this.nextProposal++}`;
        this.pending.set(proposalId, { submittedAt: -Infinity, term: -1, leader: null });
        this.submit(proposalId);
      }
      this.scheduleProposals(untilMs);
    });
  }

  private scheduleReads(untilMs: number): void {
    this.scheduler.after(READ_EVERY_MS, `read ${this.groupId}`, () => {
      if (this.scheduler.now >= untilMs) return;
      const leaders = this.leaders();
      if (leaders.length > 0) {
        const requestId = `${this.groupId}:r${this.nextRead++}`;
        const replica = this.replicaOn(leaders[this.random.nextInt(leaders.length)]!);
        if (replica !== null && replica.read(requestId)) this.reads.set(requestId, [...this.acknowledged]);
      }
      this.scheduleReads(untilMs);
    });
  }

  /**
   * Linearizability of reads: a read must see every proposal that was acknowledged before
   * the read was issued.
   */
  onRead(node: NodeId, requestId: string, applied: readonly string[]): void {
    const mustSee = this.reads.get(requestId);
    if (mustSee === undefined) return;
    this.reads.delete(requestId);
    this.readsServed++;
    const seen = new Set(applied);
    const missed = mustSee.find((proposalId) => !seen.has(proposalId));
    if (missed !== undefined) {
      throw new SafetyViolation('LinearizableRead', `read ${requestId} served by ${node} misses ${missed}, acknowledged before the read began`);
    }
  }

  private scheduleRetries(): void {
    this.scheduler.after(RETRY_CHECK_EVERY_MS, `retry ${this.groupId}`, () => {
      for (const [proposalId, submission] of this.pending) {
        const leader = submission.leader === null ? null : this.replicaOn(submission.leader);
        const stillLeading = leader !== null && leader.raft.currentRole === 'leader' && leader.raft.currentTerm === submission.term;
        if (!stillLeading || this.scheduler.now - submission.submittedAt >= RETRY_AFTER_MS) this.submit(proposalId);
      }
      this.scheduleRetries();
    });
  }

  /** One more proposal, submitted now and retried like the others until acknowledged. */
  proposeOnce(): void {
    const proposalId = `${this.groupId}:p${this.nextProposal++}`;
    this.pending.set(proposalId, { submittedAt: -Infinity, term: -1, leader: null });
    this.submit(proposalId);
  }

  leaders(): NodeId[] {
    return this.nodeIds.filter((id) => this.replicaOn(id)?.raft.currentRole === 'leader');
  }

  private submit(proposalId: string): void {
    const leaders = this.leaders();
    if (leaders.length === 0) return;
    const leader = leaders[this.random.nextInt(leaders.length)]!;
    const replica = this.replicaOn(leader);
    if (replica === null || !replica.propose(encodeProposal(proposalId))) return;
    this.pending.set(proposalId, { submittedAt: this.scheduler.now, term: replica.raft.currentTerm, leader });
  }

  onApplied(proposalId: string): void {
    this.acknowledged.add(proposalId);
    this.pending.delete(proposalId);
  }

  /** Election Safety and Leader Completeness, for every leader seen for the first time. */
  checkLeaders(): void {
    for (const id of this.nodeIds) {
      const replica = this.replicaOn(id);
      if (replica === null || replica.raft.currentRole !== 'leader') continue;
      const key = `${replica.raft.currentTerm}/${id}`;
      if (this.observedLeaders.has(key)) continue;
      this.observedLeaders.add(key);
      const status = replica.raft.status();
      this.checker.observeLeader(id, status.term);
      this.checker.checkLeaderCompleteness({ id, term: status.term, snapshotIndex: status.firstIndex - 1, termAt: (i) => replica.raft.termAt(i) });
    }
  }

  /**
   * One leader, nothing pending, no learner left to promote, and every member has applied
   * all of the leader's log.
   */
  hasConverged(): boolean {
    if (this.pending.size > 0) return false;
    const leaders = this.leaders();
    if (leaders.length !== 1) return false;
    const leader = this.replicaOn(leaders[0]!)!;
    const status = leader.raft.status();
    if (status.config.learners.length > 0) return false;
    return status.config.voters.every((id) => {
      const replica = this.replicaOn(id);
      return replica !== null && replica.machineIndex === status.commitIndex && replica.raft.lastIndex === status.commitIndex;
    });
  }

  /** One leader, nothing pending, and every member that runs has applied all of the leader's log (some may be down). */
  hasConvergedOnLive(): boolean {
    if (this.pending.size > 0) return false;
    const leaders = this.leaders();
    if (leaders.length !== 1) return false;
    const status = this.replicaOn(leaders[0]!)!.raft.status();
    return status.config.voters.every((id) => {
      const replica = this.replicaOn(id);
      return replica === null || (replica.machineIndex === status.commitIndex && replica.raft.lastIndex === status.commitIndex);
    });
  }

  /** The members of the group, as its leader (or, without one, any replica) sees them. */
  members(): readonly NodeId[] {
    const leader = this.leaders()[0];
    const source = leader === undefined ? null : this.replicaOn(leader);
    if (source === null) return this.nodeIds;
    const config = source.raft.status().config;
    return [...config.voters, ...config.learners];
  }

  describeState(): string {
    const states = this.nodeIds.map((id) => {
      const replica = this.replicaOn(id);
      if (replica === null) return `${id}:down`;
      const s = replica.raft.status();
      return `${id}:${s.role}/t${s.term}/c${s.commitIndex}/a${replica.machineIndex}/l${s.lastIndex}`;
    });
    return `${this.groupId} (${this.pending.size} pending) ${states.join(' ')}`;
  }

  /** Every acknowledged proposal is in the state machine of every member. */
  checkNothingAcknowledgedLost(): void {
    for (const id of this.members()) {
      const replica = this.replicaOn(id);
      if (replica === null) continue;
      const applied = new Set(replica.machine.ids());
      for (const proposalId of this.acknowledged) {
        if (!applied.has(proposalId)) {
          throw new SafetyViolation('AcknowledgedNotLost', `${id} lost acknowledged proposal ${proposalId} of group ${this.groupId}`);
        }
      }
    }
  }
}
