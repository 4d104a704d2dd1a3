import { readFile, stat, truncate, writeFile, appendFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { WalCorruptionError } from '../src/errors.js';
import { NodeWalFs } from '../src/node-wal-fs.js';
import { scanSegment, type WalRecord } from '../src/record.js';
import { segmentFileName, Wal, type WalPosition } from '../src/wal.js';
import { entryRecord, hardStateRecord, plain, removeTempDirs, tempDir, walFiles } from './helpers.js';

afterEach(removeTempDirs);

interface Replayed {
  wal: Wal;
  records: unknown[];
  positions: WalPosition[];
}

async function openWal(dir: string, segmentBytesMax?: number): Promise<Replayed> {
  const records: unknown[] = [];
  const positions: WalPosition[] = [];
  const wal = await Wal.open(
    { dir, fs: new NodeWalFs(), ...(segmentBytesMax === undefined ? {} : { segmentBytesMax }) },
    (record, position) => {
      records.push(plain(record));
      positions.push(position);
    },
  );
  return { wal, records, positions };
}

async function writeRecords(dir: string, batches: readonly WalRecord[][], segmentBytesMax?: number): Promise<void> {
  const { wal } = await openWal(dir, segmentBytesMax);
  for (const batch of batches) await wal.append(batch);
  await wal.close();
}

const batches: WalRecord[][] = [
  [entryRecord('a', 1), entryRecord('b', 1)],
  [hardStateRecord('a', { term: 1, vote: 'n1', commit: 1 })],
  [entryRecord('a', 2, 1, 'x'.repeat(50))],
];
const all = batches.flat();

describe('WAL recovery', { timeout: 60_000 }, () => {
  it('recovers exactly the complete prefix when the last record is cut at every byte offset', async () => {
    const source = await tempDir('wal-source');
    await writeRecords(source, batches);
    const segment = segmentFileName(1);
    const full = await readFile(join(source, segment));
    const lastStart = scanSegment(full, true).records.at(-1)!.offset;
    for (let cut = lastStart; cut < full.length; cut++) {
      const dir = await tempDir('wal-cut');
      await writeFile(join(dir, segment), full.subarray(0, cut));
      const { wal, records } = await openWal(dir);
      expect(records, `cut at ${cut}`).toEqual(all.slice(0, -1).map(plain));
      expect(wal.recovery.truncated?.offset ?? lastStart).toBe(lastStart);
      expect(wal.recovery.truncated === null).toBe(cut === lastStart);
      expect((await stat(join(dir, segment))).size).toBe(lastStart);
      await wal.append([entryRecord('c', 1, 1, `after-cut-${cut}`)]);
      await wal.close();
      const reopened = await openWal(dir);
      expect(reopened.records).toEqual([...all.slice(0, -1), entryRecord('c', 1, 1, `after-cut-${cut}`)].map(plain));
      expect(reopened.wal.recovery.truncated).toBeNull();
      await reopened.wal.close();
    }
  });

  it('truncates a zero-filled tail (a file extended but never written)', async () => {
    const dir = await tempDir('wal-zero');
    await writeRecords(dir, batches);
    const path = join(dir, segmentFileName(1));
    const length = (await stat(path)).size;
    await appendFile(path, Buffer.alloc(8192));
    const { wal, records } = await openWal(dir);
    expect(records).toEqual(all.map(plain));
    expect(wal.recovery.truncated).toMatchObject({ segment: 1, offset: length, bytesDiscarded: 8192 });
    expect((await stat(path)).size).toBe(length);
    await wal.close();
  });

  it('reports a flipped byte in the middle of a segment as corruption and touches nothing', async () => {
    const dir = await tempDir('wal-flip');
    await writeRecords(dir, batches);
    const path = join(dir, segmentFileName(1));
    const bytes = await readFile(path);
    const second = scanSegment(bytes, true).records[1]!.offset;
    bytes[second + 12]! ^= 0x01;
    await writeFile(path, bytes);
    const { wal, records } = await openWal(dir);
    expect(wal.corruption).toMatchObject({ segment: 1, offset: second, file: segmentFileName(1) });
    expect(wal.corruption?.reason).toMatch(/checksum/);
    expect(records).toEqual(all.slice(0, 1).map(plain));
    await expect(wal.append([entryRecord('a', 3)])).rejects.toBeInstanceOf(WalCorruptionError);
    await wal.close();
    expect(await readFile(path)).toEqual(bytes);
  });

  it('reports a torn tail in a segment that is not the last as corruption', async () => {
    const dir = await tempDir('wal-torn-middle');
    // ~100-byte records, 300-byte segments: several segments.
    await writeRecords(
      dir,
      Array.from({ length: 12 }, (_, i) => [entryRecord('g', i + 1, 1, 'y'.repeat(60))]),
      300,
    );
    const files = await walFiles(dir);
    expect(files.length).toBeGreaterThan(2);
    const first = join(dir, files[0]!);
    const length = (await stat(first)).size;
    await truncate(first, length - 3);
    const { wal } = await openWal(dir, 300);
    expect(wal.corruption).toMatchObject({ segment: 1 });
    expect(wal.recovery.truncated).toBeNull();
    expect((await stat(first)).size).toBe(length - 3);
    await wal.close();
  });

  it('replays positions that match the positions handed out at enqueue time', async () => {
    const dir = await tempDir('wal-positions');
    const { wal } = await openWal(dir, 400);
    const handedOut: WalPosition[] = [];
    const appends: Promise<void>[] = [];
    for (let i = 1; i <= 20; i++) {
      const before = wal.position();
      const queued = wal.enqueue([entryRecord('g', i, 1, 'z'.repeat(i * 3))]);
      const at = queued.positions[0]!;
      expect(at.seq > before.seq || at.offset === before.offset).toBe(true);
      handedOut.push(at);
      appends.push(queued.durable);
    }
    await Promise.all(appends);
    await wal.close();
    const reopened = await openWal(dir, 400);
    expect(reopened.positions).toEqual(handedOut);
    await reopened.wal.close();
  });
});
