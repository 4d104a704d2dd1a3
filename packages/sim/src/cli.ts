#!/usr/bin/env node
import { Command, InvalidArgumentError } from 'commander';
import { SIM_BUGS, runSeed } from './simulation.js';
import type { SimBug, SimResult } from './simulation.js';
import { BROKER_SIM_BUGS, runBrokerSeed, type BrokerSimBug, type BrokerSimResult } from './broker/broker-simulation.js';

function integer(value: string): number {
  const parsed = Number(value);
  if (!Number.isSafeInteger(parsed) || parsed < 0) throw new InvalidArgumentError(`expected a non-negative integer, got "${value}"`);
  return parsed;
}

const ALL_BUGS: readonly string[] = [...new Set<string>([...SIM_BUGS, ...BROKER_SIM_BUGS])];

function bug(value: string, previous: string[] = []): string[] {
  if (!ALL_BUGS.includes(value)) throw new InvalidArgumentError(`unknown bug "${value}"; known: ${ALL_BUGS.join(', ')}`);
  return [...previous, value];
}

const program = new Command()
  .name('quorumq-sim')
  .description('Deterministic simulation of quorumq under network, disk and clock faults: Raft groups on the broker\'s driver, or (--broker) whole broker nodes with clients')
  .option('--broker', 'simulate three broker nodes (queue replicas, dead-lettering, forwarding) and check queue-level promises')
  .option('--seeds <n>', 'number of seeds to run', integer, 100)
  .option('--from <s>', 'first seed', integer, 0)
  .option('--seed <s>', 'replay exactly one seed and print its trace hash', integer)
  .option('--trace', 'with --seed: print every event')
  .option('--bug <name>', `plant a bug to check that it is caught (Raft: ${SIM_BUGS.join(', ')}; broker: ${BROKER_SIM_BUGS.join(', ')})`, bug)
  .option('--stop-on-failure', 'stop at the first failing seed')
  .option('--no-idle-checks', "with --broker: leave out the nodes' periodic idle checks (memory that follows work), which run by default")
  .action(async (options: { seeds: number; from: number; seed?: number; trace?: boolean; bug?: string[]; stopOnFailure?: boolean; broker?: boolean; idleChecks?: boolean }) => {
    if (options.broker === true) {
      const bugs = brokerBugs(options.bug ?? []);
      const idleChecks = options.idleChecks !== false;
      if (options.seed !== undefined) {
        const result = await runBrokerSeed({ seed: options.seed, bugs, idleChecks, ...(options.trace === true ? { trace: (line: string) => console.log(line) } : {}) });
        printBroker(result);
        process.exitCode = result.ok ? 0 : 1;
        return;
      }
      await runManyBroker(options.from, options.seeds, bugs, options.stopOnFailure === true, idleChecks);
      return;
    }
    const unknown = (options.bug ?? []).filter((b) => !(SIM_BUGS as readonly string[]).includes(b));
    if (unknown.length > 0) throw new InvalidArgumentError(`not a Raft-level bug: ${unknown.join(', ')} (use --broker)`);
    const bugs = new Set((options.bug ?? []) as SimBug[]);
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
      `lostUnsyncedBytes=${f.lostUnsyncedBytes} pauses=${f.pauses} transfers=${f.transfers} membership=${f.membershipChanges} storageFaults=${f.storageFaults}`,
  );
  if (result.violation !== null) console.log(`  ${result.violation.message}`);
}

