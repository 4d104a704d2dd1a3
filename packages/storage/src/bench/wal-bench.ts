/**
 * WAL benchmark: `npm run bench:wal`.
 *
 * (a) the raw bound of this disk: one process writing 4 KiB + fdatasync in a loop;
 * (b) the WAL with group commit: many appenders (one per "group"), each keeping one append
 *     of one 1 KiB entry in flight, as a Raft driver with one Ready in flight per group does.
 * Each measurement runs REPEATS times (interleaved, so both see the same disk state); the
 * table shows every run and the median. Temp files go to $QUORUMQ_BENCH_DIR or os.tmpdir().
 */
import { closeSync, fdatasyncSync, mkdtempSync, openSync, rmSync, writeSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { NodeWalFs } from '../node-wal-fs.js';
import type { WalRecord } from '../record.js';
import { Wal } from '../wal.js';

const REPEATS = 3;
const RAW_DURATION_MS = 3_000;
const RAW_WRITE_BYTES = 4 * 1024;
const WAL_DURATION_MS = 5_000;
const WAL_APPENDERS = 256;
const RECORD_PAYLOAD_BYTES = 1024;
const TARGET_RECORDS_PER_SEC = 50_000;
const BYTES_PER_MB = 1_000_000;

interface WalRun {
  readonly recordsPerSec: number;
  readonly mbPerSec: number;
  readonly medianBatch: number;
  readonly p50Ms: number;
  readonly p99Ms: number;
}

function benchDir(label: string): string {
  return mkdtempSync(join(process.env['QUORUMQ_BENCH_DIR'] ?? tmpdir(), `quorumq-bench-${label}-`));
}

/** fdatasync calls per second when each one covers a fresh 4 KiB append. */
function measureRawFdatasync(): number {
  const dir = benchDir('raw');
  const fd = openSync(join(dir, 'raw.bin'), 'a');
  const block = Buffer.alloc(RAW_WRITE_BYTES, 0x61);
  let syncs = 0;
  const started = performance.now();
  try {
    while (performance.now() - started < RAW_DURATION_MS) {
      writeSync(fd, block);
      fdatasyncSync(fd);
      syncs++;
    }
  } finally {
    closeSync(fd);
    rmSync(dir, { recursive: true, force: true });
  }
  return syncs / ((performance.now() - started) / 1000);
}

async function measureWal(): Promise<WalRun> {
  const dir = benchDir('wal');
  const batches: number[] = [];
  let bytes = 0;
  const wal = await Wal.open(
    {
      dir,
      fs: new NodeWalFs(),
      onFlush: (stats) => {
        batches.push(stats.records);
        bytes += stats.bytes;
      },
    },
    () => {},
  );
  const payload = new Uint8Array(RECORD_PAYLOAD_BYTES).fill(0x62);
  const latencies: number[] = [];
  const started = performance.now();
  const deadline = started + WAL_DURATION_MS;
  const appender = async (groupId: string): Promise<void> => {
    for (let index = 1; performance.now() < deadline; index++) {
      const record: WalRecord = { kind: 'entry', groupId, entry: { index, term: 1, type: 'normal', data: payload } };
      const sent = performance.now();
      await wal.append([record]);
      latencies.push(performance.now() - sent);
    }
  };
  try {
    await Promise.all(Array.from({ length: WAL_APPENDERS }, (_, g) => appender(`group-${g}`)));
    const seconds = (performance.now() - started) / 1000;
    latencies.sort((a, b) => a - b);
    return {
      recordsPerSec: latencies.length / seconds,
      mbPerSec: bytes / BYTES_PER_MB / seconds,
      medianBatch: percentile(batches.sort((a, b) => a - b), 0.5),
      p50Ms: percentile(latencies, 0.5),
      p99Ms: percentile(latencies, 0.99),
    };
  } finally {
    await wal.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

/** The value at quantile q of an ascending array. */
function percentile(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
}

function median(values: readonly number[]): number {
  return percentile([...values].sort((a, b) => a - b), 0.5);
}

function row(label: string, values: readonly number[], digits: number): string {
  const cells = [...values, median(values)].map((v) => v.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits }).padStart(12));
  return `${label.padEnd(40)}${cells.join('')}`;
}

async function main(): Promise<void> {
  console.log(`quorumq WAL benchmark: node ${process.version}, ${availableParallelism()} CPUs, dir ${process.env['QUORUMQ_BENCH_DIR'] ?? tmpdir()}`);
  console.log(
    `raw: ${RAW_WRITE_BYTES} B write + fdatasync for ${RAW_DURATION_MS / 1000} s; ` +
      `WAL: ${WAL_APPENDERS} appenders x 1 in-flight append of a ${RECORD_PAYLOAD_BYTES} B entry for ${WAL_DURATION_MS / 1000} s`,
  );
  const raw: number[] = [];
  const runs: WalRun[] = [];
  for (let i = 0; i < REPEATS; i++) {
    raw.push(measureRawFdatasync());
    runs.push(await measureWal());
    console.log(`  run ${i + 1}/${REPEATS}: raw ${raw[i]!.toFixed(0)} fdatasync/s, WAL ${runs[i]!.recordsPerSec.toFixed(0)} records/s`);
  }
  const header = `${''.padEnd(40)}${[...Array.from({ length: REPEATS }, (_, i) => `run ${i + 1}`), 'median'].map((h) => h.padStart(12)).join('')}`;
  const pick = (f: (run: WalRun) => number): number[] => runs.map(f);
  const walRecords = median(pick((r) => r.recordsPerSec));
  const rawSyncs = median(raw);
  console.log('');
  console.log(header);
  console.log(row('(a) raw fdatasync/s (4 KiB appends)', raw, 0));
  console.log(row('(b) WAL records/s (1 KiB entries)', pick((r) => r.recordsPerSec), 0));
  console.log(row('    WAL MB/s written', pick((r) => r.mbPerSec), 1));
  console.log(row('    median batch (records per fdatasync)', pick((r) => r.medianBatch), 0));
  console.log(row('    append latency p50 (ms)', pick((r) => r.p50Ms), 2));
  console.log(row('    append latency p99 (ms)', pick((r) => r.p99Ms), 2));
  console.log('');
  console.log(`ratio WAL records/s / raw fdatasync/s (medians): ${(walRecords / rawSyncs).toFixed(1)}`);
  const verdict = walRecords >= TARGET_RECORDS_PER_SEC ? 'met' : 'NOT met';
  console.log(`target >= ${TARGET_RECORDS_PER_SEC.toLocaleString('en-US')} records/s: ${verdict}`);
}

await main();
