/**
 * Queue machine benchmark: `npm run bench:queue`.
 *
 * (a) apply throughput of an enqueue -> deliver -> ack cycle on one core;
 * (b) heap bytes per ready message with a 1,000,000-message backlog (bodies excluded);
 * (c) snapshot size, encode and decode time of that backlog, and the encode time after churn
 *     (a tenth of it consumed from the head and as many enqueued: slots no longer in id order);
 * (d) the longest single enqueue while a queue grows to 4,200,000 messages (its store grows
 *     its columns and its id index on the way: a pause every replica takes at once).
 * Each measurement runs REPEATS times; the table shows every run and the median.
 * Run with `node --expose-gc` (the npm script does) so (b) measures live heap, not garbage.
 */
import { performance } from 'node:perf_hooks';
import { apply, createQueueState, decodeSnapshot, encodeSnapshot, parseQueueArguments } from '@quorumq/queue';
import type { Command, Meta, QueueState } from '@quorumq/queue';

const REPEATS = 3;
const CYCLES = 300_000;
const BACKLOG_MESSAGES = 1_000_000;
const CHURN_MESSAGES = 100_000;
const MESSAGE_BYTES = 1024;
const GROW_MESSAGES = 4_200_000;
const TARGET_COMMANDS_PER_SEC = 500_000;
const TARGET_BYTES_PER_MESSAGE = 64;

const gc: (() => void) | undefined = (globalThis as { gc?: () => void }).gc;

function newQueue(): QueueState {
  return createQueueState('bench', parseQueueArguments({}), 0);
}

/** One consumer with prefetch 1: every enqueue is delivered at once and acked next. */
function measureCycle(): number {
  let state = newQueue();
  let index = 1;
  const meta = (): Meta => ({ index: index++, term: 1, now: 0 });
  state = apply(meta(), { type: 'subscribe', consumerId: 'c', prefetch: 1 }, state).state;
  const enqueue: Command = { type: 'enqueue', sizeBytes: MESSAGE_BYTES, exchange: '', routingKeys: ['bench'] };
  let commands = 0;
  const started = performance.now();
  for (let i = 0; i < CYCLES; i++) {
    const result = apply(meta(), enqueue, state);
    state = result.state;
    const deliver = result.effects[0];
    if (deliver === undefined || deliver.type !== 'deliver') throw new Error('expected a delivery');
    state = apply(meta(), { type: 'ack', consumerId: 'c', deliveryTag: deliver.deliveryTag }, state).state;
    commands += 2;
  }
  return commands / ((performance.now() - started) / 1000);
}

/** The longest apply of one enqueue, in ms, while a queue grows to GROW_MESSAGES messages. */
function measureLongestEnqueue(): number {
  let state = newQueue();
  const enqueue: Command = { type: 'enqueue', sizeBytes: MESSAGE_BYTES, exchange: '', routingKeys: ['bench'] };
  let longest = 0;
  for (let i = 1; i <= GROW_MESSAGES; i++) {
    const started = performance.now();
    state = apply({ index: i, term: 1, now: 0 }, enqueue, state).state;
    longest = Math.max(longest, performance.now() - started);
  }
  return longest;
}

/** JS heap plus typed-array storage (which V8 keeps outside heapUsed). */
function liveBytes(): number {
  const usage = process.memoryUsage();
  return usage.heapUsed + usage.arrayBuffers;
}

interface BacklogRun {
  readonly bytesPerMessage: number;
  readonly snapshotBytes: number;
  readonly snapshotMs: number;
  readonly decodeMs: number;
  readonly churnedSnapshotMs: number;
}

