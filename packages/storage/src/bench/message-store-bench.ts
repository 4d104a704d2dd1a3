/**
 * Message store benchmark: `npm run bench:store`.
 *
 * (a) put: RECORDS synchronous puts of RECORD_BYTES each (the calls alone, then until the
 *     sync() covering them resolved: written and datasynced);
 * (b) sequential read: every record in put order, in the process that wrote them (served by
 *     read-ahead chunks: one read per MiB);
 * (c) reopen and adopt every record (index files: no scan), then drain: read every record in
 *     order and release it, as a consumer emptying a queue does (sealed segments are deleted
 *     as they empty). The store's cache is cold, the page cache is not (dropping it needs root).
 * Each runs REPEATS times in a fresh directory; the table shows every run and the median.
 * Temp files go to $QUORUMQ_BENCH_DIR or os.tmpdir().
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { HANDLE_SLOT_BYTES, PAGE_SLOTS } from '../message-store/handles.js';
import { MessageStore } from '../message-store/store.js';
import { NodeWalFs } from '../node-wal-fs.js';

const REPEATS = 3;
const RECORDS = 200_000;
const RECORD_BYTES = 1024;
const BYTES_PER_MB = 1_000_000;

interface Run {
  readonly putCallsPerSec: number;
  readonly putDurablePerSec: number;
  readonly readPerSec: number;
  readonly reopenMs: number;
  readonly drainPerSec: number;
  readonly diskBytes: number;
}

async function measure(): Promise<Run> {
  const dir = mkdtempSync(join(process.env['QUORUMQ_BENCH_DIR'] ?? tmpdir(), 'quorumq-bench-store-'));
  const fs = new NodeWalFs();
  const payload = Buffer.alloc(RECORD_BYTES, 0x61);
  try {
    const store = await MessageStore.open({ dir, fs });
    store.recovered();
    const handles = new Int32Array(RECORDS);
    const started = performance.now();
    for (let i = 0; i < RECORDS; i++) {
      payload.writeUInt32LE(i, 0);
      handles[i] = store.put(payload);
    }
    const putDone = performance.now();
    await store.sync();
    const durable = performance.now();
    const diskBytes = store.stats().diskBytes;
    const ids = Array.from(handles, (h) => store.recordId(h));
    const readPerSec = readAll(store, handles, false);
    await store.close();

    const reopening = performance.now();
    const reopened = await MessageStore.open({ dir, fs });
    for (let i = 0; i < RECORDS; i++) {
      const handle = reopened.adopt(ids[i]!);
      if (handle === null) throw new Error(`record ${ids[i]} did not adopt`);
      handles[i] = handle;
    }
    reopened.recovered();
    const reopenMs = performance.now() - reopening;
    const drainPerSec = readAll(reopened, handles, true);
    await reopened.close();
    return {
      putCallsPerSec: RECORDS / ((putDone - started) / 1000),
      putDurablePerSec: RECORDS / ((durable - started) / 1000),
      readPerSec,
      reopenMs,
      drainPerSec,
      diskBytes,
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Reads (checking each record's first bytes), and releases if `release`, every record in order: records/s. */
function readAll(store: MessageStore, handles: Int32Array, release: boolean): number {
  const started = performance.now();
  for (let i = 0; i < handles.length; i++) {
    const bytes = store.read(handles[i]!);
    if (bytes === undefined || bytes.byteLength !== RECORD_BYTES || Buffer.from(bytes.buffer, bytes.byteOffset, 4).readUInt32LE(0) !== i) {
      throw new Error(`record ${i} did not read back`);
    }
    if (release) store.release(handles[i]!);
  }
  return handles.length / ((performance.now() - started) / 1000);
}

function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)]!;
}

function row(label: string, values: readonly number[], digits: number): string {
  const cells = [...values, median(values)].map((v) => v.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits }).padStart(12));
  return `${label.padEnd(40)}${cells.join('')}`;
}

async function main(): Promise<void> {
  console.log(`quorumq message store benchmark: node ${process.version}, ${availableParallelism()} CPUs, dir ${process.env['QUORUMQ_BENCH_DIR'] ?? tmpdir()}`);
  console.log(`${RECORDS.toLocaleString('en-US')} records x ${RECORD_BYTES} B, default options (64 MiB segments, 1 MiB read-ahead, 32 MiB cache)`);
  const runs: Run[] = [];
  for (let i = 0; i < REPEATS; i++) {
    runs.push(await measure());
    console.log(`  run ${i + 1}/${REPEATS}: put ${runs[i]!.putCallsPerSec.toFixed(0)}/s, read ${runs[i]!.readPerSec.toFixed(0)}/s, drain ${runs[i]!.drainPerSec.toFixed(0)}/s`);
  }
  const pick = (f: (run: Run) => number): number[] => runs.map(f);
  const mb = (perSec: number): number => (perSec * RECORD_BYTES) / BYTES_PER_MB;
  const header = `${''.padEnd(40)}${[...Array.from({ length: REPEATS }, (_, i) => `run ${i + 1}`), 'median'].map((h) => h.padStart(12)).join('')}`;
  console.log('');
  console.log(header);
  console.log(row('(a) put calls: records/s', pick((r) => r.putCallsPerSec), 0));
  console.log(row('    put until sync resolved: records/s', pick((r) => r.putDurablePerSec), 0));
  console.log(row('    put until sync resolved: MB/s', pick((r) => mb(r.putDurablePerSec)), 1));
  console.log(row('(b) sequential read: records/s', pick((r) => r.readPerSec), 0));
  console.log(row('    sequential read: MB/s', pick((r) => mb(r.readPerSec)), 1));
  console.log(row('(c) reopen + adopt all (ms)', pick((r) => r.reopenMs), 0));
  console.log(row('    drain (read + release): records/s', pick((r) => r.drainPerSec), 0));
  console.log(row('    drain: MB/s', pick((r) => mb(r.drainPerSec)), 1));
  console.log(row('disk bytes per record', pick((r) => r.diskBytes / RECORDS), 1));
  console.log('');
  console.log(`handle table: ${HANDLE_SLOT_BYTES} bytes per live record, in pages of ${PAGE_SLOTS} slots dropped once empty`);
}

await main();
