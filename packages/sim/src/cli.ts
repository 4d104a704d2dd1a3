#!/usr/bin/env node
import { Command, InvalidArgumentError } from 'commander';
import { SIM_BUGS, runSeed } from './simulation.js';
import type { SimBug, SimResult } from './simulation.js';

function integer(value: string): number {
  const parsed = Number(value);
  if (!Number.isSafeInteger(parsed) || parsed < 0) throw new InvalidArgumentError(`expected a non-negative integer, got "${value}"`);
  return parsed;
}

function bug(value: string, previous: SimBug[] = []): SimBug[] {
  if (!(SIM_BUGS as readonly string[]).includes(value)) {
    throw new InvalidArgumentError(`unknown bug "${value}"; known: ${SIM_BUGS.join(', ')}`);
  }
  return [...previous, value as SimBug];
}

const program = new Command()
  .name('quorumq-sim')
  .description('Deterministic simulation of quorumq Raft groups under network, disk and clock faults')
  .option('--seeds <n>', 'number of seeds to run', integer, 100)
  .option('--from <s>', 'first seed', integer, 0)
  .option('--seed <s>', 'replay exactly one seed and print its trace hash', integer)
  .option('--trace', 'with --seed: print every event')
  .option('--bug <name>', `plant a bug to check that it is caught (${SIM_BUGS.join(', ')})`, bug)
  .option('--stop-on-failure', 'stop at the first failing seed')
  .action(async (options: { seeds: number; from: number; seed?: number; trace?: boolean; bug?: SimBug[]; stopOnFailure?: boolean }) => {
    const bugs = new Set(options.bug ?? []);
    if (options.seed !== undefined) {
      const result = await runSeed({ seed: options.seed, bugs, ...(options.trace === true ? { trace: (line: string) => console.log(line) } : {}) });
      printOne(result);
      process.exitCode = result.ok ? 0 : 1;
      return;
    }
    await runMany(options.from, options.seeds, bugs, options.stopOnFailure === true);
  });

function printOne(result: SimResult): void {
  const f = result.faults;
  console.log(
    `seed ${result.seed}: ${result.ok ? 'ok' : 'FAILED'} nodes=${result.nodeCount} groups=${result.groupCount} events=${result.events} simulated=${result.simulatedMs}ms ` +
      `acknowledged=${result.acknowledged} reads=${result.readsServed} committed=${result.committed} checks=${result.checks} trace=${result.traceHash}`,
  );
  console.log(
    `  faults: dropped=${f.dropped} duplicated=${f.duplicated} partitions=${f.partitions} crashes=${f.crashes} torn=${f.tornWrites} ` +
      `lostUnsyncedBytes=${f.lostUnsyncedBytes} pauses=${f.pauses} transfers=${f.transfers} membership=${f.membershipChanges}`,
  );
  if (result.violation !== null) console.log(`  ${result.violation.message}`);
}

async function runMany(from: number, count: number, bugs: ReadonlySet<SimBug>, stopOnFailure: boolean): Promise<void> {
  const started = process.hrtime.bigint();
  const totals = { dropped: 0, duplicated: 0, partitions: 0, crashes: 0, tornWrites: 0, pauses: 0, transfers: 0, membershipChanges: 0, events: 0, acknowledged: 0 };
  const failed: SimResult[] = [];
  let run = 0;
  for (let seed = from; seed < from + count; seed++) {
    const result = await runSeed({ seed, bugs });
    run++;
    const f = result.faults;
    totals.dropped += f.dropped;
    totals.duplicated += f.duplicated;
    totals.partitions += f.partitions;
    totals.crashes += f.crashes;
    totals.tornWrites += f.tornWrites;
    totals.pauses += f.pauses;
    totals.transfers += f.transfers;
    totals.membershipChanges += f.membershipChanges;
    totals.events += result.events;
    totals.acknowledged += result.acknowledged;
    if (!result.ok) {
      failed.push(result);
      console.log(`FAILED seed ${seed}: ${result.violation?.message ?? 'unknown'} (replay: npm run sim -- --seed ${seed}${[...bugs].map((b) => ` --bug ${b}`).join('')})`);
      if (stopOnFailure) break;
    }
    if (run % 100 === 0) console.log(`  ... ${run} seeds`);
  }
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  console.log(`seeds: ${run} (from ${from}), ${(run / seconds).toFixed(1)} seeds/s, ${seconds.toFixed(1)} s`);
  console.log(
    `faults injected: dropped=${totals.dropped} duplicated=${totals.duplicated} partitions=${totals.partitions} ` +
      `crashes=${totals.crashes} tornWrites=${totals.tornWrites} pauses=${totals.pauses} transfers=${totals.transfers} membershipChanges=${totals.membershipChanges}`,
  );
  console.log(`events: ${totals.events}, proposals acknowledged: ${totals.acknowledged}`);
  console.log(`${run - failed.length} clean, ${failed.length} failed${failed.length > 0 ? `: seeds ${failed.map((r) => r.seed).join(', ')}` : ''}`);
  process.exitCode = failed.length === 0 ? 0 : 1;
}

await program.parseAsync(process.argv);
