import { RaftInvariantError, createRandom } from '@quorumq/raft';
import type { Message, NodeId, PlantedBug, Random } from '@quorumq/raft';
import { SafetyChecker, SafetyViolation } from './checker.js';
import type { Property } from './checker.js';
import { CrashedProcess, FakeDisk } from './fake-disk.js';
import { encodeProposal } from './machine.js';
import { SimNetwork, chance, describe } from './network.js';
import type { NetworkFaults } from './network.js';
import { Scheduler } from './scheduler.js';
import { SimNode } from './sim-node.js';

/** Bugs that can be planted to prove the checkers catch them. */
export type SimBug = PlantedBug | 'ackBeforeFsync';
export const SIM_BUGS: readonly SimBug[] = ['commitPreviousTermByCount', 'forgetVoteOnRestart', 'voteWithoutLogCheck', 'ackBeforeFsync'];

export interface SimOptions {
  readonly seed: number;
  readonly bugs?: ReadonlySet<SimBug>;
  /** Simulated time with faults, then time allowed for the healed cluster to converge. */
  readonly faultPhaseMs?: number;
  readonly livenessPhaseMs?: number;
  readonly trace?: (line: string) => void;
}

export interface FaultCounts {
  dropped: number;
  duplicated: number;
  partitions: number;
  crashes: number;
  tornWrites: number;
  lostUnsyncedBytes: number;
  pauses: number;
}

export interface SimResult {
  readonly seed: number;
  readonly ok: boolean;
  readonly violation: { readonly property: Property; readonly message: string } | null;
  readonly traceHash: string;
  readonly events: number;
  readonly nodeCount: number;
  readonly faults: FaultCounts;
  readonly acknowledged: number;
  readonly committed: number;
  readonly checks: number;
  readonly simulatedMs: number;
}

interface FaultProfile {
  readonly network: NetworkFaults;
  readonly crashEveryMs: number;
  /** Probability that a crash hits the current leader rather than a random node. */
  readonly crashLeaderRate: number;
  readonly appendEntriesMax: number;
  readonly inflightAppendsMax: number;
  readonly partitionEveryMs: number;
  readonly tornWriteRate: number;
  readonly tickMs: ReadonlyMap<NodeId, number>;
  readonly pauseEveryMs: number;
}

const TICK_MS = 10;
const SETTLE_ROUNDS = 6;
const PROPOSAL_EVERY_MS = 8;
const PROPOSALS_IN_FLIGHT_MAX = 32;
const RETRY_CHECK_EVERY_MS = 50;
const RETRY_AFTER_MS = 1000;

/**
 * One seeded run: a 3- or 5-node cluster under random faults, then a healed liveness phase.
 * Every source of nondeterminism comes from the seed, so a run replays exactly.
 */
export class Simulation {
  private readonly random: Random;
  private readonly scheduler = new Scheduler();
  private readonly checker = new SafetyChecker();
  private readonly disk: FakeDisk;
  private readonly network: SimNetwork;
  private readonly nodes = new Map<NodeId, SimNode | 'down' | 'starting'>();
  private readonly ids: NodeId[];
  private readonly profile: FaultProfile;
  private readonly bugs: ReadonlySet<SimBug>;
  private readonly faults: FaultCounts = { dropped: 0, duplicated: 0, partitions: 0, crashes: 0, tornWrites: 0, lostUnsyncedBytes: 0, pauses: 0 };
  private readonly pending = new Map<string, { submittedAt: number; term: number; leader: NodeId | null }>();
  private readonly acknowledged = new Set<string>();
  private readonly pausedUntil = new Map<NodeId, number>();
  private nextProposal = 0;
  private failure: unknown = null;
  private healed = false;
  private hash = 0x811c9dc5;
  private hash2 = 0x01000193;
  private events = 0;
  private readonly observedLeaders = new Set<string>();

  constructor(private readonly options: SimOptions) {
    this.random = createRandom(options.seed);
    this.bugs = options.bugs ?? new Set();
    const nodeCount = this.random.nextInt(2) === 0 ? 3 : 5;
    this.ids = Array.from({ length: nodeCount }, (_, i) => `n${i + 1}`);
    this.profile = this.chooseProfile();
    this.disk = new FakeDisk(this.scheduler, this.random);
    this.network = new SimNetwork(this.scheduler, this.random, (message) => this.deliver(message), (line) => this.traceLine(line));
    this.network.faults = this.profile.network;
  }

