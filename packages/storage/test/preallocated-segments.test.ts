/**
 * WAL segments keep a zero-filled runway ahead of their data (node-wal-fs.ts): small durable
 * writes overwrite blocks the file already has. What must hold: the data reads back exactly,
 * a segment that is not the last ends with its data, a crash leaves at most a zero-filled
 * tail on the last segment (recovery cuts it, nothing lost), and the runway stays within the
 * segment size and off large writes.
 */
import { copyFile, readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { NodeWalFs, RUNWAY_BYTES, RUNWAY_WRITE_BYTES_MAX } from '../src/node-wal-fs.js';
import { Wal } from '../src/wal.js';
import { entryRecord, plain, removeTempDirs, tempDir, walFiles } from './helpers.js';

afterEach(removeTempDirs);

const bytes = (n: number, fill: number): Uint8Array => new Uint8Array(n).fill(fill);

/** Waits until the file reaches `size` bytes (the runway is written in the background). */
async function sizeReaches(path: string, size: number): Promise<number> {
  for (let i = 0; i < 500; i++) {
    const now = (await stat(path)).size;
    if (now >= size) return now;
    await new Promise((resolve) => setTimeout(resolve, 2));
  }
  return (await stat(path)).size;
}

describe('a preallocated WAL file', { timeout: 30_000 }, () => {
  it('keeps a zero-filled runway past its data, writes at the end of the data, and seal cuts the runway', async () => {
    const dir = await tempDir('prealloc-file');
    const path = join(dir, 'seg');
    const file = await new NodeWalFs().openAppend(path, { preallocate: 8 * RUNWAY_BYTES });
    await file.appendDurable([bytes(100, 1)]);
    expect(await sizeReaches(path, 100 + RUNWAY_BYTES)).toBe(100 + RUNWAY_BYTES);
    await file.appendDurable([bytes(50, 2), bytes(50, 3)]);
    const content = await readFile(path);
    expect(content.subarray(0, 200)).toEqual(Buffer.concat([bytes(100, 1), bytes(50, 2), bytes(50, 3)]));
    expect(content.subarray(200).every((b) => b === 0)).toBe(true);
    await file.seal!();
    expect((await stat(path)).size).toBe(200);
    // Sealed: later writes extend the file as without a runway.
    await file.appendDurable([bytes(10, 4)]);
    expect((await stat(path)).size).toBe(210);
    await file.close();
    expect((await readFile(path)).subarray(200)).toEqual(Buffer.from(bytes(10, 4)));
  });

  it('writes after a truncate at the cut, and close leaves the file ending with its data', async () => {
    const dir = await tempDir('prealloc-truncate');
    const path = join(dir, 'seg');
    const file = await new NodeWalFs().openAppend(path, { preallocate: 8 * RUNWAY_BYTES });
    await file.appendDurable([bytes(300, 1)]);
    await sizeReaches(path, RUNWAY_BYTES);
    await file.truncate(120);
    await file.datasync();
    expect((await stat(path)).size).toBe(120);
    await file.appendDurable([bytes(30, 5)]);
    await file.close();
    expect(await readFile(path)).toEqual(Buffer.concat([bytes(120, 1), bytes(30, 5)]));
  });

  it('never takes the file past its limit, and large writes do not extend the runway', async () => {
    const dir = await tempDir('prealloc-limit');
    const small = join(dir, 'small');
    const limited = await new NodeWalFs().openAppend(small, { preallocate: 4096 });
    await limited.appendDurable([bytes(100, 1)]);
    expect(await sizeReaches(small, 4096)).toBe(4096);
    await limited.appendDurable([bytes(5000, 2)]);
    expect((await stat(small)).size).toBe(5100);
    await limited.close();
    const large = join(dir, 'large');
    const file = await new NodeWalFs().openAppend(large, { preallocate: 64 * RUNWAY_BYTES });
    await file.appendDurable([bytes(RUNWAY_WRITE_BYTES_MAX, 3)]);
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect((await stat(large)).size).toBe(RUNWAY_WRITE_BYTES_MAX);
    await file.close();
  });
});

describe('WAL segments with a runway', { timeout: 30_000 }, () => {
  it('a crash leaves a zero-filled tail on the last segment only: recovery cuts it and loses nothing', async () => {
    const dir = await tempDir('prealloc-wal');
    const segmentBytesMax = 8 * 1024;
    const wal = await Wal.open({ dir, fs: new NodeWalFs(), segmentBytesMax }, () => {});
    const written = Array.from({ length: 120 }, (_, i) => entryRecord(`g${i % 3}`, Math.floor(i / 3) + 1, 1, 'p'.repeat(200)));
    for (const record of written) await wal.append([record]);
    const files = (await walFiles(dir)).sort();
    expect(files.length).toBeGreaterThan(2);
    const last = files.at(-1)!;
    await sizeReaches(join(dir, last), segmentBytesMax);
    // What a crash now would leave: the files as they are on disk, the WAL never closed.
    const crashed = await tempDir('prealloc-crashed');
    for (const name of files) await copyFile(join(dir, name), join(crashed, name));
    for (const name of files.slice(0, -1)) {
      const content = await readFile(join(crashed, name));
      expect(content.at(-1), `${name} ends with its data`).not.toBe(0);
    }
    const lastContent = await readFile(join(crashed, last));
    expect(lastContent.at(-1), 'the last segment holds its runway').toBe(0);
    const replayed: unknown[] = [];
    const reopened = await Wal.open({ dir: crashed, fs: new NodeWalFs(), segmentBytesMax }, (record) => replayed.push(plain(record)));
    expect(reopened.corruption).toBeNull();
    expect(reopened.recovery.truncated).toMatchObject({ segment: Number(last.slice(0, 16)), reason: expect.stringMatching(/zero-filled/) });
    expect(replayed).toEqual(written.map(plain));
    await reopened.append([entryRecord('after', 1)]);
    await reopened.close();
    // A clean close seals: the next open finds no tail to cut.
    await wal.close();
    expect((await readFile(join(dir, last))).at(-1)).not.toBe(0);
    const again = await Wal.open({ dir, fs: new NodeWalFs(), segmentBytesMax }, () => {});
    expect(again.recovery.truncated).toBeNull();
    await again.close();
  });
});

describe('a WAL file closed with writes in flight', () => {
  it('closes after them: every byte lands and the descriptor is not closed under a write', async () => {
    const dir = await tempDir('close-in-flight');
    for (const preallocate of [0, 8 * RUNWAY_BYTES]) {
      const path = join(dir, `seg-${preallocate}`);
      const file = await new NodeWalFs().openAppend(path, { preallocate });
      const order: string[] = [];
      const write = file.appendDurable([bytes(4096, 7), bytes(100, 8)]).then(() => order.push('write'));
      const closed = file.close().then(() => order.push('close'));
      await Promise.all([write, closed]);
      expect(order).toEqual(['write', 'close']);
      const content = await readFile(path);
      expect(content.subarray(0, 4196)).toEqual(Buffer.concat([bytes(4096, 7), bytes(100, 8)]));
    }
  });

  it('a write after the close is refused, and leaves nothing for a later close to wait on', async () => {
    const dir = await tempDir('write-after-close');
    const file = await new NodeWalFs().openAppend(join(dir, 'seg'));
    await file.close();
    await expect(file.appendDurable([bytes(10, 1)])).rejects.toThrow();
    // Resolves or rejects (the handle is closed already), but does not wait forever.
    const settled = await Promise.race([file.close().then(() => 'closed', () => 'refused'), new Promise((done) => setTimeout(() => done('waiting'), 2000))]);
    expect(settled).not.toBe('waiting');
  });
});
