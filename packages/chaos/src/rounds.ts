/**
 * The leader-kill scenario: a fast publisher streams to one queue while the queue's leader is
 * killed with -9; the node comes back, the queue is drained and checked; repeated for a
 * bounded number of rounds, stopping at the first round that loses a confirmed value. With a
 * correct broker no round loses anything; with the test-only confirm-before-commit switch
 * (QUORUMQ_TEST_ONLY_CONFIRM_BEFORE_COMMIT=1) the publishes confirmed by the dying leader but
 * not yet replicated are lost, and this is how the checker is shown to catch that.
 */
import { connect } from '@quorumq/client';

import { check, type CheckResult } from './checker.js';
import { ChaosCluster } from './cluster.js';
import { History } from './history.js';
import { LeaderMonitor } from './monitor.js';
import { randomSeed } from './prng.js';
import { ALL_QUEUES, DEAD_LETTER_QUEUES, PublisherLoop, QUEUES, declareTopology, drainQueue, sleep } from './workload.js';

export interface RoundsOptions {
  readonly rounds?: number;
  readonly seed?: number;
  readonly env?: Record<string, string>;
  /** Streaming time before and after the kill, ms. */
  readonly beforeKillMs?: number;
  readonly afterKillMs?: number;
  /**
   * Cut the leader off from its followers (proxies) this long before the kill, so that what
   * it accepts meanwhile cannot be replicated: a correct broker confirms none of it, a broker
   * that confirms before commit loses all of it. 0: a plain kill.
   */
  readonly isolateBeforeKillMs?: number;
  readonly log?: (line: string) => void;
}

export interface RoundResult {
  readonly round: number;
  readonly killed: string | null;
  readonly newLeaderMs: number | null;
  readonly issued: number;
  readonly confirmed: number;
  readonly lostSoFar: number;
}

export interface RoundsReport {
  readonly seed: number;
  readonly rounds: readonly RoundResult[];
  /** The first round after which a confirmed value was missing, or null. */
  readonly lossInRound: number | null;
  readonly counts: CheckResult;
}

export async function runLeaderKillRounds(options: RoundsOptions = {}): Promise<RoundsReport> {
  const seed = options.seed ?? randomSeed();
  const maxRounds = options.rounds ?? 5;
  const log = options.log ?? ((line: string) => process.stderr.write(`${line}\n`));
  const cluster = await ChaosCluster.start({ env: { QUORUMQ_DISK_FREE_LIMIT_BYTES: '1048576', ...options.env } });
  const history = new History(`k${seed}-${Date.now().toString(36)}`);
  const monitor = new LeaderMonitor(cluster, () => undefined);
  const client = connect({ nodes: cluster.addresses, failoverTimeoutMs: 10_000, callTimeoutMs: 3000 });
  const rounds: RoundResult[] = [];
  let lossInRound: number | null = null;
  let counts = check(history, DEAD_LETTER_QUEUES);
  try {
    await declareTopology(client);
    for (let round = 1; round <= maxRounds; round++) {
      await monitor.waitAllLeaders(ALL_QUEUES, 30_000);
      const old = await monitor.leaderOf(QUEUES.work);
      // The publisher talks to the leader first, so that what the kill (and the isolation) cuts
      // off is what the leader itself accepted.
      const leaderAddress = old !== null ? cluster.node(old.leader).address : null;
      const ordered = leaderAddress !== null ? [leaderAddress, ...cluster.addresses.filter((a) => a !== leaderAddress)] : cluster.addresses;
      const publishClient = connect({ nodes: ordered, failoverTimeoutMs: 10_000, callTimeoutMs: 3000 });
      const publisher = new PublisherLoop({ name: `fast-r${round}`, queue: QUEUES.work, producerId: false, rate: 0, maxInFlight: 128, retries: 0 }, publishClient, history).start();
      await sleep(options.beforeKillMs ?? 1000);
      const isolateMs = options.isolateBeforeKillMs ?? 0;
      if (old !== null && isolateMs > 0) {
        cluster.isolate(old.leader);
        await sleep(isolateMs);
      }
      const killedAt = Date.now();
      if (old !== null) await cluster.kill(old.leader);
      cluster.heal();
      const elected = await monitor.waitNewLeader(QUEUES.work, old, killedAt, 15_000);
      await sleep(Math.max(0, (options.afterKillMs ?? 1000) - (Date.now() - killedAt)));
      await publisher.stop();
      await publishClient.close().catch(() => undefined);
      if (old !== null) await cluster.restart(old.leader);
      await monitor.waitAllLeaders(ALL_QUEUES, 30_000);
      await drainQueue(cluster.addresses, QUEUES.work, history, Date.now() + 60_000);
      counts = check(history, DEAD_LETTER_QUEUES);
      const result: RoundResult = {
        round,
        killed: old?.leader ?? null,
        newLeaderMs: elected?.ms ?? null,
        issued: publisher.stats.issued,
        confirmed: publisher.stats.confirmed,
        lostSoFar: counts.lost,
      };
      rounds.push(result);
      log(`leader-kill round ${round}: ${isolateMs > 0 ? `isolated ${isolateMs} ms then ` : ''}killed ${result.killed}, new leader in ${result.newLeaderMs} ms, ${result.confirmed}/${result.issued} confirmed, lost so far ${counts.lost}`);
      if (counts.lost > 0) {
        lossInRound = round;
        break;
      }
    }
  } finally {
    await monitor.stop();
    await client.close().catch(() => undefined);
    await cluster.close();
  }
  return { seed, rounds, lossInRound, counts };
}
