import { createRandom } from '@quorumq/raft';
import type { ConfChange, NodeId, PlantedBug, Random } from '@quorumq/raft';
import { FirstFailure, TraceHash, violationOf } from './outcome.js';
import { SafetyViolation } from './checker.js';
import type { Property } from './checker.js';
import { FakeDisk, STORAGE_FAULTS } from './fake-disk.js';
import { SimNetwork, chance } from './network.js';
import type { NetworkFaults } from './network.js';
import { Scheduler } from './scheduler.js';
import { SimNode } from './sim-node.js';
import type { GroupMessage, GroupReplica } from './sim-node.js';
import { GroupWorkload } from './workload.js';

/** Bugs that can be planted to prove the checkers catch them. */
export type SimBug = PlantedBug | 'ackBeforeFsync' | 'ignorePeerSilence';
export const SIM_BUGS: readonly SimBug[] = [
  'commitPreviousTermByCount',
  'forgetVoteOnRestart',
  'voteWithoutLogCheck',
  'readIndexWithoutQuorum',
  'ackBeforeFsync',
  'ignorePeerSilence',
  'recoveringVotes',
];

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
  transfers: number;
  membershipChanges: number;
  /** Damage done to a stopped node's files (see StorageFault), which its storage must repair. */
  storageFaults: number;
}

export interface SimResult {
  readonly seed: number;
  readonly ok: boolean;
  readonly violation: { readonly property: Property; readonly message: string } | null;
  readonly traceHash: string;
  readonly events: number;
  readonly nodeCount: number;
  readonly groupCount: number;
  readonly faults: FaultCounts;
  readonly acknowledged: number;
  readonly readsServed: number;
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
  readonly transferEveryMs: number;
  readonly membershipEveryMs: number;
  /** The one node (a minority) whose files may be damaged while it is down, and how often. */
  readonly storageVictim: NodeId;
  readonly storageFaultRate: number;
}

const TICK_MS = 10;
/** Simulated time for converged, idle groups to go quiet on every replica. */
const QUIET_WITHIN_MS = 1_000;
/** Simulated time for quiet groups to elect and commit after their leader's node crashed. */
const FAILOVER_WITHIN_MS = 2_000;
const SETTLE_ROUNDS = 6;
/** A healthy seed takes tens of thousands of events; a message storm must not hang the run. */
const EVENTS_MAX = 2_000_000;

/**
 * One seeded run: a 3- or 5-node cluster hosting one to three Raft groups that share each
 * node's WAL, under random faults, then a healed liveness phase. Every source of
 * nondeterminism comes from the seed, so a run replays exactly.
 */
export class Simulation {
  private readonly random: Random;
  private readonly scheduler = new Scheduler();
  private readonly disk: FakeDisk;
  private readonly network: SimNetwork;
  private readonly nodes = new Map<NodeId, SimNode | 'down' | 'starting'>();
  private readonly ids: NodeId[];
  /** Every group starts with these voters; with membership changes, fewer than all nodes. */
  private readonly initialVoters: NodeId[];
  private readonly workloads = new Map<string, GroupWorkload>();
  private readonly profile: FaultProfile;
  private readonly bugs: ReadonlySet<SimBug>;
  private readonly faults: FaultCounts = {
    dropped: 0,
    duplicated: 0,
    partitions: 0,
    crashes: 0,
    tornWrites: 0,
    lostUnsyncedBytes: 0,
    pauses: 0,
    transfers: 0,
    membershipChanges: 0,
    storageFaults: 0,
  };
  private readonly pausedUntil = new Map<NodeId, number>();
  private readonly outcome = new FirstFailure();
  private healed = false;
  private readonly trace = new TraceHash();
  private events = 0;