async function runMany(from: number, count: number, bugs: ReadonlySet<SimBug>, stopOnFailure: boolean): Promise<void> {
  const started = process.hrtime.bigint();
  const totals = { dropped: 0, duplicated: 0, partitions: 0, crashes: 0, tornWrites: 0, pauses: 0, transfers: 0, membershipChanges: 0, storageFaults: 0, events: 0, acknowledged: 0 };
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
    totals.storageFaults += f.storageFaults;
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
      `crashes=${totals.crashes} tornWrites=${totals.tornWrites} pauses=${totals.pauses} transfers=${totals.transfers} membershipChanges=${totals.membershipChanges} storageFaults=${totals.storageFaults}`,
  );
  console.log(`events: ${totals.events}, proposals acknowledged: ${totals.acknowledged}`);
  console.log(`${run - failed.length} clean, ${failed.length} failed${failed.length > 0 ? `: seeds ${failed.map((r) => r.seed).join(', ')}` : ''}`);
  process.exitCode = failed.length === 0 ? 0 : 1;
}

function brokerBugs(names: readonly string[]): Set<BrokerSimBug> {
  const unknown = names.filter((b) => !(BROKER_SIM_BUGS as readonly string[]).includes(b));
  if (unknown.length > 0) throw new InvalidArgumentError(`not a broker-level bug: ${unknown.join(', ')}; known: ${BROKER_SIM_BUGS.join(', ')}`);
  return new Set(names as BrokerSimBug[]);
}

function printBroker(result: BrokerSimResult): void {
  console.log(
    `seed ${result.seed}: ${result.ok ? 'ok' : 'FAILED'} events=${result.events} simulated=${result.simulatedMs}ms confirmed=${result.confirmed} ` +
      `acked=${result.acked} deadLettered=${result.deadLettered} moved=${result.moved} compacted=${result.compacted} crashes=${result.crashes} storageFaults=${result.storageFaults} partitions=${result.partitions}` +
      `${result.replaced !== null ? ` replaced=${result.replaced}` : ''} trace=${result.traceHash}`,
  );
  if (result.violation !== null) console.log(`  ${result.violation.message}`);
}

async function runManyBroker(from: number, count: number, bugs: ReadonlySet<BrokerSimBug>, stopOnFailure: boolean, idleChecks: boolean): Promise<void> {
  const started = process.hrtime.bigint();
  const failed: number[] = [];
  const totals = { events: 0, confirmed: 0, acked: 0, deadLettered: 0, moved: 0, compacted: 0, crashes: 0, storageFaults: 0, partitions: 0, replaced: 0 };
  let run = 0;
  for (let seed = from; seed < from + count; seed++) {
    const result = await runBrokerSeed({ seed, bugs, idleChecks });
    run++;
    totals.events += result.events;
    totals.confirmed += result.confirmed;
    totals.acked += result.acked;
    totals.deadLettered += result.deadLettered;
    totals.moved += result.moved;
    totals.compacted += result.compacted;
    totals.crashes += result.crashes;
    totals.storageFaults += result.storageFaults;
    totals.partitions += result.partitions;
    if (result.replaced !== null) totals.replaced++;
    if (!result.ok) {
      failed.push(seed);
      console.log(`FAILED seed ${seed}: ${result.violation?.message ?? 'unknown'} (replay: npm run sim -- --broker --seed ${seed}${idleChecks ? '' : ' --no-idle-checks'}${[...bugs].map((b) => ` --bug ${b}`).join('')})`);
      if (stopOnFailure) break;
    }
    if (run % 100 === 0) console.log(`  ... ${run} seeds`);
  }
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  console.log(`broker seeds: ${run} (from ${from}), ${(run / seconds).toFixed(1)} seeds/s, ${seconds.toFixed(1)} s`);
  console.log(
    `messages confirmed=${totals.confirmed} acked=${totals.acked} deadLettered=${totals.deadLettered} moved=${totals.moved} compacted=${totals.compacted}; faults crashes=${totals.crashes} storageFaults=${totals.storageFaults} partitions=${totals.partitions}; a founder replaced by a joining node in ${totals.replaced} seeds; events=${totals.events}`,
  );
  console.log(`${run - failed.length} clean, ${failed.length} failed${failed.length > 0 ? `: seeds ${failed.join(', ')}` : ''}`);
  process.exitCode = failed.length === 0 ? 0 : 1;
}

await program.parseAsync(process.argv);
