import { readdir, writeFile, readFile, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import type { HardState, Snapshot } from '@quorumq/raft';
import { afterEach, describe, expect, it } from 'vitest';
import { kvKey } from '../src/kv-layout.js';
import { LevelKvStore } from '../src/level-kv.js';
import { NodeStorage } from '../src/node-storage.js';
import { NodeWalFs } from '../src/node-wal-fs.js';
import { SnapshotFiles } from '../src/snapshot-files.js';
import { TERM_BOUND_STEP } from '../src/repair.js';
import { bytesOf, entries, removeTempDirs, tempDir, textOf } from './helpers.js';

afterEach(removeTempDirs);

const quiet = { warn: () => {} };
const config = { voters: ['n1', 'n2', 'n3'], learners: [] };
const hs = (term: number, commit: number): HardState => ({ term, vote: null, commit });
const snapshotAt = (index: number, term: number, text = `state@${index}`): Snapshot => ({ meta: { index, term, config }, data: bytesOf(text) });

async function open(dir: string): Promise<NodeStorage> {
  return NodeStorage.open({ dir: join(dir, 'wal'), fs: new NodeWalFs(), kv: await LevelKvStore.open(join(dir, 'kv')), logger: quiet });
}

const snapshotDir = (dir: string): string => join(dir, 'wal', 'snapshots');
const filesIn = async (dir: string): Promise<string[]> => (await readdir(snapshotDir(dir))).sort();

describe('snapshot files', () => {
  it('a snapshot is a file the KV store points at; the next one replaces it; both survive a reopen', async () => {
    const dir = await tempDir('snapfiles');
    let storage = await open(dir);
    await storage.persist('q:a', { hardState: hs(1, 20), entries: entries(1, 30, 1), snapshot: null });
    await storage.saveLocalSnapshot('q:a', snapshotAt(10, 1, 'first'));
    expect(await filesIn(dir)).toEqual([SnapshotFiles.fileName('q:a', 10, 1)]);
    await storage.saveLocalSnapshot('q:a', snapshotAt(20, 1, 'second'));
    expect(await filesIn(dir)).toEqual([SnapshotFiles.fileName('q:a', 20, 1)]);
    await storage.close();
    storage = await open(dir);
    const restored = storage.restoreGroup('q:a');
    expect(restored.snapshot?.meta.index).toBe(20);
    expect(textOf(restored.snapshot?.data ?? new Uint8Array(0))).toBe('second');
    expect(restored.entries.map((e) => e.index)).toEqual(Array.from({ length: 10 }, (_, i) => 21 + i));
    await storage.close();
    // The bytes are not in LevelDB.
    const kv = await LevelKvStore.open(join(dir, 'kv'));
    expect(await kv.get(kvKey('snapshotData', 'q:a'))).toBeUndefined();
    expect(JSON.parse(Buffer.from((await kv.get(kvKey('snapshotFile', 'q:a'))) ?? []).toString())).toMatchObject({ file: SnapshotFiles.fileName('q:a', 20, 1), bytes: 6 });
    await kv.close();
  });

  it('a file no KV entry points at (a crash before the batch) is removed when the storage opens', async () => {
    const dir = await tempDir('snapfiles-orphan');
    let storage = await open(dir);
    await storage.persist('g', { hardState: hs(1, 5), entries: entries(1, 5, 1), snapshot: null });
    await storage.saveLocalSnapshot('g', snapshotAt(5, 1));
    await storage.close();
    const orphan = SnapshotFiles.fileName('g', 9, 1);
    await writeFile(join(snapshotDir(dir), orphan), 'half a snapsh');
    await writeFile(join(snapshotDir(dir), 'notes.txt'), 'not ours');
    storage = await open(dir);
    expect(await filesIn(dir)).toEqual([SnapshotFiles.fileName('g', 5, 1), 'notes.txt']);
    expect(textOf(storage.restoreGroup('g').snapshot?.data ?? new Uint8Array(0))).toBe('state@5');
    await storage.close();
  });

  it('a damaged or missing referenced file: the group is repaired and restarts empty, recovering; the file is named', async () => {
    for (const damage of ['flip', 'truncate', 'lose'] as const) {
      const dir = await tempDir(`snapfiles-damaged-${damage}`);
      const storage = await open(dir);
      await storage.persist('g', { hardState: hs(1, 5), entries: entries(1, 6, 1), snapshot: null });
      await storage.saveLocalSnapshot('g', snapshotAt(5, 1, 'precious state'));
      await storage.persist('h', { hardState: hs(1, 1), entries: entries(1, 1, 1), snapshot: null });
      await storage.close();
      const path = join(snapshotDir(dir), SnapshotFiles.fileName('g', 5, 1));
      const bytes = await readFile(path);
      if (damage === 'flip') bytes[3] = bytes[3]! ^ 0xff;
      if (damage === 'lose') await unlink(path);
      else await writeFile(path, damage === 'truncate' ? bytes.subarray(0, 4) : bytes);
      const reopened = await open(dir);
      expect(reopened.repairs, damage).toEqual([
        expect.objectContaining({ groupId: 'g', damage: 'snapshot', snapshotIndex: null, droppedEntries: 6, detail: expect.stringContaining(path) }),
      ]);
      const term = 1 + TERM_BOUND_STEP + 1;
      expect(reopened.restoreGroup('g')).toMatchObject({ hardState: { term, vote: null, commit: 0 }, snapshot: null, entries: [], recovering: { term } });
      expect(reopened.restoreGroup('h').entries).toHaveLength(1);
      expect(await filesIn(dir)).toEqual([]);
      await reopened.close();
    }
  });

  it('an installed snapshot gets a file too, and deleting the group removes it', async () => {
    const dir = await tempDir('snapfiles-install');
    const storage = await open(dir);
    await storage.persist('g', { hardState: hs(1, 2), entries: entries(1, 4, 1), snapshot: null });
    await storage.persist('g', { hardState: hs(3, 50), entries: [], snapshot: snapshotAt(50, 3, 'from the leader') });
    expect(await filesIn(dir)).toEqual([SnapshotFiles.fileName('g', 50, 3)]);
    await storage.deleteGroup('g');
    expect(await filesIn(dir)).toEqual([]);
    await storage.close();
  });

  it('a store that kept snapshot bytes in the KV store still opens; its next snapshot moves them to a file', async () => {
    const dir = await tempDir('snapfiles-legacy');
    let storage = await open(dir);
    await storage.persist('g', { hardState: hs(1, 8), entries: entries(1, 9, 1), snapshot: null });
    await storage.saveLocalSnapshot('g', snapshotAt(4, 1, 'old layout'));
    await storage.close();
    // Rewrite the KV entries as the earlier layout had them, and drop the file.
    const kv = await LevelKvStore.open(join(dir, 'kv'));
    await kv.batch(
      [
        { type: 'put', key: kvKey('snapshotData', 'g'), value: bytesOf('old layout') },
        { type: 'del', key: kvKey('snapshotFile', 'g') },
      ],
      { sync: true },
    );
    await kv.close();
    storage = await open(dir);
    expect(await filesIn(dir)).toEqual([]);
    expect(textOf(storage.restoreGroup('g').snapshot?.data ?? new Uint8Array(0))).toBe('old layout');
    await storage.saveLocalSnapshot('g', snapshotAt(8, 1, 'new layout'));
    await storage.close();
    const after = await LevelKvStore.open(join(dir, 'kv'));
    expect(await after.get(kvKey('snapshotData', 'g'))).toBeUndefined();
    await after.close();
    storage = await open(dir);
    expect(textOf(storage.restoreGroup('g').snapshot?.data ?? new Uint8Array(0))).toBe('new layout');
    await storage.close();
  });
});
