/**
 * One chaos run: a three-node cluster (node processes with per-pair proxies, or the
 * containers of a running docker-compose project), the topology, the workload, the seeded
 * fault schedule, then heal, drain and the total-queue check.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';

import { connect } from '@quorumq/client';

import { check, type CheckResult } from './checker.js';
import { ChaosCluster } from './cluster.js';
import { ComposeCluster } from './compose-cluster.js';
import { History } from './history.js';
import { LeaderMonitor, type LeaderView } from './monitor.js';
import { randomSeed } from './prng.js';
import { FAULT_KINDS, describeFault, makeSchedule, type FaultKind, type ScheduledFault } from './schedule.js';
import { connectionOf, type ClientTuning, type ClusterKind, type NemesisCluster } from './target.js';
import {
  ALL_QUEUES,
  ConsumerLoop,
  DEAD_LETTER_QUEUES,
  PublisherLoop,
  QUEUES,
  declareTopology,
  drainQueue,
  sleep,
  type ConsumerSpec,
  type DrainResult,
  type PublisherSpec,
} from './workload.js';

export interface ChaosOptions {
  readonly seed?: number;
  readonly durationS?: number;
  readonly faults?: readonly FaultKind[];
  /** Report file; default ./data/chaos/chaos-<seed>-<time>.json. */
  readonly report?: string;
  /** Messages per second per publisher (4 publishers). */
  readonly rate?: number;
  /** Extra QUORUMQ_* environment for the nodes. */
  readonly env?: Record<string, string>;
  readonly log?: (line: string) => void;
  readonly inheritOutput?: boolean;
  /** The process cluster with client TLS and peer mutual TLS (LocalCluster's `tls`). */
  readonly tls?: boolean;
  /** Replace a producer-id publisher that gave up by a new one (new sequence range). Default true. */
  readonly replacePublishers?: boolean;
  /**
   * Run against the containers of this running docker-compose project instead of starting
   * node processes (`env` and `inheritOutput` do not apply: the nodes are compose's).
   */
  readonly composeProject?: string;
  /** With `composeProject`: TLS to its nodes (files: the CA, a client certificate and key). */
  readonly composeTls?: { readonly ca: string; readonly cert?: string; readonly key?: string };
}

export interface TimelineEvent {
  /** ms since the workload started. */
  readonly t: number;
  readonly type: 'fault-start' | 'fault-end' | 'leader' | 'node-crash' | 'phase' | 'storage-damage';
  readonly [key: string]: unknown;
}

export interface LeaderElection {
  readonly fault: number;
  readonly kind: FaultKind;
  readonly queue: string;
  readonly oldLeader: string | null;
  readonly newLeader: string | null;
  /** ms from the fault to a new leader (null: none within the timeout). */
  readonly ms: number | null;
}

export interface FaultRecord {
  readonly index: number;
  readonly kind: FaultKind;
  readonly description: string;
  readonly targets: readonly string[];
  readonly startedAt: number;
  readonly healedAt: number;
  /** ms from heal until every queue had a leader again, null if it never did (not survived). */
  readonly recoveryMs: number | null;
  /**
   * Partitions: ms from heal until the cut-off node answered and named every queue's current
   * leader and term (it heard from its peers again); null if it did not (not survived).
   */
  readonly rejoinMs?: number | null;
  readonly survived: boolean;
}