/** Full collections, with pauses so that freed typed-array memory is also returned. */
async function settleHeap(): Promise<void> {
  for (let round = 0; round < 3; round++) {
    gc?.();
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

async function measureBacklog(): Promise<BacklogRun> {
  await settleHeap();
  const before = liveBytes();
  let state = newQueue();
  const enqueue: Command = { type: 'enqueue', sizeBytes: MESSAGE_BYTES, exchange: '', routingKeys: ['bench'] };
  for (let i = 1; i <= BACKLOG_MESSAGES; i++) state = apply({ index: i, term: 1, now: 0 }, enqueue, state).state;
  await settleHeap();
  const bytesPerMessage = (liveBytes() - before) / BACKLOG_MESSAGES;
  const started = performance.now();
  const bytes = encodeSnapshot(state);
  const snapshotMs = performance.now() - started;
  const decodeStarted = performance.now();
  decodeSnapshot(bytes);
  const decodeMs = performance.now() - decodeStarted;
  // Churn: consume from the head and enqueue at the tail, freed slots are reused out of id order.
  let index = BACKLOG_MESSAGES + 1;
  for (let i = 0; i < CHURN_MESSAGES; i++) {
    state = apply({ index: index++, term: 1, now: 0 }, { type: 'get', ackMode: 'auto' }, state).state;
    if (i % 100 === 99) for (let j = 0; j < 100; j++) state = apply({ index: index++, term: 1, now: 0 }, enqueue, state).state;
  }
  await settleHeap();
  const churnStarted = performance.now();
  encodeSnapshot(state);
  const churnedSnapshotMs = performance.now() - churnStarted;
  return { bytesPerMessage, snapshotBytes: bytes.byteLength, snapshotMs, decodeMs, churnedSnapshotMs };
}

function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] ?? NaN;
}

function row(label: string, values: readonly number[], format: (v: number) => string): string {
  return `${label.padEnd(48)}${values.map((v) => format(v).padStart(12)).join('')}${format(median(values)).padStart(12)}`;
}

async function main(): Promise<void> {
  if (gc === undefined) console.log('note: run with --expose-gc for an exact heap figure');
  console.log(`quorumq queue machine benchmark: node ${process.version}`);
  const cycles: number[] = [];
  const backlogs: BacklogRun[] = [];
  // Throughput first: a 1M-message heap left behind by (b) would slow (a) down.
  for (let run = 1; run <= REPEATS; run++) cycles.push(measureCycle());
  for (let run = 1; run <= REPEATS; run++) {
    backlogs.push(await measureBacklog());
    console.log(`  backlog run ${run}/${REPEATS} done`);
  }
  const longest: number[] = [];
  for (let run = 1; run <= REPEATS; run++) {
    await settleHeap();
    longest.push(measureLongestEnqueue());
  }
  const int = (v: number): string => Math.round(v).toLocaleString('en-US');
  const one = (v: number): string => v.toFixed(1);
  console.log(`\n${''.padEnd(48)}${[1, 2, 3].map((r) => `run ${r}`.padStart(12)).join('')}${'median'.padStart(12)}`);
  console.log(row('(a) enqueue/deliver/ack commands/s', cycles, int));
  console.log(row('(b) heap bytes per ready message (1M backlog)', backlogs.map((b) => b.bytesPerMessage), one));
  console.log(row('(c) snapshot bytes (1M backlog)', backlogs.map((b) => b.snapshotBytes), int));
  console.log(row('    snapshot encode ms', backlogs.map((b) => b.snapshotMs), one));
  console.log(row('    snapshot bytes per message', backlogs.map((b) => b.snapshotBytes / BACKLOG_MESSAGES), one));
  console.log(row('    snapshot decode ms', backlogs.map((b) => b.decodeMs), one));
  console.log(row('    snapshot encode ms after churn', backlogs.map((b) => b.churnedSnapshotMs), one));
  console.log(row('(d) longest enqueue ms, growing to 4.2M', longest, one));
  const throughput = median(cycles);
  const perMessage = median(backlogs.map((b) => b.bytesPerMessage));
  console.log(`\ntarget >= ${int(TARGET_COMMANDS_PER_SEC)} commands/s: ${throughput >= TARGET_COMMANDS_PER_SEC ? 'met' : 'NOT met'}`);
  console.log(`target <= ${TARGET_BYTES_PER_MESSAGE} bytes per ready message: ${perMessage <= TARGET_BYTES_PER_MESSAGE ? 'met' : 'NOT met'}`);
}

await main();