  private chooseProfile(): FaultProfile {
    const pick = <T>(values: readonly T[]): T => values[this.random.nextInt(values.length)]!;
    const tickMs = new Map<NodeId, number>();
    // Clock skew: each node's ticks run at its own rate, within +-25 %.
    for (const id of this.ids) tickMs.set(id, TICK_MS - 2 + this.random.nextInt(5));
    return {
      network: {
        dropRate: pick([0, 0.01, 0.05, 0.15]),
        duplicateRate: pick([0, 0.02, 0.1]),
        latencyMs: 1 + this.random.nextInt(4),
        jitterMs: pick([0, 3, 10, 30]),
      },
      crashEveryMs: pick([120, 250, 600, 1500, 1_000_000]),
      crashLeaderRate: pick([0, 0.5, 0.9]),
      appendEntriesMax: pick([1, 3, 16]),
      inflightAppendsMax: pick([1, 4]),
      partitionEveryMs: pick([200, 500, 1200, 1_000_000]),
      tornWriteRate: pick([0, 0.5, 1]),
      tickMs,
      pauseEveryMs: pick([700, 2000, 1_000_000]),
    };
  }

  async run(): Promise<SimResult> {
    const faultPhaseMs = this.options.faultPhaseMs ?? 3000;
    const livenessPhaseMs = this.options.livenessPhaseMs ?? 4000;
    for (const id of this.ids) this.startNode(id);
    for (const id of this.ids) this.scheduleTick(id);
    this.scheduleClient(faultPhaseMs);
    this.scheduleFaults(faultPhaseMs);
    this.scheduler.at(faultPhaseMs, 'heal', () => this.heal());
    const deadline = faultPhaseMs + livenessPhaseMs;
    let converged = false;
    while (this.failure === null) {
      const event = this.scheduler.pop();
      if (event === undefined || event.time > deadline) break;
      this.events++;
      this.traceLine(`${event.time} ${event.label}`);
      event.run();
      await settle();
      if (this.failure === null) this.checkAfterStep();
      if (this.healed && this.failure === null && this.events % 16 === 0 && this.hasConverged()) {
        converged = true;
        break;
      }
    }
    if (this.failure === null && !converged) this.failure = this.livenessFailure(livenessPhaseMs);
    if (this.failure === null) this.checkNothingAcknowledgedLost();
    return this.result();
  }

  // ------------------------------------------------------------ nodes

  private startNode(id: NodeId): void {
    this.nodes.set(id, 'starting');
    const context = {
      checker: this.checker,
      send: (message: Message) => this.network.send(message),
      onApplied: (_node: NodeId, proposalId: string) => this.onApplied(proposalId),
      onFailure: (error: unknown) => this.fail(error),
      raftBugs: new Set([...this.bugs].filter((bug): bug is PlantedBug => bug !== 'ackBeforeFsync')),
      ackBeforeFsync: this.bugs.has('ackBeforeFsync'),
      voters: this.ids,
      snapshotInterval: 40,
      appendEntriesMax: this.profile.appendEntriesMax,
      inflightAppendsMax: this.profile.inflightAppendsMax,
      scheduleFlush: (flush: () => void) => this.scheduler.after(0, `walFlush ${id}`, () => {
        if (this.nodes.get(id) !== 'down') flush();
      }),
    };
    const nodeSeed = this.random.nextInt(0x7fffffff);
    SimNode.start(id, nodeSeed, this.disk.fsOf(id), this.disk.kvOf(id), context).then(
      (node) => {
        if (this.nodes.get(id) === 'starting') this.nodes.set(id, node);
        else node.stop();
      },
      (error: unknown) => this.fail(error),
    );
  }

  private live(id: NodeId): SimNode | null {
    const node = this.nodes.get(id);
    if (node === undefined || node === 'down' || node === 'starting') return null;
    if ((this.pausedUntil.get(id) ?? 0) > this.scheduler.now) return null;
    return node;
  }

  private crash(id: NodeId): void {
    const node = this.nodes.get(id);
    if (node === undefined || node === 'down') return;
    if (node !== 'starting') node.stop();
    this.nodes.set(id, 'down');
    const loss = this.disk.crash(id, this.profile.tornWriteRate);
    this.faults.crashes++;
    this.faults.lostUnsyncedBytes += loss.lostBytes;
    if (loss.torn) this.faults.tornWrites++;
    this.traceLine(`crash ${id} lost=${loss.lostBytes} torn=${loss.torn}`);
  }

  private restart(id: NodeId): void {
    if (this.nodes.get(id) !== 'down') return;
    this.traceLine(`restart ${id}`);
    this.startNode(id);
  }

  private deliver(message: Message): void {
    this.live(message.to)?.receive(message);
  }

  private scheduleTick(id: NodeId): void {
    const interval = this.profile.tickMs.get(id) ?? TICK_MS;
    this.scheduler.after(interval, `tick ${id}`, () => {
      this.live(id)?.tick();
      this.scheduleTick(id);
    });
  }