export interface ChaosReport {
  readonly seed: number;
  readonly tag: string;
  readonly replay: string;
  readonly startedAt: string;
  readonly options: { durationS: number; faults: readonly FaultKind[]; rate: number; env: Record<string, string>; replacePublishers: boolean };
  readonly schedule: readonly string[];
  readonly faults: readonly FaultRecord[];
  readonly faultsInjected: number;
  readonly faultsSurvived: number;
  /** Kinds of `--faults` that were never injected (the duration ended first). */
  readonly kindsMissing: readonly FaultKind[];
  readonly counts: CheckResult;
  /** false when `ok` is false only because the queues could not be drained: inconclusive. */
  readonly ok: boolean;
  /** Every node reported every queue empty after the drain (else lost counts are not final). */
  readonly drainVerified: boolean;
  readonly leaderElections: readonly LeaderElection[];
  readonly timeToNewLeaderAfterKill: { count: number; medianMs: number | null; maxMs: number | null; missing: number };
  readonly maxUnavailability: { ms: number; fromT: number; toT: number; faults: string[] };
  readonly throughput: { duringFaults: number; withoutFaults: number; faultSeconds: number; clearSeconds: number };
  readonly workloadMs: number;
  readonly drainMs: number;
  readonly drain: readonly DrainResult[];
  readonly publishers: readonly unknown[];
  readonly consumers: readonly unknown[];
  readonly nodeCrashes: readonly { id: string; t: number; code: number | null; signal: string | null; output: string }[];
  /** Which cluster, and what its nemesis did: proxy counters (process) or docker command times (compose). */
  readonly cluster: { kind: ClusterKind } & Record<string, unknown>;
  readonly timeline: readonly TimelineEvent[];
  readonly reportFile: string;
}

export const DEFAULT_FAULTS: readonly FaultKind[] = FAULT_KINDS;
/** After a storage fault healed: time for the damaged node's groups to catch up (see inject). */
const STORAGE_REPAIR_SETTLE_MS = 10_000;

