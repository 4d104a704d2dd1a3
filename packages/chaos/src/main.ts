#!/usr/bin/env node
/**
 * `npm run chaos -- [options]`: one chaos run against a three-node process cluster, or with
 * `--compose` against the docker-compose cluster (cluster/compose-chaos.sh builds and starts
 * it, runs this program again with `--compose-project`, and tears it down). Prints the
 * schedule, a one-line summary and, on failure, the seed that replays the schedule; writes
 * the JSON report. Exit code 1 when a confirmed value was lost or an unexpected one consumed.
 */
import { spawn } from 'node:child_process';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

import { Command, InvalidArgumentError } from 'commander';

import { composeConflicts } from './compose-cluster.js';
import { runLeaderKillRounds } from './rounds.js';
import { DEFAULT_FAULTS, runChaos, summaryLine } from './runner.js';
import { FAULT_KINDS, PROCESS_ONLY_FAULTS, parseFaults } from './schedule.js';

function integer(name: string, min: number) {
  return (value: string): number => {
    const n = Number(value);
    if (!Number.isSafeInteger(n) || n < min) throw new InvalidArgumentError(`${name}: expected an integer >= ${min}`);
    return n;
  };
}

const program = new Command('chaos')
  .description('Kill, pause and partition a three-node quorumq cluster under load; check that nothing confirmed is lost')
  .option('--seed <n>', 'seed of the fault schedule and workload choices (printed; replays the schedule)', integer('--seed', 0))
  .option('--duration <seconds>', 'how long faults are injected', integer('--duration', 1), 60)
  .option('--faults <list>', `comma-separated fault kinds, repeated ones weigh more (${FAULT_KINDS.join(',')})`, DEFAULT_FAULTS.join(','))
  .option('--report <file>', 'JSON report file (default ./data/chaos/chaos-<seed>-<time>.json)')
  .option('--rate <n>', 'messages per second per publisher (4 publishers)', integer('--rate', 1), 50)
  .option('--broken-build', 'start the nodes with QUORUMQ_TEST_ONLY_CONFIRM_BEFORE_COMMIT=1 (the checker must fail)')
  .option('--leader-kill-rounds <n>', 'instead of the schedule: up to n rounds of kill -9 of a queue leader under a fast publisher, stopping at the first loss', integer('--leader-kill-rounds', 1))
  .option('--isolate-before-kill <ms>', 'with --leader-kill-rounds: cut the leader off from its followers this long before each kill', integer('--isolate-before-kill', 0), 0)
  .option('--keep-publishers', 'never replace a producer-id publisher that gave up (by default it is replaced, which starts a new sequence range)')
  .option('--compose', 'run against the docker-compose cluster instead of local processes (builds, starts and removes it: cluster/compose-chaos.sh)')
  .option('--compose-project <name>', 'run against the containers of this running docker-compose project (nothing is built, started or removed)')
  .option('--tls-dir <dir>', 'with --compose-project: connect over TLS with the ca.crt, client.crt and client.key of this directory (cluster/make-certs.sh makes cluster/certs/client)')
  .option('--tls', 'the process cluster with client TLS and peer mutual TLS (certificates made for the run), clients over TLS')
  .option('--node-output', "forward the nodes' output to stderr")
  .option('--require-all-faults', 'exit 2 unless every kind in --faults was injected at least once and every fault recovered (for CI)');

program.parse();
const opts = program.opts<{
  seed?: number;
  duration: number;
  faults: string;
  report?: string;
  rate: number;
  brokenBuild?: boolean;
  leaderKillRounds?: number;
  isolateBeforeKill: number;
  compose?: boolean;
  composeProject?: string;
  tlsDir?: string;
  tls?: boolean;
  keepPublishers?: boolean;
  nodeOutput?: boolean;
  requireAllFaults?: boolean;
}>();