  // ------------------------------------------------------------ client

  /**
   * A client with a bounded number of proposals in flight. A proposal is retried (to the
   * current leader) when the leader it went to lost its term, or after a timeout: the
   * client never learns whether a lost proposal was committed, so retries are at least once.
   */
  private scheduleClient(faultPhaseMs: number): void {
    this.scheduler.after(PROPOSAL_EVERY_MS, 'propose', () => {
      if (this.scheduler.now >= faultPhaseMs) return;
      if (this.pending.size < PROPOSALS_IN_FLIGHT_MAX) {
        const proposalId = `p${this.nextProposal++}`;
        this.pending.set(proposalId, { submittedAt: -Infinity, term: -1, leader: null });
        this.submit(proposalId);
      }
      this.scheduleClient(faultPhaseMs);
    });
    const retry = (): void => {
      for (const [proposalId, submission] of this.pending) {
        const leader = submission.leader === null ? null : this.live(submission.leader);
        const stillLeading = leader !== null && leader.raft.currentRole === 'leader' && leader.raft.currentTerm === submission.term;
        if (!stillLeading || this.scheduler.now - submission.submittedAt >= RETRY_AFTER_MS) this.submit(proposalId);
      }
      this.scheduler.after(RETRY_CHECK_EVERY_MS, 'retry', retry);
    };
    this.scheduler.after(RETRY_CHECK_EVERY_MS, 'retry', retry);
  }

  private submit(proposalId: string): void {
    const leaders = this.ids.filter((id) => this.live(id)?.raft.currentRole === 'leader');
    if (leaders.length === 0) return;
    const leader = leaders[this.random.nextInt(leaders.length)]!;
    const node = this.live(leader);
    if (node === null || !node.propose(encodeProposal(proposalId))) return;
    this.pending.set(proposalId, { submittedAt: this.scheduler.now, term: node.raft.currentTerm, leader });
  }

  private onApplied(proposalId: string): void {
    this.acknowledged.add(proposalId);
    this.pending.delete(proposalId);
  }

  // ------------------------------------------------------------ faults

  private scheduleFaults(faultPhaseMs: number): void {
    const repeat = (everyMs: number, label: string, action: () => void): void => {
      const delay = Math.max(1, Math.floor(everyMs / 2) + this.random.nextInt(everyMs));
      if (this.scheduler.now + delay >= faultPhaseMs) return;
      this.scheduler.after(delay, label, () => {
        action();
        repeat(everyMs, label, action);
      });
    };
    repeat(this.profile.crashEveryMs, 'crash', () => this.crashRandomNode());
    repeat(this.profile.partitionEveryMs, 'partition', () => this.partitionRandomly());
    repeat(this.profile.pauseEveryMs, 'pause', () => this.pauseRandomNode());
  }

  private crashRandomNode(): void {
    const leader = this.ids.find((candidate) => this.live(candidate)?.raft.currentRole === 'leader');
    const id = leader !== undefined && chance(this.random, this.profile.crashLeaderRate) ? leader : this.ids[this.random.nextInt(this.ids.length)]!;
    this.crash(id);
    const downMs = 20 + this.random.nextInt(500);
    this.scheduler.after(downMs, `restart ${id}`, () => this.restart(id));
  }

  private partitionRandomly(): void {
    this.network.heal();
    const kind = this.random.nextInt(4);
    if (kind === 0) return; // heal
    this.faults.partitions++;
    const shuffled = this.ids.map((id) => ({ id, key: this.random.nextInt(1 << 30) })).sort((a, b) => a.key - b.key).map((x) => x.id);
    if (kind === 1) {
      // Symmetric split into a minority and a majority.
      const size = 1 + this.random.nextInt(Math.floor(this.ids.length / 2));
      const minority = new Set(shuffled.slice(0, size));
      for (const a of this.ids) for (const b of this.ids) if (minority.has(a) !== minority.has(b)) this.network.cut(a, b);
    } else if (kind === 2) {
      // Asymmetric: one node can send but not receive (or the reverse).
      const victim = shuffled[0]!;
      const inbound = this.random.nextInt(2) === 0;
      for (const other of this.ids) if (other !== victim) inbound ? this.network.cut(other, victim) : this.network.cut(victim, other);
    } else {
      // Random directed link cuts.
      for (const a of this.ids) for (const b of this.ids) if (a !== b && chance(this.random, 0.3)) this.network.cut(a, b);
    }
    this.traceLine(`partition ${this.network.describeCuts()}`);
  }