function median(values: number[]): number | null {
  if (values.length === 0) return null;
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? (sorted[mid] as number) : Math.round(((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2);
}

export function replayCommand(seed: number, durationS: number, faults: readonly FaultKind[], compose = false): string {
  return `npm run chaos -- ${compose ? '--compose ' : ''}--seed ${seed} --duration ${durationS} --faults ${faults.join(',')}`;
}

export async function runChaos(options: ChaosOptions = {}): Promise<ChaosReport> {
  const seed = options.seed ?? randomSeed();
  const durationS = options.durationS ?? 60;
  const durationMs = durationS * 1000;
  const faults = options.faults ?? DEFAULT_FAULTS;
  const rate = options.rate ?? 50;
  const compose = options.composeProject !== undefined;
  const env: Record<string, string> = compose ? {} : { QUORUMQ_DISK_FREE_LIMIT_BYTES: '1048576', ...options.env };
  const log = options.log ?? ((line: string) => process.stderr.write(`${line}\n`));
  const tag = `c${seed}-${Date.now().toString(36)}`;
  const startedAt = new Date().toISOString();
  const reportFile = resolve(options.report ?? `data/chaos/chaos-${seed}-${startedAt.replace(/[:.]/g, '-')}.json`);
  const replay = replayCommand(seed, durationS, faults, compose);

  const nodeIds = ['n1', 'n2', 'n3'];
  const leaderQueues = [QUEUES.work, QUEUES.dlxSource, QUEUES.limited];
  const schedule = makeSchedule(seed, durationMs, faults, nodeIds, leaderQueues);
  log(`chaos: seed ${seed} (replay: ${replay})`);
  log(`chaos: schedule (${schedule.length} faults):`);
  for (const f of schedule) log(`  ${describeFault(f)}`);

  const cluster: NemesisCluster =
    options.composeProject !== undefined
      ? await ComposeCluster.attach({ project: options.composeProject, log, ...(options.composeTls !== undefined ? { tls: options.composeTls } : {}) })
      : await ChaosCluster.start({ env, ...(options.inheritOutput ? { inheritOutput: true } : {}), ...(options.tls === true ? { tls: true } : {}) });
  const tuning = cluster.clientTuning;
  const history = new History(tag);
  const timeline: TimelineEvent[] = [];
  let t0 = Date.now();
  const at = (): number => Date.now() - t0;
  const admin = connect({ nodes: [...cluster.addresses], failoverTimeoutMs: 20_000, ...tuning });
  const monitor = new LeaderMonitor(cluster, (queue, view) => timeline.push({ t: at(), type: 'leader', queue, leader: view?.leader ?? null, term: view?.term ?? null }));
  const records: FaultRecord[] = [];
  const elections: LeaderElection[] = [];
  const publishers: PublisherLoop[] = [];
  const consumers: ConsumerLoop[] = [];
  let workloadMs = 0;
  let drainMs = 0;
  const drained: DrainResult[] = [];
  let drainVerified = false;
  try {
    await declareTopology(admin);
    await monitor.waitAllLeaders(ALL_QUEUES, 30_000);
    t0 = Date.now();
    monitor.start();

    const publisherSpecs: PublisherSpec[] = [
      { name: 'work-pid', queue: QUEUES.work, producerId: true, rate, maxInFlight: 32, retries: 0, replaceOnFailure: options.replacePublishers ?? true },
      { name: 'work', queue: QUEUES.work, producerId: false, rate, maxInFlight: 32, retries: 2 },
      { name: 'dlx-pid', queue: QUEUES.dlxSource, producerId: true, rate, maxInFlight: 32, retries: 0, replaceOnFailure: options.replacePublishers ?? true },
      { name: 'limited', queue: QUEUES.limited, producerId: false, rate, maxInFlight: 32, retries: 2 },
    ];
    const consumerSpecs: ConsumerSpec[] = [
      { name: 'work-ack-1', queue: QUEUES.work, mode: 'ack', prefetch: 50 },
      { name: 'work-ack-2', queue: QUEUES.work, mode: 'ack', prefetch: 20 },
      { name: 'work-crash', queue: QUEUES.work, mode: 'crash', prefetch: 20 },
      { name: 'dlx-src-reject', queue: QUEUES.dlxSource, mode: 'reject', prefetch: 30 },
      { name: 'limited-nack', queue: QUEUES.limited, mode: 'nack', prefetch: 30 },
      { name: 'limited-crash', queue: QUEUES.limited, mode: 'crash', prefetch: 10 },
      { name: 'dlq-ack', queue: QUEUES.dlq, mode: 'ack', prefetch: 50 },
    ];
    const client = connect({ nodes: [...cluster.addresses], failoverTimeoutMs: 20_000, callTimeoutMs: 5000, ...tuning });
    for (const spec of publisherSpecs) publishers.push(new PublisherLoop(spec, client, history).start());
    consumerSpecs.forEach((spec, i) => consumers.push(new ConsumerLoop(spec, cluster.addresses, history, seed * 31 + i, tuning).start()));
    timeline.push({ t: at(), type: 'phase', phase: 'workload' });

    // The nemesis: the schedule, one fault after another, until the duration is over.
    for (const fault of schedule) {
      const wait = fault.atMs - at();
      if (wait > 0) await sleep(Math.min(wait, Math.max(0, durationMs - at())));
      if (at() >= durationMs) break;
      const record = await inject(fault);
      records.push(record);
      const rejoin = record.rejoinMs !== undefined && record.rejoinMs !== null ? `, ${record.targets[0]} rejoined in ${record.rejoinMs} ms` : '';
      log(`chaos: ${record.description} -> ${record.targets.join(',')}: ${record.survived ? `recovered in ${record.recoveryMs} ms${rejoin}` : 'NOT RECOVERED'}`);
      await sleep(fault.gapMs);
      if (at() >= durationMs) break;
    }
    if (at() < durationMs) await sleep(durationMs - at());

    // Heal everything, then stop the publishers (waiting for their outcomes) and consumers.
    timeline.push({ t: at(), type: 'phase', phase: 'heal' });
    await cluster.healAll(120_000);
    await monitor.waitAllLeaders(ALL_QUEUES, 60_000);
    await Promise.all(publishers.map((p) => p.stop()));
    workloadMs = at();
    timeline.push({ t: at(), type: 'phase', phase: 'publishers-stopped' });
    await sleep(2000);
    await Promise.all(consumers.map((c) => c.stop()));
    await client.close().catch(() => undefined);

    // Drain: the source queues first (their dead letters land in the DLQ), then the DLQ.
    timeline.push({ t: at(), type: 'phase', phase: 'drain' });
    const drainStart = Date.now();
    const deadline = Date.now() + 600_000;
    drained.push(...(await Promise.all([QUEUES.work, QUEUES.dlxSource, QUEUES.limited].map((q) => drainQueue(cluster.addresses, q, history, deadline, { tuning })))));
    drained.push(await drainQueue(cluster.addresses, QUEUES.dlq, history, deadline, { tuning }));
    drainVerified = await verifyEmpty(cluster.addresses, tuning);
    for (const d of drained) if (!d.emptied) log(`chaos: ${d.queue} did not report empty within the drain deadline: ${JSON.stringify(d.last)}`);
    drainMs = Date.now() - drainStart;
    timeline.push({ t: at(), type: 'phase', phase: 'checked' });
  } finally {
    await monitor.stop();
    await admin.close().catch(() => undefined);
    await cluster.close();
  }

  const counts = check(history, DEAD_LETTER_QUEUES);
  const crashes = cluster.unexpectedExits.map((e) => ({ id: e.id, t: e.at - t0, code: e.code, signal: e.signal, output: e.output }));
  for (const c of crashes) timeline.push({ t: c.t, type: 'node-crash', node: c.id, code: c.code, signal: c.signal });
  timeline.sort((a, b) => a.t - b.t);

  const kills = elections.filter((e) => e.kind === 'kill-leader');
  const killMs = kills.map((e) => e.ms).filter((ms): ms is number => ms !== null);
  const report: ChaosReport = {
    seed,
    tag,
    replay,
    startedAt,
    options: { durationS, faults, rate, env, replacePublishers: options.replacePublishers ?? true },
    schedule: schedule.map(describeFault),
    faults: records,
    faultsInjected: records.length,
    faultsSurvived: records.filter((r) => r.survived).length,
    kindsMissing: [...new Set(faults)].filter((kind) => !records.some((r) => r.kind === kind)),
    counts,
    ok: counts.lost === 0 && counts.unexpected === 0 && drainVerified,
    drainVerified,
    leaderElections: elections,
    timeToNewLeaderAfterKill: { count: kills.length, medianMs: median(killMs), maxMs: killMs.length > 0 ? Math.max(...killMs) : null, missing: kills.length - killMs.length },
    maxUnavailability: unavailability(history.confirmTimes, t0, t0 + workloadMs, records),
    throughput: throughput(history.confirmTimes, t0, workloadMs, records),
    workloadMs,
    drainMs,
    drain: drained,
    publishers: publishers.map((p) => p.stats),
    consumers: consumers.map((c) => c.stats),
    nodeCrashes: crashes,
    cluster: { kind: cluster.kind, ...cluster.stats() },
    timeline,
    reportFile,
  };
  mkdirSync(dirname(reportFile), { recursive: true });
  writeFileSync(reportFile, `${JSON.stringify(report, null, 2)}\n`);
  return report;

  async function leaderOrNull(queue: string): Promise<LeaderView | null> {
    for (let i = 0; i < 20; i++) {
      const view = await monitor.leaderOf(queue);
      if (view !== null) return view;
      await sleep(100);
    }
    return null;
  }

  async function inject(fault: ScheduledFault): Promise<FaultRecord> {
    const n0 = fault.nodes[0] as string;
    const n1 = fault.nodes[1] as string;
    let targets: string[] = [];
    let old: LeaderView | null = null;
    let measure = false;
    let heal: () => Promise<void> = async () => undefined;
    switch (fault.kind) {
      case 'kill-leader':
      case 'partition-leader': {
        old = await leaderOrNull(fault.queue);
        targets = [old?.leader ?? n0];
        measure = old !== null;
        break;
      }
      case 'pause':
        if (fault.leader) {
          old = await leaderOrNull(fault.queue);
          measure = old !== null;
        }
        targets = [old?.leader ?? n0];
        break;
      case 'kill-random':
      case 'partition':
      case 'storage-fault':
        targets = [n0];
        break;
      case 'kill-two':
        targets = [n0, n1];
        break;
      case 'restart-all':
        targets = [...cluster.ids];
        break;
    }
    const startedAt = Date.now();
    timeline.push({ t: at(), type: 'fault-start', fault: fault.index, kind: fault.kind, targets, queue: fault.queue, leaderBefore: old });
    switch (fault.kind) {
      case 'kill-leader':
      case 'kill-random':
      case 'kill-two':
      case 'restart-all':
        await Promise.all(targets.map((id) => cluster.kill(id)));
        heal = async () => {
          await Promise.all(targets.map(async (id) => (cluster.isRunning(id) ? undefined : cluster.start(id))));
          await cluster.waitHealthy(targets, 90_000);
        };
        break;
      case 'storage-fault': {
        const damageStorage = cluster.damageStorage?.bind(cluster);
        if (damageStorage === undefined) throw new Error(`storage-fault: the ${cluster.kind} cluster cannot damage a node's files`);
        await cluster.kill(n0);
        const done = await damageStorage(n0, fault.damage, fault.damageAt);
        log(`chaos: storage fault on ${n0}: ${done}`);
        timeline.push({ t: at(), type: 'storage-damage', fault: fault.index, node: n0, damage: done });
        heal = async () => {
          if (!cluster.isRunning(n0)) await cluster.start(n0);
          await cluster.waitHealthy([n0], 90_000);
          // Repair assumes at most a minority damaged at once: a second storage fault on another
          // node while this one's groups still recover leaves those groups with no majority
          // of voters. Until the runner can read that recovery ended (quorumq_raft_groups
          // {state="recovering"} is 0), it gives the repair time.
          await sleep(STORAGE_REPAIR_SETTLE_MS);
        };
        break;
      }
      case 'pause':
        for (const id of targets) await cluster.pause(id);
        heal = async () => {
          for (const id of targets) await cluster.resume(id);
        };
        break;
      case 'partition':
      case 'partition-leader':
        await cluster.isolate(targets[0] as string);
        heal = async () => {
          await cluster.heal();
        };
        break;
    }
    const election = measure ? monitor.waitNewLeader(fault.queue, old, startedAt, 30_000) : Promise.resolve(null);
    await sleep(fault.holdMs);
    let healError: unknown = null;
    await heal().catch((e: unknown) => {
      healError = e;
    });
    const healedAt = Date.now();
    timeline.push({ t: at(), type: 'fault-end', fault: fault.index, kind: fault.kind, targets, ...(healError !== null ? { error: String(healError) } : {}) });
    if (measure) {
      const result = await election;
      elections.push({ fault: fault.index, kind: fault.kind, queue: fault.queue, oldLeader: old?.leader ?? null, newLeader: result?.leader ?? null, ms: result?.ms ?? null });
    }
    const recoveryMs = await monitor.waitAllLeaders(ALL_QUEUES, 30_000);
    // A partition is healed when the cut-off node takes part again, not just when the others lead.
    const partitioned = fault.kind === 'partition' || fault.kind === 'partition-leader';
    const rejoinMs = partitioned && healError === null ? await monitor.waitRejoined(targets[0] as string, ALL_QUEUES, 30_000) : null;
    if (partitioned && rejoinMs === null && healError === null) log(`chaos: ${targets[0]} did not rejoin within 30 s after the partition healed`);
    return {
      index: fault.index,
      kind: fault.kind,
      description: describeFault(fault),
      targets,
      startedAt: startedAt - t0,
      healedAt: healedAt - t0,
      recoveryMs,
      ...(partitioned ? { rejoinMs } : {}),
      survived: recoveryMs !== null && healError === null && (!partitioned || rejoinMs !== null),
    };
  }
}

/** True when every node reports every queue empty (nothing ready, unacked, delayed, dead-lettering). */
async function verifyEmpty(addresses: readonly string[], tuning: ClientTuning): Promise<boolean> {
  for (const address of addresses) {
    const client = connect({ nodes: [address], callTimeoutMs: 3000, failoverTimeoutMs: 3000, leaderRouting: false, ...connectionOf(tuning) });
    try {
      const status = await client.clusterStatus();
      for (const q of Object.values(status.queues)) if (q.ready + q.unacked + q.delayed + q.deadLettering !== 0) return false;
    } catch {
      return false;
    } finally {
      await client.close().catch(() => undefined);
    }
  }
  return true;
}

/** The longest time without a confirmed publish during the workload, and the faults around it. */
function unavailability(times: readonly number[], from: number, to: number, faults: readonly FaultRecord[]): ChaosReport['maxUnavailability'] {
  const sorted = [...times].sort((a, b) => a - b);
  let best = { ms: 0, fromT: 0, toT: 0 };
  let previous = from;
  for (const t of [...sorted, to]) {
    if (t - previous > best.ms) best = { ms: t - previous, fromT: previous - from, toT: t - from };
    previous = Math.max(previous, t);
  }
  const overlapping = faults.filter((f) => f.startedAt <= best.toT && f.healedAt + (f.recoveryMs ?? 0) >= best.fromT).map((f) => f.description);
  return { ...best, faults: overlapping };
}

/** Confirms per second in seconds that overlap a fault (start to recovery) and in the others. */
function throughput(times: readonly number[], from: number, workloadMs: number, faults: readonly FaultRecord[]): ChaosReport['throughput'] {
  const seconds = Math.max(1, Math.floor(workloadMs / 1000));
  const buckets = new Array<number>(seconds).fill(0);
  for (const t of times) {
    const i = Math.floor((t - from) / 1000);
    if (i >= 0 && i < seconds) buckets[i] = (buckets[i] as number) + 1;
  }
  let faultSum = 0;
  let faultSeconds = 0;
  let clearSum = 0;
  let clearSeconds = 0;
  for (let i = 0; i < seconds; i++) {
    const s = i * 1000;
    const e = s + 1000;
    const inFault = faults.some((f) => f.startedAt < e && f.healedAt + (f.recoveryMs ?? 0) > s);
    if (inFault) {
      faultSum += buckets[i] as number;
      faultSeconds += 1;
    } else {
      clearSum += buckets[i] as number;
      clearSeconds += 1;
    }
  }
  return {
    duringFaults: faultSeconds > 0 ? Math.round(faultSum / faultSeconds) : 0,
    withoutFaults: clearSeconds > 0 ? Math.round(clearSum / clearSeconds) : 0,
    faultSeconds,
    clearSeconds,
  };
}

export function summaryLine(report: ChaosReport): string {
  const c = report.counts;
  const k = report.timeToNewLeaderAfterKill;
  return (
    `chaos ${report.ok ? 'PASS' : report.drainVerified ? 'FAIL' : 'INCONCLUSIVE'} seed=${report.seed} faults=${report.faultsSurvived}/${report.faultsInjected} ` +
    `confirmed=${c.confirmed} lost=${c.lost} unexpected=${c.unexpected} duplicated=${c.duplicated} recovered=${c.recovered} ` +
    `dedupViolations=${c.dedupViolations} firstSendDuplicates=${c.firstSendDuplicates}(lost ${c.lostDuplicates}) deadLettered=${c.deadLettered} newLeader(median/max)=${k.medianMs ?? '-'}/${k.maxMs ?? '-'}ms ` +
    `maxUnavailable=${report.maxUnavailability.ms}ms tput(faults/clear)=${report.throughput.duringFaults}/${report.throughput.withoutFaults}/s ` +
    `crashes=${report.nodeCrashes.length} drain=${report.drainVerified ? 'verified' : 'INCOMPLETE'} report=${report.reportFile}`
  );
}