async function main(): Promise<number> {
  if (opts.compose || opts.composeProject !== undefined) {
    const conflicts = composeConflicts(opts);
    if (opts.compose && opts.composeProject !== undefined) conflicts.push('--compose starts its own project; --compose-project attaches to a running one: use one of them');
    for (const c of conflicts) console.error(`chaos: not with the compose cluster: ${c}`);
    if (conflicts.length > 0) return 2;
  }
  let faults;
  try {
    faults = parseFaults(opts.faults);
    // The compose nodes' data directories are not here: by default, no storage faults there.
    if (opts.composeProject !== undefined && program.getOptionValueSource('faults') === 'default') faults = faults.filter((kind) => !PROCESS_ONLY_FAULTS.includes(kind));
  } catch (error) {
    console.error(`chaos: ${error instanceof Error ? error.message : String(error)}`);
    return 2;
  }
  if (opts.compose) return composeScript(process.argv.slice(2).filter((a) => a !== '--compose'));
  const env: Record<string, string> = opts.brokenBuild ? { QUORUMQ_TEST_ONLY_CONFIRM_BEFORE_COMMIT: '1' } : {};
  if (opts.leaderKillRounds !== undefined) {
    const report = await runLeaderKillRounds({ rounds: opts.leaderKillRounds, env, isolateBeforeKillMs: opts.isolateBeforeKill, ...(opts.seed !== undefined ? { seed: opts.seed } : {}) });
    const c = report.counts;
    console.log(
      `leader-kill ${c.lost === 0 && c.unexpected === 0 ? 'PASS' : 'FAIL'} rounds=${report.rounds.length} confirmed=${c.confirmed} lost=${c.lost} unexpected=${c.unexpected} duplicated=${c.duplicated} recovered=${c.recovered}` +
        (c.lost > 0 ? ` lost e.g. ${c.examples.lost.slice(0, 5).join(' ')}` : ''),
    );
    return c.lost > 0 || c.unexpected > 0 ? 1 : 0;
  }
  const report = await runChaos({
    durationS: opts.duration,
    faults,
    rate: opts.rate,
    env,
    ...(opts.seed !== undefined ? { seed: opts.seed } : {}),
    ...(opts.report !== undefined ? { report: opts.report } : {}),
    ...(opts.nodeOutput ? { inheritOutput: true } : {}),
    ...(opts.tls === true ? { tls: true } : {}),
    ...(opts.keepPublishers ? { replacePublishers: false } : {}),
    ...(opts.composeProject !== undefined ? { composeProject: opts.composeProject } : {}),
    ...(opts.tlsDir !== undefined ? { composeTls: { ca: join(opts.tlsDir, 'ca.crt'), cert: join(opts.tlsDir, 'client.crt'), key: join(opts.tlsDir, 'client.key') } } : {}),
  });
  console.log(summaryLine(report));
  if (!report.drainVerified) {
    console.log(`chaos INCONCLUSIVE: the queues could not be drained, the counts are not final (see "drain" in the report); replay with: ${report.replay}`);
    return 2;
  }
  if (!report.ok) {
    console.log(`chaos FAILED: replay with: ${report.replay}`);
    if (report.counts.lost > 0) console.log(`  lost (first ${report.counts.examples.lost.length}): ${report.counts.examples.lost.join(' ')}`);
    if (report.counts.unexpected > 0) console.log(`  unexpected: ${report.counts.examples.unexpected.join(' ')}`);
  } else if (report.counts.dedupViolations > 0) {
    console.log(`chaos: producer dedup violated for ${report.counts.dedupViolations} values (replay: ${report.replay}): ${report.counts.examples.dedupViolations.join(' ')}`);
  }
  if (report.ok && opts.requireAllFaults && (report.kindsMissing.length > 0 || report.faultsSurvived < report.faultsInjected)) {
    const missing = report.kindsMissing.length > 0 ? `never injected (the duration ended first): ${report.kindsMissing.join(', ')}` : '';
    const unrecovered = report.faults.filter((f) => !f.survived).map((f) => f.description);
    console.log(`chaos INCOMPLETE (--require-all-faults): ${[missing, unrecovered.length > 0 ? `not recovered: ${unrecovered.join('; ')}` : ''].filter((x) => x !== '').join('; ')}`);
    return 2;
  }
  return report.ok ? 0 : 1;
}

/**
 * Runs cluster/compose-chaos.sh with the other options, in its own process group, and passes
 * SIGINT / SIGTERM / SIGHUP on to that whole group: the runner inside stops and the script's
 * trap tears the compose project down. Resolves with the script's exit status.
 */
function composeScript(args: string[]): Promise<number> {
  const script = resolve(dirname(fileURLToPath(import.meta.url)), '../../../cluster/compose-chaos.sh');
  const child = spawn('bash', [script, ...args], { stdio: 'inherit', detached: true });
  const forward = (signal: NodeJS.Signals) => () => {
    if (child.pid !== undefined) {
      try {
        process.kill(-child.pid, signal);
      } catch {
        // already gone
      }
    }
  };
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.on(signal, forward(signal));
  return new Promise((resolveStatus) => {
    child.on('error', (error) => {
      console.error(`chaos: could not run ${script}: ${error.message}`);
      resolveStatus(2);
    });
    child.on('exit', (code, signal) => resolveStatus(code ?? (signal !== null ? 128 + 15 : 2)));
  });
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    console.error(error instanceof Error ? (error.stack ?? error.message) : String(error));
    process.exit(2);
  },
);
