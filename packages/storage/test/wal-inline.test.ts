/** Inline WAL writes (WalWriteMode 'inline'): small flushes of records that asked for it are written on the event loop. */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { WalDiskFullError, WalFatalError } from '../src/errors.js';
import { INLINE_BYTES_MAX, INLINE_HOLD_MS, INLINE_SLOW_MS, segmentFileName, Wal } from '../src/wal.js';
import { entryRecord, errnoError, hardStateRecord, InstrumentedFs, plain, removeTempDirs, tempDir } from './helpers.js';

afterEach(removeTempDirs);

async function open(dir: string): Promise<{ wal: Wal; fs: InstrumentedFs; fatal: WalFatalError[] }> {
  const fs = new InstrumentedFs();
  const fatal: WalFatalError[] = [];
  const wal = await Wal.open({ dir, fs, now: () => fs.clockMs, onFatal: (error) => fatal.push(error) }, () => {});
  fs.calls.appendDurable = 0;
  return { wal, fs, fatal };
}

async function replay(dir: string): Promise<unknown[]> {
  const records: unknown[] = [];
  const wal = await Wal.open({ dir, fs: new InstrumentedFs() }, (record) => records.push(plain(record)));
  await wal.close();
  return records;
}

describe('inline WAL writes', { timeout: 30_000 }, () => {
  it('writes a small flush of inline records on the event loop, durably and in order with pooled ones', async () => {
    const dir = await tempDir('inline-basic');
    const { wal, fs } = await open(dir);
    await wal.enqueue([entryRecord('f', 1)], undefined, 'inline').durable;
    expect(fs.calls).toMatchObject({ appendDurableNow: 1, appendDurable: 0 });
    await wal.enqueue([entryRecord('f', 2)], undefined, 'pooled').durable;
    expect(fs.calls).toMatchObject({ appendDurableNow: 1, appendDurable: 1 });
    // A lazy record rides along with the inline flush that follows it.
    wal.enqueue([hardStateRecord('f', { term: 1, vote: null, commit: 2 })], undefined, 'lazy');
    await wal.enqueue([entryRecord('f', 3)], undefined, 'inline').durable;
    expect(fs.calls).toMatchObject({ appendDurableNow: 2, appendDurable: 1 });
    await wal.close();
    expect(await replay(dir)).toEqual(
      [entryRecord('f', 1), entryRecord('f', 2), hardStateRecord('f', { term: 1, vote: null, commit: 2 }), entryRecord('f', 3)].map(plain),
    );
  });

  it('goes through the pool when any record of the flush is pooled, when the flush is large, or when the file cannot take it now', async () => {
    const dir = await tempDir('inline-pooled');
    const { wal, fs } = await open(dir);
    // One turn: an inline and a pooled record share the flush.
    const both = [wal.enqueue([entryRecord('f', 1)], undefined, 'inline').durable, wal.enqueue([entryRecord('l', 1)], undefined, 'pooled').durable];
    await Promise.all(both);
    expect(fs.calls).toMatchObject({ appendDurableNow: 0, appendDurable: 1 });
    await wal.enqueue([entryRecord('f', 2, 1, 'x'.repeat(INLINE_BYTES_MAX))], undefined, 'inline').durable;
    expect(fs.calls).toMatchObject({ appendDurableNow: 0, appendDurable: 2 });
    fs.inlineRefused = true;
    await wal.enqueue([entryRecord('f', 3)], undefined, 'inline').durable;
    expect(fs.calls).toMatchObject({ appendDurableNow: 1, appendDurable: 3 });
    await wal.close();
    expect(await replay(dir)).toHaveLength(4);
  });

  it(`stops writing inline for ${INLINE_HOLD_MS} ms after an inline write took over ${INLINE_SLOW_MS} ms (a slow disk), then resumes`, async () => {
    const dir = await tempDir('inline-slow');
    const { wal, fs } = await open(dir);
    fs.inlineWriteMs = INLINE_SLOW_MS + 1;
    await wal.enqueue([entryRecord('f', 1)], undefined, 'inline').durable;
    fs.inlineWriteMs = 0;
    await wal.enqueue([entryRecord('f', 2)], undefined, 'inline').durable;
    fs.clockMs += INLINE_HOLD_MS - INLINE_SLOW_MS - 2;
    await wal.enqueue([entryRecord('f', 3)], undefined, 'inline').durable;
    expect(fs.calls).toMatchObject({ appendDurableNow: 1, appendDurable: 2 });
    fs.clockMs += 2;
    await wal.enqueue([entryRecord('f', 4)], undefined, 'inline').durable;
    expect(fs.calls).toMatchObject({ appendDurableNow: 2, appendDurable: 2 });
    await wal.close();
  });

  it('rolls back an inline write refused for want of room, like a pooled one: the batch rejects and nothing is fatal', async () => {
    const dir = await tempDir('inline-enospc');
    const { wal, fs, fatal } = await open(dir);
    await wal.enqueue([entryRecord('f', 1)], undefined, 'inline').durable;
    const path = join(dir, segmentFileName(1));
    const before = (await readFile(path)).subarray(0, wal.usage().bytes);
    fs.writeFault = { error: errnoError('ENOSPC'), partialBytes: 30 };
    const failed = wal.enqueue([entryRecord('f', 2, 1, 'y'.repeat(200))], undefined, 'inline').durable;
    await expect(failed).rejects.toBeInstanceOf(WalDiskFullError);
    expect(fs.calls.appendDurableNow).toBe(2);
    expect(await readFile(path)).toEqual(before);
    expect(fatal).toHaveLength(0);
    fs.writeFault = null;
    await wal.enqueue([entryRecord('f', 2, 2)], undefined, 'inline').durable;
    await wal.close();
    expect(await replay(dir)).toEqual([entryRecord('f', 1), entryRecord('f', 2, 2)].map(plain));
  });

  it('fails the WAL on any other inline write error, as on a pooled one', async () => {
    const dir = await tempDir('inline-eio');
    const { wal, fs, fatal } = await open(dir);
    fs.writeFault = { error: errnoError('EIO'), partialBytes: 5 };
    await expect(wal.enqueue([entryRecord('f', 1)], undefined, 'inline').durable).rejects.toBeInstanceOf(WalFatalError);
    expect(fatal).toHaveLength(1);
    expect(() => wal.enqueue([entryRecord('f', 2)], undefined, 'inline')).toThrow(WalFatalError);
    await wal.close();
  });
});