  constructor(private readonly options: SimOptions) {
    this.random = createRandom(options.seed);
    this.bugs = options.bugs ?? new Set();
    const nodeCount = this.random.nextInt(2) === 0 ? 3 : 5;
    this.ids = Array.from({ length: nodeCount }, (_, i) => `n${i + 1}`);
    const membershipChanges = nodeCount === 5 && this.random.nextInt(2) === 0;
    this.initialVoters = membershipChanges ? this.ids.slice(0, 3) : this.ids;
    const groupCount = 1 + this.random.nextInt(3);
    for (let g = 1; g <= groupCount; g++) {
      const groupId = `g${g}`;
      this.workloads.set(groupId, new GroupWorkload(groupId, this.scheduler, this.random, (id) => this.replica(id, groupId), this.ids));
    }
    this.profile = this.chooseProfile();
    this.disk = new FakeDisk(this.scheduler, this.random);
    this.network = new SimNetwork(this.scheduler, this.random, (envelope) => this.deliver(envelope), (line) => this.traceLine(line));
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
      transferEveryMs: pick([300, 1000, 1_000_000]),
      membershipEveryMs: this.initialVoters.length < this.ids.length ? pick([150, 400]) : 1_000_000,
      storageVictim: pick(this.ids),
      storageFaultRate: pick([0, 0.3, 0.8]),
    };
  }

  async run(): Promise<SimResult> {
    const faultPhaseMs = this.options.faultPhaseMs ?? 3000;
    const livenessPhaseMs = this.options.livenessPhaseMs ?? 4000;
    for (const id of this.ids) this.startNode(id);
    for (const id of this.ids) this.scheduleTick(id);
    for (const workload of this.workloads.values()) workload.start(faultPhaseMs);
    this.scheduleFaults(faultPhaseMs);
    this.scheduler.at(faultPhaseMs, 'heal', () => this.heal());
    let deadline = faultPhaseMs + livenessPhaseMs;
    // After the heal: converge, then every idle group goes quiet, then a leader's node dies
    // while they are quiet and every group must elect and commit again (node-level failure
    // detection is all that can wake a quiet follower).
    let phase: 'faults' | 'quiet' | 'failover' | 'done' = 'faults';
    while (this.outcome.failure === null) {
      const event = this.scheduler.pop();
      if (event === undefined || event.time > deadline) break;
      if (++this.events > EVENTS_MAX) {
        this.outcome.failure = new SafetyViolation('Liveness', `more than ${EVENTS_MAX} events by ${event.time} ms: a message storm or livelock`);
        break;
      }
      this.traceLine(`${event.time} ${event.label}`);
      event.run();
      await settle();
      if (this.outcome.failure === null) this.checkAfterStep();
      if (!this.healed || this.outcome.failure !== null || this.events % 16 !== 0) continue;
      if (phase === 'faults' && this.hasConverged()) {
        phase = 'quiet';
        deadline = this.scheduler.now + QUIET_WITHIN_MS;
      } else if (phase === 'quiet' && this.allQuiet()) {
        this.crashQuietLeader();
        phase = 'failover';
        deadline = this.scheduler.now + FAILOVER_WITHIN_MS;
      } else if (phase === 'failover' && this.hasFailedOver()) {
        phase = 'done';
        break;
      }
    }
    if (this.outcome.failure === null && phase !== 'done') this.outcome.failure = this.livenessFailure(phase, livenessPhaseMs);
    if (this.outcome.failure === null) this.outcome.guard(() => this.workloads.forEach((workload) => workload.checkNothingAcknowledgedLost()));
    return this.result();
  }

  // ------------------------------------------------------------ nodes

  private startNode(id: NodeId): void {
    this.nodes.set(id, 'starting');
    const context = {
      scheduler: this.scheduler,
      nodeIds: this.ids,
      tickMs: this.profile.tickMs.get(id) ?? TICK_MS,
      groupIds: [...this.workloads.keys()],
      checkerOf: (groupId: string) => this.workload(groupId).checker,
      send: (envelope: GroupMessage) => this.network.send(envelope),
      onApplied: (groupId: string, _node: NodeId, proposalId: string) => this.workload(groupId).onApplied(proposalId),
      onRead: (groupId: string, node: NodeId, requestId: string, applied: readonly string[]) =>
        this.outcome.guard(() => this.workload(groupId).onRead(node, requestId, applied)),
      onFailure: (error: unknown) => this.outcome.fail(error),
      raftBugs: new Set([...this.bugs].filter((bug): bug is PlantedBug => bug !== 'ackBeforeFsync' && bug !== 'ignorePeerSilence')),
      ackBeforeFsync: this.bugs.has('ackBeforeFsync'),
      planted: new Set(this.bugs.has('ignorePeerSilence') ? (['ignorePeerSilence'] as const) : []),
      initialVoters: this.initialVoters,
      knownMember: (groupId: string, nodeId: NodeId) => this.directory(groupId).has(nodeId),
      snapshotInterval: 40,
      appendEntriesMax: this.profile.appendEntriesMax,
      inflightAppendsMax: this.profile.inflightAppendsMax,
      // Odd seeds: one election at a time per node (GroupTicker's slots), so that holding a
      // due campaign back and taking a slot away are exercised (the seed's random stream is
      // left as it was).
      campaignsMax: this.options.seed % 2 === 1 ? 1 : undefined,
      scheduleFlush: (flush: () => void) =>
        this.scheduler.after(0, `walFlush ${id}`, () => {
          if (this.nodes.get(id) !== 'down') flush();
        }),
    };
    const nodeRandom = createRandom(this.random.nextInt(0x7fffffff));
    SimNode.start(id, nodeRandom, this.disk.fsOf(id), this.disk.kvOf(id), context).then(
      (node) => {
        if (this.nodes.get(id) === 'starting') this.nodes.set(id, node);
        else node.stop();
      },
      (error: unknown) => this.outcome.fail(error),
    );
  }

  private workload(groupId: string): GroupWorkload {
    const workload = this.workloads.get(groupId);
    if (workload === undefined) throw new Error(`unknown group ${groupId}`);
    return workload;
  }

  private live(id: NodeId): SimNode | null {
    const node = this.nodes.get(id);
    if (node === undefined || node === 'down' || node === 'starting') return null;
    if ((this.pausedUntil.get(id) ?? 0) > this.scheduler.now) return null;
    return node;
  }

  private replica(id: NodeId, groupId: string): GroupReplica | null {
    return this.live(id)?.replica(groupId) ?? null;
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

  private deliver(envelope: GroupMessage): void {
    this.live(envelope.message.to)?.receive(envelope);
  }

  private scheduleTick(id: NodeId): void {
    const interval = this.profile.tickMs.get(id) ?? TICK_MS;
    this.scheduler.after(interval, `tick ${id}`, () => {
      this.live(id)?.tick();
      this.scheduleTick(id);
    });
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
    repeat(this.profile.transferEveryMs, 'transfer', () => this.transferLeadership());
    repeat(this.profile.membershipEveryMs, 'membership', () => this.changeMembership());
  }

  private randomGroup(): GroupWorkload {
    const workloads = [...this.workloads.values()];
    return workloads[this.random.nextInt(workloads.length)]!;
  }

  private crashRandomNode(): void {
    const leader = this.randomGroup().leaders()[0];
    const id = leader !== undefined && chance(this.random, this.profile.crashLeaderRate) ? leader : this.ids[this.random.nextInt(this.ids.length)]!;
    this.crash(id);
    if (id === this.profile.storageVictim && chance(this.random, this.profile.storageFaultRate)) this.damageStorage(id);
    const downMs = 20 + this.random.nextInt(500);
    this.scheduler.after(downMs, `restart ${id}`, () => this.restart(id));
  }

  /** Damages the files of a node that is down: its storage must find the damage and repair. */
  private damageStorage(id: NodeId): void {
    const fault = STORAGE_FAULTS[this.random.nextInt(STORAGE_FAULTS.length)]!;
    const done = this.disk.damage(id, fault);
    if (done === null) return;
    this.faults.storageFaults++;
    this.traceLine(`storage fault ${id} ${fault}: ${done}`);
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

  private transferLeadership(): void {
    // An operator (or a draining node) hands leadership of a group to another voter.
    const workload = this.randomGroup();
    const leader = workload.leaders()[0];
    if (leader === undefined) return;
    const target = this.ids[this.random.nextInt(this.ids.length)]!;
    const replica = this.replica(leader, workload.groupId);
    if (replica === null || target === leader) return;
    this.outcome.guard(() => replica.group.transferLeadership(target));
    this.faults.transfers++;
    this.traceLine(`transfer ${workload.groupId} ${leader}->${target}`);
  }

  /**
   * Adds a node (as a learner, promoted by the leader once caught up) or removes a voter,
   * one at a time, keeping at least three voters.
   */
  private changeMembership(): void {
    const workload = this.randomGroup();
    const leader = workload.leaders()[0];
    const replica = leader === undefined ? null : this.replica(leader, workload.groupId);
    if (replica === null) return;
    const config = replica.raft.status().config;
    const outsiders = this.ids.filter((id) => !config.voters.includes(id) && !config.learners.includes(id));
    const change: ConfChange =
      outsiders.length > 0 && (config.voters.length <= 3 || this.random.nextInt(2) === 0)
        ? { type: 'addLearner', nodeId: outsiders[this.random.nextInt(outsiders.length)]! }
        : { type: 'remove', nodeId: config.voters[this.random.nextInt(config.voters.length)]! };
    if (change.type === 'remove' && config.voters.length <= 3) return;
    if (!replica.changeMembership(change)) return;
    // The directory follows the change when it is proposed, as the broker's metadata names a
    // queue's members before the queue's own log has them.
    if (change.type === 'addLearner') this.directory(workload.groupId).add(change.nodeId);
    if (change.type === 'remove') this.directory(workload.groupId).delete(change.nodeId);
    this.faults.membershipChanges++;
    this.traceLine(`membership ${workload.groupId} ${change.type} ${change.nodeId}`);
  }

  /** Members of each group as the directory outside its log knows them (see SimNodeContext.knownMember). */
  private readonly directories = new Map<string, Set<NodeId>>();

  private directory(groupId: string): Set<NodeId> {
    let members = this.directories.get(groupId);
    if (members === undefined) {
      members = new Set(this.initialVoters);
      this.directories.set(groupId, members);
    }
    return members;
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
    this.outcome.guard(() => this.workloads.forEach((workload) => workload.checkLeaders()));
  }

  private hasConverged(): boolean {
    for (const workload of this.workloads.values()) if (!workload.hasConverged()) return false;
    return true;
  }

  /** Every live replica of every group is quiet (RaftNode.isQuiet). */
  private allQuiet(): boolean {
    for (const workload of this.workloads.values()) {
      // A node removed from the group may still campaign on its own: its messages are refused.
      for (const id of workload.members()) {
        const replica = this.replica(id, workload.groupId);
        if (replica !== null && !replica.raft.isQuiet) return false;
      }
    }
    return true;
  }

  /** Crashes, for good, the node leading the first group, and proposes once to every group. */
  private crashQuietLeader(): void {
    const first = [...this.workloads.values()][0]!;
    const leader = first.leaders()[0];
    if (leader === undefined) return;
    this.traceLine(`quiet failover: crash ${leader}`);
    this.crash(leader);
    for (const workload of this.workloads.values()) workload.proposeOnce();
  }

  /** Every group has one leader again and has committed the proposal made after the crash. */
  private hasFailedOver(): boolean {
    for (const workload of this.workloads.values()) if (!workload.hasConvergedOnLive()) return false;
    return true;
  }

  private livenessFailure(phase: 'faults' | 'quiet' | 'failover', livenessPhaseMs: number): SafetyViolation {
    const states = [...this.workloads.values()].map((workload) => workload.describeState()).join('; ');
    switch (phase) {
      case 'faults':
        return new SafetyViolation('Liveness', `cluster did not converge within ${livenessPhaseMs} ms of healing: ${states}`);
      case 'quiet':
        return new SafetyViolation('Liveness', `idle groups did not all go quiet within ${QUIET_WITHIN_MS} ms of converging: ${states}`);
      case 'failover':
        return new SafetyViolation('Liveness', `quiet groups did not elect and commit within ${FAILOVER_WITHIN_MS} ms of their leader's node crashing: ${states}`);
    }
  }

  private traceLine(line: string): void {
    this.trace.add(line);
    this.options.trace?.(line);
  }

  private result(): SimResult {
    const violation = violationOf(this.outcome.failure);
    this.faults.dropped = this.network.stats.dropped;
    this.faults.duplicated = this.network.stats.duplicated;
    const workloads = [...this.workloads.values()];
    return {
      seed: this.options.seed,
      ok: violation === null,
      violation,
      traceHash: this.trace.hex,
      events: this.events,
      nodeCount: this.ids.length,
      groupCount: workloads.length,
      faults: this.faults,
      acknowledged: workloads.reduce((sum, w) => sum + w.acknowledged.size, 0),
      readsServed: workloads.reduce((sum, w) => sum + w.readsServed, 0),
      committed: workloads.reduce((sum, w) => sum + w.checker.committedCount, 0),
      checks: workloads.reduce((sum, w) => sum + w.checker.checks, 0),
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