  private pauseRandomNode(): void {
    // A stalled process (GC pause, VM freeze): its clock and inbox stop, then resume.
    const id = this.ids[this.random.nextInt(this.ids.length)]!;
    this.pausedUntil.set(id, this.scheduler.now + 50 + this.random.nextInt(400));
    this.faults.pauses++;
  }

  private heal(): void {
    this.healed = true;
    this.network.heal();
    this.network.faults = { dropRate: 0, duplicateRate: 0, latencyMs: 1, jitterMs: 2 };
    this.pausedUntil.clear();
    for (const id of this.ids) this.restart(id);
    this.traceLine('heal');
  }

  // ------------------------------------------------------------ checks

  private checkAfterStep(): void {
    try {
      for (const id of this.ids) {
        const node = this.nodes.get(id);
        if (node === undefined || node === 'down' || node === 'starting') continue;
        if (node.raft.currentRole !== 'leader') continue;
        const key = `${node.raft.currentTerm}/${id}`;
        if (this.observedLeaders.has(key)) continue;
        this.observedLeaders.add(key);
        const status = node.raft.status();
        this.checker.observeLeader(id, status.term);
        this.checker.checkLeaderCompleteness({ id, term: status.term, snapshotIndex: status.firstIndex - 1, termAt: (i) => node.raft.termAt(i) });
      }
    } catch (error) {
      this.fail(error);
    }
  }

  private hasConverged(): boolean {
    if (this.pending.size > 0) return false;
    const nodes = this.ids.map((id) => this.live(id));
    const leaders = nodes.filter((node) => node?.raft.currentRole === 'leader');
    if (leaders.length !== 1 || nodes.some((node) => node === null)) return false;
    const commit = leaders[0]!.raft.commitIndex;
    return nodes.every((node) => node!.machineIndex === commit && node!.raft.lastIndex === commit);
  }

  private livenessFailure(livenessPhaseMs: number): SafetyViolation {
    const states = this.ids.map((id) => {
      const s = this.live(id)?.raft.status();
      return s === undefined ? `${id}:down` : `${id}:${s.role}/t${s.term}/c${s.commitIndex}/a${s.appliedIndex}/l${s.lastIndex}`;
    });
    return new SafetyViolation(
      'Liveness',
      `cluster did not converge within ${livenessPhaseMs} ms of healing: ${this.pending.size} proposals pending; ${states.join(' ')}`,
    );
  }

  private checkNothingAcknowledgedLost(): void {
    for (const id of this.ids) {
      const node = this.live(id);
      if (node === null) continue;
      const applied = new Set(node.machine.ids());
      for (const proposalId of this.acknowledged) {
        if (!applied.has(proposalId)) {
          this.failure = new SafetyViolation('AcknowledgedNotLost', `${id} lost acknowledged proposal ${proposalId}`);
          return;
        }
      }
    }
  }

  private fail(error: unknown): void {
    if (error instanceof CrashedProcess) return;
    if (this.failure === null) this.failure = error;
  }

  private traceLine(line: string): void {
    for (let i = 0; i < line.length; i++) {
      const c = line.charCodeAt(i);
      this.hash = Math.imul(this.hash ^ c, 0x01000193) >>> 0;
      this.hash2 = Math.imul(this.hash2 ^ c, 0x5bd1e995) >>> 0;
    }
    this.options.trace?.(line);
  }

  private result(): SimResult {
    const failure = this.failure;
    let violation: SimResult['violation'] = null;
    if (failure instanceof SafetyViolation) violation = { property: failure.property, message: failure.message };
    else if (failure instanceof RaftInvariantError) violation = { property: 'Invariant', message: failure.message };
    else if (failure !== null) violation = { property: 'Invariant', message: failure instanceof Error ? `${failure.name}: ${failure.message}` : String(failure) };
    this.faults.dropped = this.network.stats.dropped;
    this.faults.duplicated = this.network.stats.duplicated;
    return {
      seed: this.options.seed,
      ok: violation === null,
      violation,
      traceHash: this.hash.toString(16).padStart(8, '0') + this.hash2.toString(16).padStart(8, '0'),
      events: this.events,
      nodeCount: this.ids.length,
      faults: this.faults,
      acknowledged: this.acknowledged.size,
      committed: this.checker.committedCount,
      checks: this.checker.checks,
      simulatedMs: this.scheduler.now,
    };
  }
}

/**
 * Lets the promise chains started by the last event run. Nothing in a simulated node waits
 * on real I/O or timers, so a fixed number of microtask rounds is deterministic; a chain
 * longer than that simply continues after the next event, like a slow process would.
 */
async function settle(): Promise<void> {
  for (let round = 0; round < SETTLE_ROUNDS; round++) await null;
}

export function runSeed(options: SimOptions): Promise<SimResult> {
  return new Simulation(options).run();
}

export { describe as describeMessage };
