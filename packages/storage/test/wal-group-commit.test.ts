import { constants } from 'node:fs';
import { readdir, readFile, readlink, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { WalClosedError, WalDiskFullError, WalFatalError, WalWriteError } from '../src/errors.js';
import { RECORD_BYTES_MIN, scanSegment, type WalRecord } from '../src/record.js';
import { NodeWalFs } from '../src/node-wal-fs.js';
import { segmentFileName, Wal, type FlushStats } from '../src/wal.js';
import {
  entryRecord,
  errnoError,
  hardStateRecord,
  InstrumentedFs,
  plain,
  removeTempDirs,
  tempDir,
  turns,
  walFiles,
} from './helpers.js';

afterEach(removeTempDirs);

interface Harness {
  wal: Wal;
  fs: InstrumentedFs;
  flushes: FlushStats[];
  fatal: WalFatalError[];
}

async function open(dir: string, segmentBytesMax?: number): Promise<Harness> {
  const fs = new InstrumentedFs();
  const flushes: FlushStats[] = [];
  const fatal: WalFatalError[] = [];
  const wal = await Wal.open(
    {
      dir,
      fs,
      ...(segmentBytesMax === undefined ? {} : { segmentBytesMax }),
      onFlush: (stats) => flushes.push(stats),
      onFatal: (error) => fatal.push(error),
    },
    () => {},
  );
  return { wal, fs, flushes, fatal };
}

async function replay(dir: string, segmentBytesMax?: number): Promise<unknown[]> {
  const records: unknown[] = [];
  const wal = await Wal.open(
    { dir, fs: new InstrumentedFs(), ...(segmentBytesMax === undefined ? {} : { segmentBytesMax }) },
    (record) => records.push(plain(record)),
  );
  await wal.close();
  return records;
}

function resetCalls(fs: InstrumentedFs): void {
  for (const key of Object.keys(fs.calls) as Array<keyof InstrumentedFs['calls']>) fs.calls[key] = 0;
}

/** A gate that holds datasyncs until opened. */
function gate(): { promise: Promise<void>; open: () => void } {
  let open!: () => void;
  const promise = new Promise<void>((resolve) => (open = resolve));
  return { promise, open };
}

/**
 * Waits, turn by turn, until `condition` holds, for up to `ms` of wall time: a bound in turns
 * alone ran out while a real write was still on a loaded disk (a turn can take 2 µs).
 */
async function until(condition: () => boolean, ms = 15_000): Promise<void> {
  const deadline = performance.now() + ms;
  while (!condition() && performance.now() < deadline) await turns(1);
  expect(condition()).toBe(true);
}

describe('WAL group commit', { timeout: 30_000 }, () => {
  it('sends everything queued in one turn out in one durable write', async () => {
    const dir = await tempDir('gc-one-turn');
    const { wal, fs, flushes } = await open(dir);
    resetCalls(fs);
    const appends = Array.from({ length: 200 }, (_, i) => wal.append([entryRecord(`g${i % 17}`, i + 1)]));
    await Promise.all(appends);
    expect(fs.calls.appendDurable).toBe(1);
    expect(fs.calls.writev + fs.calls.write).toBe(1);
    expect(fs.calls.datasync).toBe(1);
    expect(flushes).toEqual([expect.objectContaining({ appends: 200, records: 200, segments: 1 })]);
    await wal.close();
    expect(await replay(dir)).toHaveLength(200);
  });

  it('writes its segments through O_DSYNC on the real disk (the write itself is durable), by position (no O_APPEND: a preallocated runway lies past the data)', async () => {
    const dir = await tempDir('gc-dsync');
    const wal = await Wal.open({ dir, fs: new NodeWalFs() }, () => {});
    await wal.append([entryRecord('a', 1)]);
    const segment = join(dir, segmentFileName(1));
    const flags: number[] = [];
    for (const fd of await readdir('/proc/self/fd')) {
      const target = await readlink(`/proc/self/fd/${fd}`).catch(() => '');
      if (target !== segment) continue;
      const info = await readFile(`/proc/self/fdinfo/${fd}`, 'utf8').catch(() => '');
      const match = /^flags:\s+([0-7]+)$/m.exec(info);
      if (match !== null) flags.push(parseInt(match[1]!, 8));
    }
    expect(flags).toHaveLength(1);
    expect(flags[0]! & constants.O_DSYNC).toBe(constants.O_DSYNC);
    expect(flags[0]! & constants.O_APPEND).toBe(0);
    await wal.close();
  });

  it('lazy records start no flush: they go with the next flush that was asked for, in order', async () => {
    const dir = await tempDir('gc-lazy');
    const { wal, fs, flushes } = await open(dir);
    resetCalls(fs);
    let lazyDurable = false;
    const lazy = wal.enqueue([hardStateRecord('g', { term: 1, vote: null, commit: 1 })], undefined, 'lazy');
    void lazy.durable.then(() => (lazyDurable = true));
    await turns(10);
    expect(fs.calls.writev + fs.calls.write).toBe(0);
    expect(fs.calls.datasync).toBe(0);
    expect(lazyDurable).toBe(false);
    await wal.append([entryRecord('g', 2)]);
    expect(lazyDurable).toBe(true);
    expect(fs.calls.datasync).toBe(1);
    expect(flushes).toEqual([expect.objectContaining({ appends: 2, records: 2 })]);
    // Lazy records queued while a flush is in flight do not start another one.
    const held = gate();
    fs.datasyncGate = held.promise;
    const urgent = wal.append([entryRecord('g', 3)]);
    await until(() => fs.calls.datasync === 2);
    const late = wal.enqueue([hardStateRecord('g', { term: 1, vote: null, commit: 3 })], undefined, 'lazy');
    fs.datasyncGate = null;
    held.open();
    await urgent;
    await turns(10);
    expect(fs.calls.datasync).toBe(2);
    // Close writes what is still queued.
    await wal.close();
    await late.durable;
    expect(await replay(dir)).toEqual([
      plain(hardStateRecord('g', { term: 1, vote: null, commit: 1 })),
      plain(entryRecord('g', 2)),
      plain(entryRecord('g', 3)),
      plain(hardStateRecord('g', { term: 1, vote: null, commit: 3 })),
    ]);
  });

  it('queues appends made while a flush is in flight into the next flush', async () => {
    const dir = await tempDir('gc-in-flight');
    const { wal, fs, flushes } = await open(dir);
    resetCalls(fs);
    const held = gate();
    fs.datasyncGate = held.promise;
    const first = Array.from({ length: 10 }, (_, i) => wal.append([entryRecord('a', i + 1)]));
    await until(() => fs.calls.datasync === 1);
    const second = Array.from({ length: 30 }, (_, i) => wal.append([entryRecord('b', i + 1)]));
    await turns(5);
    expect(fs.calls.writev).toBe(1); // the second batch waits for the first datasync
    fs.datasyncGate = null;
    held.open();
    await Promise.all([...first, ...second]);
    expect(fs.calls.writev).toBe(2);
    expect(fs.calls.datasync).toBe(2);
    expect(flushes.map((f) => f.records)).toEqual([10, 30]);
    await wal.close();
  });

  it('records queued while a write is held do not overwrite the bytes being written (reused encode buffers)', async () => {
    const dir = await tempDir('gc-arenas');
    const { wal, fs } = await open(dir);
    const expected: unknown[] = [];
    const appends: Array<Promise<void>> = [];
    let index = 0;
    const batch = (group: string, n: number, size: number): void => {
      for (let i = 0; i < n; i++) {
        index += 1;
        const record = entryRecord(group, index, 1, `${group}:${index}:`.padEnd(size, String.fromCharCode(97 + (index % 26))));
        expected.push(plain(record));
        appends.push(wal.append([record]));
      }
    };
    for (let round = 0; round < 4; round++) {
      const writes = fs.calls.writev;
      const held = gate();
      fs.writeGate = held.promise;
      batch(`r${round}a`, 20, 900);
      await until(() => fs.calls.writev === writes + 1);
      // While that write waits, the round's second batch queues; the third queues while the second is written.
      batch(`r${round}b`, 25, 1500);
      await turns(3);
      expect(fs.calls.writev).toBe(writes + 1);
      fs.writeGate = null;
      held.open();
      await until(() => fs.calls.writev === writes + 2);
      batch(`r${round}c`, 10, 3000);
      await Promise.all(appends);
      expect(fs.calls.writev).toBe(writes + 3);
    }
    // A batch larger than a reusable buffer gets its own.
    batch('big', 3, 3 * 1024 * 1024);
    await Promise.all(appends);
    await wal.close();
    expect(await replay(dir)).toEqual(expected);
  });

  it('resolves nothing before the datasync covering it returned', async () => {
    const dir = await tempDir('gc-no-early-ack');
    const { wal, fs } = await open(dir);
    const held = gate();
    fs.datasyncGate = held.promise;
    let resolved = 0;
    const appends = Array.from({ length: 5 }, (_, i) => wal.append([entryRecord('a', i + 1)]).then(() => resolved++));
    await until(() => fs.calls.datasync >= 1);
    await turns(20);
    expect(resolved).toBe(0);
    fs.datasyncGate = null;
    held.open();
    await Promise.all(appends);
    expect(resolved).toBe(5);
    await wal.close();
  });

  it('fails fatally on a datasync error: pending, queued and later appends reject', async () => {
    const dir = await tempDir('gc-fsync-fail');
    const { wal, fs, fatal } = await open(dir);
    await wal.append([entryRecord('a', 1)]);
    const held = gate();
    fs.datasyncGate = held.promise;
    fs.datasyncFault = errnoError('EIO');
    const inFlight = wal.append([entryRecord('a', 2)]);
    await until(() => fs.calls.datasync >= 2);
    const queued = wal.append([entryRecord('a', 3)]);
    held.open();
    await expect(inFlight).rejects.toBeInstanceOf(WalFatalError);
    await expect(queued).rejects.toBeInstanceOf(WalFatalError);
    await expect(wal.append([entryRecord('a', 4)])).rejects.toBeInstanceOf(WalFatalError);
    expect(fatal).toHaveLength(1);
    expect(fatal[0]!.message).toMatch(/fdatasync.*EIO/);
    expect(wal.fatalError).toBe(fatal[0]);
    await wal.close();
  });

  it('rolls back a write that hits ENOSPC: batch rejected, file at its previous length', async () => {
    const dir = await tempDir('gc-enospc');
    const { wal, fs, fatal } = await open(dir);
    await wal.append([entryRecord('a', 1), entryRecord('a', 2)]);
    const path = join(dir, segmentFileName(1));
    // Its data (a zero-filled runway may follow: the rollback cuts that too).
    const before = (await readFile(path)).subarray(0, wal.usage().bytes);
    fs.writeFault = { error: errnoError('ENOSPC'), partialBytes: 40 };
    const failed = wal.append([entryRecord('a', 3, 1, 'x'.repeat(100)), entryRecord('b', 1)]);
    await expect(failed).rejects.toBeInstanceOf(WalDiskFullError);
    await expect(failed).rejects.toMatchObject({ code: 'ERR_WAL_DISK_FULL' });
    expect(await readFile(path)).toEqual(before);
    expect(fatal).toHaveLength(0);
    fs.writeFault = null;
    await wal.append([entryRecord('a', 3, 2)]); // the disk has room again
    await wal.close();
    expect(await replay(dir)).toEqual([entryRecord('a', 1), entryRecord('a', 2), entryRecord('a', 3, 2)].map(plain));
  });

  it('rejects appends queued behind a failed write too (they may depend on it)', async () => {
    const dir = await tempDir('gc-enospc-queued');
    const { wal, fs } = await open(dir);
    await wal.append([entryRecord('a', 1)]);
    const held = gate();
    fs.writeGate = held.promise;
    fs.writeFault = { error: errnoError('EFBIG'), partialBytes: 7 };
    const failing = wal.append([entryRecord('a', 2)]);
    await until(() => fs.calls.writev >= 2);
    const behind = wal.append([entryRecord('a', 3)]);
    fs.writeGate = null;
    held.open();
    await expect(failing).rejects.toBeInstanceOf(WalWriteError);
    await expect(failing).rejects.not.toBeInstanceOf(WalDiskFullError);
    await expect(behind).rejects.toBeInstanceOf(WalWriteError);
    fs.writeFault = null;
    await wal.append([entryRecord('a', 2, 2)]);
    await wal.close();
    expect(await replay(dir)).toEqual([entryRecord('a', 1), entryRecord('a', 2, 2)].map(plain));
  });

  it('fails fatally on a durable write that fails for another reason than room (EIO)', async () => {
    const dir = await tempDir('gc-write-eio');
    const { wal, fs, fatal } = await open(dir);
    await wal.append([entryRecord('a', 1)]);
    fs.writeFault = { error: errnoError('EIO'), partialBytes: 7 };
    await expect(wal.append([entryRecord('a', 2)])).rejects.toBeInstanceOf(WalFatalError);
    expect(fatal).toHaveLength(1);
    expect(fatal[0]!.message).toMatch(/durable write.*segment 1.*EIO/);
    fs.writeFault = null;
    await expect(wal.append([entryRecord('a', 3)])).rejects.toBeInstanceOf(WalFatalError);
    await wal.close();
    // Recovery keeps what was durable and cuts the partial record off as a torn tail.
    expect(await replay(dir)).toEqual([entryRecord('a', 1)].map(plain));
  });

  it('fails fatally when a failed write cannot be truncated away', async () => {
    const dir = await tempDir('gc-truncate-fail');
    const { wal, fs, fatal } = await open(dir);
    fs.writeFault = { error: errnoError('ENOSPC'), partialBytes: 10 };
    fs.truncateFault = errnoError('EIO');
    await expect(wal.append([entryRecord('a', 1)])).rejects.toBeInstanceOf(WalFatalError);
    expect(fatal).toHaveLength(1);
    expect(fatal[0]!.message).toMatch(/truncating/);
    await expect(wal.append([entryRecord('a', 2)])).rejects.toBeInstanceOf(WalFatalError);
    await wal.close();
  });

  it('rolls segments so that no record straddles two and segments stay under the limit', async () => {
    const dir = await tempDir('gc-roll');
    const segmentBytesMax = 1000;
    const { wal } = await open(dir, segmentBytesMax);
    const expected: WalRecord[] = [];
    let index = 0;
    for (let round = 0; round < 30; round++) {
      const appends: Promise<void>[] = [];
      for (let n = 0; n < (round % 4) + 1; n++) {
        const batch = Array.from({ length: (n % 3) + 1 }, () => entryRecord('g', ++index, 1, 'p'.repeat(index % 70)));
        expected.push(...batch);
        appends.push(wal.append(batch));
      }
      await Promise.all(appends);
    }
    const oversized = entryRecord('g', ++index, 1, 'q'.repeat(2 * segmentBytesMax));
    expected.push(oversized);
    await wal.append([oversized]);
    await wal.close();
    const files = await walFiles(dir);
    expect(files.length).toBeGreaterThan(5);
    for (const file of files) {
      const bytes = await readFile(join(dir, file));
      expect(scanSegment(bytes, false).status).toBe('clean');
      const records = scanSegment(bytes, false).records.length;
      expect(bytes.length <= segmentBytesMax || records === 1, `${file}: ${bytes.length} bytes`).toBe(true);
    }
    expect(await replay(dir, segmentBytesMax)).toEqual(expected.map(plain));
  });

  it('reports the segment files and their bytes as they are on disk (usage), after rolls, deletions and a reopen', async () => {
    const dir = await tempDir('gc-usage');
    const segmentBytesMax = 1000;
    // The active segment may hold a zero-filled runway past its data, up to the segment size;
    // every other segment ends with its data (sealed before the next one starts).
    const onDisk = async (): Promise<{ segments: number; bytes: number }> => {
      const files = (await walFiles(dir)).sort();
      let bytes = 0;
      for (const file of files.slice(0, -1)) bytes += (await stat(join(dir, file))).size;
      return { segments: files.length, bytes };
    };
    const activeBytes = async (): Promise<number> => (await stat(join(dir, (await walFiles(dir)).sort().at(-1)!))).size;
    const expectOnDisk = async (wal: Wal): Promise<void> => {
      const usage = wal.usage();
      // Nothing is in flight here: segments() lists every closed segment.
      const active = usage.bytes - wal.segments().reduce((sum, segment) => sum + segment.bytes, 0);
      expect({ segments: usage.segments, bytes: usage.bytes - active }).toEqual(await onDisk());
      expect(await activeBytes()).toBeGreaterThanOrEqual(active);
      expect(await activeBytes()).toBeLessThanOrEqual(Math.max(active, segmentBytesMax));
    };
    const { wal } = await open(dir, segmentBytesMax);
    await expectOnDisk(wal);
    for (let index = 1; index <= 40; index++) await wal.append([entryRecord('g', index, 1, 'u'.repeat(100))]);
    const written = wal.usage();
    expect(written.segments).toBeGreaterThan(3);
    await expectOnDisk(wal);
    const doomed = wal.segments().slice(0, 2).map((segment) => segment.seq);
    await wal.deleteSegments(doomed);
    await expectOnDisk(wal);
    expect(wal.usage().segments).toBe(written.segments - 2);
    await wal.close();
    // Closed: every segment ends with its data.
    expect((await onDisk()).bytes + (await activeBytes())).toBe(wal.usage().bytes);
    const reopened = await open(dir, segmentBytesMax);
    await expectOnDisk(reopened.wal);
    await reopened.wal.close();
  });

  it('flushes queued records on close, then rejects appends', async () => {
    const dir = await tempDir('gc-close');
    const { wal } = await open(dir);
    const pending = [wal.append([entryRecord('a', 1)]), wal.append([entryRecord('a', 2)])];
    await Promise.all([wal.close(), wal.close()]); // a second close waits for the same drain
    await Promise.all(pending);
    await expect(wal.append([entryRecord('a', 3)])).rejects.toBeInstanceOf(WalClosedError);
    expect(await replay(dir)).toHaveLength(2);
    expect((await stat(join(dir, segmentFileName(1)))).size).toBeGreaterThan(2 * RECORD_BYTES_MIN);
  });
});
