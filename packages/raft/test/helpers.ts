/** Small helpers shared by the Raft tests. */
import { createRandom } from '../src/index.js';
import type { Message, NodeId, RaftNode } from '../src/index.js';
import { TestCluster } from './cluster.js';
import type { OptionsOverride } from './cluster.js';

const encoder = new TextEncoder();

export function enc(text: string): Uint8Array {
  return encoder.encode(text);
}

/** The log of a node as "index@term" strings, from its first index. */
export function logTerms(raft: RaftNode): string[] {
  const s = raft.status();
  const out: string[] = [];
  for (let i = s.firstIndex; i <= s.lastIndex; i++) out.push(`${i}@${raft.termAt(i) ?? '?'}`);
  return out;
}

/** Every term that saw more than one leader. */
export function termsWithTwoLeaders(cluster: TestCluster): number[] {
  return [...cluster.checker.leadersByTerm].filter(([, leaders]) => leaders.size > 1).map(([term]) => term);
}

/** Ticks and stabilizes the whole cluster `rounds` times. */
export function run(cluster: TestCluster, rounds: number): void {
  for (let i = 0; i < rounds; i++) {
    cluster.tickAll();
    cluster.stabilize();
  }
}

export interface ChaosOptions {
  readonly seed: number;
  readonly steps: number;
  readonly overrides?: OptionsOverride;
  /** Membership changes (add a learner n6, remove members). */
  readonly membership?: boolean;
}

export interface ChaosResult {
  readonly cluster: TestCluster;
  readonly proposals: number;
  readonly crashes: number;
  readonly partitions: number;
  readonly leaderChanges: number;
}

/**
 * A seeded random run of five voters (and a spare node n6): ticks, proposals, random
 * partitions, crashes and restarts, local snapshots, lost, delayed, duplicated and
 * reordered messages, leadership transfers, read requests and membership changes. Then
 * the network heals, everyone restarts and the cluster settles.
 */
export function chaos(options: ChaosOptions): ChaosResult {
  const ids = ['n1', 'n2', 'n3', 'n4', 'n5'];
  const all = [...ids, 'n6'];
  const cluster = new TestCluster(
    ids,
    { electionTicks: 6, snapshotChunkBytes: 64, retainedEntriesAfterSnapshot: 3, appendEntriesMax: 4, inflightAppendsMax: 3, ...options.overrides },
    options.seed,
  );
  cluster.addNode('n6');
  const rnd = createRandom(options.seed * 7 + 3);
  const held: Message[] = [];
  cluster.filter = (m) => {
    const r = rnd.nextInt(100);
    if (r < 5) return false; // lost
    if (r < 10) {
      held.push(m); // delayed
      return false;
    }
    return true;
  };
  let proposals = 0;
  let crashes = 0;
  let partitions = 0;
  let leaderChanges = 0;
  let lastLeader: NodeId | null = null;
  for (let step = 0; step < options.steps; step++) {
    const r = rnd.nextInt(100);
    const id = all[rnd.nextInt(all.length)]!;
    const leader = cluster.leader();
    if (leader !== null && leader !== lastLeader) {
      leaderChanges++;
      lastLeader = leader;
    }
    if (r < 40) cluster.tickAll();
    else if (r < 60) {
      if (leader !== null && cluster.raft(leader).propose(enc(`v${proposals}`)).ok) proposals++;
    } else if (r < 63) {
      const side = all.filter(() => rnd.nextInt(2) === 0);
      cluster.partition(side, all.filter((x) => !side.includes(x)));
      partitions++;
    } else if (r < 68) cluster.heal();
    else if (r < 71) {
      if (cluster.liveNodes().length > 4 && !cluster.node(id).crashed) {
        cluster.crash(id);
        crashes++;
      }
    } else if (r < 76) {
      if (cluster.node(id).crashed) cluster.restart(id);
    } else if (r < 79) {
      if (!cluster.node(id).crashed && cluster.raft(id).status().appliedIndex > 0) cluster.trySnapshot(id);
    } else if (r < 85) {
      // Delayed messages arrive late, reversed, some of them twice.
      for (const m of held.splice(0).reverse()) {
        cluster.queue.push(m);
        if (rnd.nextInt(3) === 0) cluster.queue.push(m);
      }
    } else if (r < 87) {
      if (leader !== null) cluster.raft(leader).transferLeadership(id);
    } else if (r < 89) {
      if (leader !== null && options.membership === true) {
        const config = cluster.raft(leader).status().config;
        const member = config.voters.includes(id) || config.learners.includes(id);
        if (rnd.nextInt(2) === 0 && !member) cluster.raft(leader).proposeConfChange({ type: 'addLearner', nodeId: id });
        else if (member && config.voters.length > 3) cluster.raft(leader).proposeConfChange({ type: 'remove', nodeId: id });
      }
    } else if (r < 92) {
      if (leader !== null) cluster.raft(leader).readIndex(`read-${step}`);
    }
    if (rnd.nextInt(3) === 0) cluster.stabilize();
    else cluster.deliverRound();
  }
  cluster.heal();
  cluster.filter = null;
  for (const id of all) if (cluster.node(id).crashed) cluster.restart(id);
  run(cluster, 150);
  cluster.checkLogMatching();
  return { cluster, proposals, crashes, partitions, leaderChanges };
}
