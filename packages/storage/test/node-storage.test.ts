import { readFile, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { HardState, RestoredState, Snapshot } from '@quorumq/raft';
import { afterEach, describe, expect, it } from 'vitest';
import {
  GroupWriteFailedError,
  StaleSnapshotError,
  StorageInvariantError,
  WalDiskFullError,
} from '../src/errors.js';
import type { KvStore } from '../src/kv.js';
import { LevelKvStore } from '../src/level-kv.js';
import { MemoryKvStore } from '../src/memory-kv.js';
import { kvKey } from '../src/kv-layout.js';
import { NodeStorage, type NodeStorageOptions } from '../src/node-storage.js';
import { TERM_BOUND_STEP } from '../src/repair.js';
import { NodeWalFs } from '../src/node-wal-fs.js';
import { scanSegment } from '../src/record.js';
import { segmentFileName } from '../src/wal.js';
import type { WalFs } from '../src/wal-fs.js';
import {
  bytesOf,
  dirBytes,
  entries,
  errnoError,
  InstrumentedFs,
  plainEntries,
  removeTempDirs,
  tempDir,
  textOf,
  walFiles,
} from './helpers.js';

afterEach(removeTempDirs);

const quiet = { warn: () => {} };
const config = { voters: ['n1', 'n2', 'n3'], learners: [] };

interface Node {
  dir: string;
  storage: NodeStorage;
  reopen(options?: Partial<NodeStorageOptions>): Promise<NodeStorage>;
}

/** A node over the real disk: WAL in <dir>/wal, LevelDB in <dir>/kv. */
async function openNode(options: Partial<NodeStorageOptions> = {}): Promise<Node> {
  const dir = await tempDir('node');
  const open = async (more: Partial<NodeStorageOptions> = {}): Promise<NodeStorage> =>
    NodeStorage.open({
      dir: join(dir, 'wal'),
      fs: new NodeWalFs(),
      kv: await LevelKvStore.open(join(dir, 'kv')),
      logger: quiet,
      ...options,
      ...more,
    });
  const node: Node = {
    dir,
    storage: await open(),
    async reopen(more = {}) {
      await node.storage.close();
      node.storage = await open(more);
      return node.storage;
    },
  };
  return node;
}

function hs(term: number, commit: number, vote: string | null = null): HardState {
  return { term, vote, commit };
}

function snapshotAt(index: number, term: number, text = `state@${index}`): Snapshot {
  return { meta: { index, term, config }, data: bytesOf(text) };
}

function summary(state: RestoredState): unknown {
  return {
    hardState: state.hardState,
    snapshot: state.snapshot === null ? null : { meta: state.snapshot.meta, data: textOf(state.snapshot.data) },
    entries: plainEntries(state.entries),
  };
}

describe('NodeStorage', { timeout: 60_000 }, () => {
  it('round-trips hard state and entries of several groups through a restart', async () => {
    const node = await openNode();
    const s = node.storage;
    await Promise.all([
      s.persist('a', { hardState: hs(1, 0, 'n1'), entries: entries(1, 3, 1), snapshot: null }),
      s.persist('b', { hardState: hs(4, 0), entries: entries(1, 1, 4), snapshot: null }),
      s.persist('c', { hardState: hs(2, 0, 'n3'), entries: [], snapshot: null }),
    ]);
    await s.persist('a', { hardState: hs(1, 3, 'n1'), entries: entries(4, 5, 1), snapshot: null });
    const before = ['a', 'b', 'c'].map((g) => summary(s.restoreGroup(g)));
    expect(before[0]).toEqual({ hardState: hs(1, 3, 'n1'), snapshot: null, entries: plainEntries(entries(1, 5, 1)) });
    const reopened = await node.reopen();
    expect(reopened.groups()).toEqual(['a', 'b', 'c']);
    expect(['a', 'b', 'c'].map((g) => summary(reopened.restoreGroup(g)))).toEqual(before);
    expect(summary(reopened.restoreGroup('unknown'))).toEqual({ hardState: hs(0, 0), snapshot: null, entries: [] });
    await reopened.close();
  });

  it('lets later entries overwrite a suffix of the log', async () => {
    const node = await openNode();
    await node.storage.persist('a', { hardState: hs(1, 2), entries: entries(1, 10, 1), snapshot: null });
    await node.storage.persist('a', { hardState: hs(2, 2), entries: entries(6, 8, 2), snapshot: null });
    const expected = plainEntries([...entries(1, 5, 1), ...entries(6, 8, 2)]);
    expect(plainEntries(node.storage.restoreGroup('a').entries)).toEqual(expected);
    const reopened = await node.reopen();
    expect(plainEntries(reopened.restoreGroup('a').entries)).toEqual(expected);
    expect(reopened.restoreGroup('a').hardState).toEqual(hs(2, 2));
    await reopened.close();
  });

  it('does not bring back an overwritten suffix when a local snapshot covers the overwrite', async () => {
    // Found by the simulator: 16..58@5 written, then overwritten from 25 by 25..40@6, then a
    // snapshot at 40. Replay loads the snapshot first and skips 25..40, but their overwrite
    // of 41..58@5 must still take effect.
    const node = await openNode();
    const s = node.storage;
    await s.persist('a', { hardState: hs(5, 24), entries: entries(1, 58, 5), snapshot: null });
    await s.persist('a', { hardState: hs(6, 40), entries: entries(25, 40, 6), snapshot: null });
    await s.saveLocalSnapshot('a', snapshotAt(40, 6));
    expect(s.restoreGroup('a').entries).toEqual([]);
    const reopened = await node.reopen();
    const restored = reopened.restoreGroup('a');
    expect(restored.snapshot?.meta.index).toBe(40);
    expect(restored.entries).toEqual([]);
    await reopened.persist('a', { hardState: null, entries: entries(41, 42, 6), snapshot: null });
    expect(plainEntries((await node.reopen()).restoreGroup('a').entries)).toEqual(plainEntries(entries(41, 42, 6)));
    await node.storage.close();
  });

  it('keeps an overwritten suffix dead when the segment that overwrote it is deleted first', async () => {
    const node = await openNode({ segmentBytesMax: 4096 });
    const s = node.storage;
    const big = (): string => 'x'.repeat(1400);
    let bLast = 0;
    const rollWithB = async (): Promise<void> => {
      const seq = s.position().seq;
      while (s.position().seq === seq) {
        await s.persist('b', { hardState: null, entries: entries(bLast + 1, bLast + 1, 1, big), snapshot: null });
        bLast++;
      }
    };
    // Segment 1: 'c' writes an entry it never snapshots (so segment 1 stays), 'a' writes 1..20@1.
    await s.persist('c', { hardState: hs(1, 0), entries: entries(1, 1, 1), snapshot: null });
    await s.persist('a', { hardState: hs(1, 5), entries: entries(1, 20, 1), snapshot: null });
    await rollWithB();
    // The next segment: 'a' overwrites 6..7 with term 2, and nothing more of 'a' follows.
    const overwriteSeq = s.position().seq;
    await s.persist('a', { hardState: hs(2, 7), entries: entries(6, 7, 2, () => 'o'.repeat(900)), snapshot: null });
    expect(s.position().seq).toBe(overwriteSeq);
    await rollWithB();
    await rollWithB();
    // A snapshot at 7 makes the overwriting segment unneeded ('b' snapshots too), while the
    // dead records 8..20@1 in segment 1 lie above it.
    await s.saveLocalSnapshot('b', snapshotAt(bLast, 1));
    await s.saveLocalSnapshot('a', snapshotAt(7, 2));
    const files = await walFiles(join(node.dir, 'wal'));
    expect(files).toContain(segmentFileName(1));
    expect(files).not.toContain(segmentFileName(overwriteSeq));
    const reopened = await node.reopen();
    const restored = reopened.restoreGroup('a');
    expect(restored.snapshot?.meta.index).toBe(7);
    expect(restored.entries.map((e) => `${e.index}@${e.term}`)).toEqual([]);
    await reopened.close();
  });

  it('says when a group that writes little alone keeps an old segment, which its snapshot then lets go', async () => {
    const node = await openNode({ segmentBytesMax: 4096 });
    const s = node.storage;
    const big = (): string => 'x'.repeat(1400);
    let bLast = 0;
    const rollWithB = async (): Promise<void> => {
      const seq = s.position().seq;
      while (s.position().seq === seq) {
        await s.persist('b', { hardState: null, entries: entries(bLast + 1, bLast + 1, 1, big), snapshot: null });
        bLast++;
      }
    };
    // 'meta' writes three entries in segment 1 and nothing more; 'b' fills segments after it.
    await s.persist('meta', { hardState: hs(1, 3), entries: entries(1, 3, 1), snapshot: null });
    await rollWithB();
    // Segment 1 is the one closed last: not old yet.
    expect(s.pinsOldSegment('meta', 3)).toBe(false);
    await rollWithB();
    await s.saveLocalSnapshot('b', snapshotAt(bLast, 1));
    expect(await walFiles(join(node.dir, 'wal'))).toContain(segmentFileName(1));
    // Older than the one closed last, and kept only by 'meta' (b snapshotted past it).
    expect(s.pinsOldSegment('meta', 3)).toBe(true);
    // Not when the entries there are not applied yet, nor for a group with nothing there.
    expect(s.pinsOldSegment('meta', 2)).toBe(false);
    expect(s.pinsOldSegment('b', bLast)).toBe(false);
    expect(s.pinsOldSegment('unknown', 10)).toBe(false);
    await s.saveLocalSnapshot('meta', snapshotAt(3, 1));
    expect(s.pinsOldSegment('meta', 3)).toBe(false);
    expect(await walFiles(join(node.dir, 'wal'))).not.toContain(segmentFileName(1));
  });

  it('accepts a hole left by a deleted segment when a later record overwrote past it', async () => {
    // Found by the simulator. Segment 1 holds 1..4@1, segment 2 starts with 5..6@1, then the
    // log is overwritten from 3 with term 2. A snapshot at 2 lets segment 1 go (3 and 4 are
    // dead), so replay meets 5@1 right after the snapshot: a hole, explained by 3@2 later.
    const node = await openNode({ segmentBytesMax: 4096 });
    const s = node.storage;
    const big = (): string => 'z'.repeat(900);
    for (let index = 1; index <= 6; index++) {
      await s.persist('a', { hardState: hs(1, 0), entries: entries(index, index, 1, big), snapshot: null });
    }
    expect(s.position().seq).toBe(2);
    await s.persist('a', { hardState: hs(2, 2), entries: entries(3, 8, 2), snapshot: null });
    await s.saveLocalSnapshot('a', snapshotAt(2, 1));
    expect(await walFiles(join(node.dir, 'wal'))).not.toContain(segmentFileName(1));
    const reopened = await node.reopen();
    expect(reopened.restoreGroup('a').entries.map((e) => `${e.index}@${e.term}`)).toEqual(['3@2', '4@2', '5@2', '6@2', '7@2', '8@2']);
    await reopened.close();
  });

  it('repairs a group whose log has a hole no later record explains: it restarts empty, recovering, in a term past its bound', async () => {
    const node = await openNode({ segmentBytesMax: 4096 });
    const s = node.storage;
    const big = (): string => 'z'.repeat(900);
    for (let index = 1; index <= 6; index++) {
      await s.persist('a', { hardState: hs(1, 0, 'n2'), entries: entries(index, index, 1, big), snapshot: null });
    }
    await s.persist('b', { hardState: hs(1, 0), entries: entries(1, 1, 1), snapshot: null });
    await s.close();
    // Lose segment 1 behind the storage's back: 'a' now starts at 5 with nothing before it.
    const { unlink } = await import('node:fs/promises');
    await unlink(join(node.dir, 'wal', segmentFileName(1)));
    let reopened = await node.reopen();
    expect(reopened.repairs).toEqual([
      expect.objectContaining({ groupId: 'a', damage: 'log', detail: expect.stringMatching(/entry 5 follows 0: entries are missing/) }),
    ]);
    const term = 1 + TERM_BOUND_STEP + 1;
    expect(reopened.restoreGroup('a')).toMatchObject({ hardState: hs(term, 0), snapshot: null, entries: [], recovering: { term } });
    // 'b' lost nothing: untouched.
    expect(reopened.restoreGroup('b')).toMatchObject({ hardState: hs(1, 0), recovering: null });
    expect(reopened.isRecovering('a')).toBe(true);
    // The repair is durable: a restart (before any catch-up) recovers again, with the same term.
    reopened = await node.reopen();
    expect(reopened.repairs).toEqual([]);
    expect(reopened.restoreGroup('a')).toMatchObject({ hardState: hs(term, 0), entries: [], recovering: { term } });
    // A leader of that term refills the log: recovery ends once an entry of the term is durable.
    await reopened.persist('a', { hardState: hs(term, 0), entries: entries(1, 6, 1, big), snapshot: null });
    expect(reopened.isRecovering('a')).toBe(true);
    await reopened.persist('a', { hardState: hs(term, 7), entries: entries(7, 7, term), snapshot: null });
    expect(reopened.isRecovering('a')).toBe(false);
    reopened = await node.reopen();
    expect(reopened.restoreGroup('a')).toMatchObject({ hardState: hs(term, 7), recovering: null });
    expect(reopened.restoreGroup('a').entries).toHaveLength(7);
    await reopened.close();
  });

  it('keeps a term bound ahead of every durable term, raised before the hard state passes it', async () => {
    const node = await openNode();
    const s = node.storage;
    const bound = async (): Promise<number> => {
      const kv = (s as unknown as { kv: KvStore }).kv;
      const value = await kv.get(kvKey('termBound', 'a'));
      return value === undefined ? 0 : Number(new TextDecoder().decode(value));
    };
    await s.persist('a', { hardState: hs(1, 0, 'n1'), entries: [], snapshot: null });
    expect(await bound()).toBe(1 + TERM_BOUND_STEP);
    await s.persist('a', { hardState: hs(1 + TERM_BOUND_STEP, 0, 'n1'), entries: [], snapshot: null });
    expect(await bound()).toBe(1 + TERM_BOUND_STEP);
    await s.persist('a', { hardState: hs(2 + TERM_BOUND_STEP, 0, 'n3'), entries: [], snapshot: null });
    expect(await bound()).toBe(2 + 2 * TERM_BOUND_STEP);
    await s.close();
  });

  it('hides every older record of a group after a snapshot install (resetLog)', async () => {
    const node = await openNode();
    const s = node.storage;
    await s.persist('a', { hardState: hs(1, 20, 'n2'), entries: entries(1, 60, 1), snapshot: null });
    await s.persist('b', { hardState: hs(1, 1), entries: entries(1, 2, 1), snapshot: null });
    // The leader's snapshot at 50 (term 3) conflicts with our log: all of it goes,
    // including our entries 51..60 above the snapshot index.
    await s.persist('a', { hardState: hs(3, 50), entries: [], snapshot: snapshotAt(50, 3) });
    const expected = {
      hardState: hs(3, 50),
      snapshot: { meta: snapshotAt(50, 3).meta, data: 'state@50' },
      entries: [],
    };
    expect(summary(s.restoreGroup('a'))).toEqual(expected);
    let reopened = await node.reopen();
    expect(summary(reopened.restoreGroup('a'))).toEqual(expected);
    expect(plainEntries(reopened.restoreGroup('b').entries)).toEqual(plainEntries(entries(1, 2, 1)));
    await reopened.persist('a', { hardState: hs(3, 52), entries: entries(51, 52, 3), snapshot: null });
    reopened = await node.reopen();
    expect(summary(reopened.restoreGroup('a'))).toEqual({ ...expected, hardState: hs(3, 52), entries: plainEntries(entries(51, 52, 3)) });
    await reopened.close();
  });

  it('keeps term and vote, with commit at the snapshot, when an install carries no hard state', async () => {
    const node = await openNode();
    await node.storage.persist('a', { hardState: hs(5, 3, 'n3'), entries: entries(1, 4, 5), snapshot: null });
    await node.storage.persist('a', { hardState: null, entries: [], snapshot: snapshotAt(40, 5) });
    const reopened = await node.reopen();
    const state = reopened.restoreGroup('a');
    expect(state.hardState).toEqual(hs(5, 40, 'n3'));
    expect(state.snapshot?.meta.index).toBe(40);
    expect(state.entries).toEqual([]);
    await reopened.close();
  });

  it('keeps disk use bounded under steady load with local snapshots, and restores correctly', async () => {
    const segmentBytesMax = 16 * 1024;
    const node = await openNode({ segmentBytesMax, snapshotInterval: 100 });
    const s = node.storage;
    const groups = ['g0', 'g1', 'g2', 'g3'];
    const last = new Map(groups.map((g) => [g, 0]));
    const payload = (g: string, i: number): string => `${g}:${i}:${'v'.repeat(150)}`;
    let peakBytes = 0;
    let peakFiles = 0;
    for (let round = 0; round < 150; round++) {
      await Promise.all(
        groups.map(async (g) => {
          const from = last.get(g)! + 1;
          const to = from + 4;
          await s.persist(g, { hardState: hs(1, to), entries: entries(from, to, 1, (i) => payload(g, i)), snapshot: null });
          last.set(g, to);
          if (s.shouldSnapshot(g, to)) await s.saveLocalSnapshot(g, snapshotAt(to, 1, `${g}@${to}`));
        }),
      );
      const files = await walFiles(join(node.dir, 'wal'));
      peakFiles = Math.max(peakFiles, files.length);
      peakBytes = Math.max(peakBytes, await dirBytes(join(node.dir, 'wal'), files));
    }
    // 4 groups x 750 entries x ~200 B = ~600 KB written; live data is < 4 x 105 entries.
    expect(peakFiles).toBeLessThanOrEqual(10);
    expect(peakBytes).toBeLessThanOrEqual(10 * segmentBytesMax);
    const reopened = await node.reopen();
    for (const g of groups) {
      const state = reopened.restoreGroup(g);
      const snapshotIndex = state.snapshot!.meta.index;
      expect(textOf(state.snapshot!.data)).toBe(`${g}@${snapshotIndex}`);
      expect(snapshotIndex).toBeGreaterThan(last.get(g)! - 100);
      expect(plainEntries(state.entries)).toEqual(plainEntries(entries(snapshotIndex + 1, last.get(g)!, 1, (i) => payload(g, i))));
      expect(state.hardState).toEqual(hs(1, last.get(g)!));
    }
    await reopened.close();
  });

  it('checkpoints a hard state before deleting the segment holding it (no regression on replay)', async () => {
    const segmentBytesMax = 2048;
    const node = await openNode({ segmentBytesMax });
    const s = node.storage;
    // Segment 1: 'a' (never snapshotted, so segment 1 stays) and an old hard state of 'b'.
    await s.persist('a', { hardState: hs(1, 0), entries: entries(1, 3, 1), snapshot: null });
    await s.persist('b', { hardState: hs(1, 0, 'n1'), entries: entries(1, 2, 1), snapshot: null });
    // Later segments: only 'b', ending with its newest hard state, then entries only.
    let index = 2;
    while (s.position().seq === 1) {
      await s.persist('b', { hardState: null, entries: entries(index + 1, index + 1, 1, () => 'w'.repeat(200)), snapshot: null });
      index++;
    }
    const newest = hs(5, index, 'n2');
    await s.persist('b', { hardState: newest, entries: [], snapshot: null });
    const newestSeq = s.position().seq; // the segment that record went to
    while (s.position().seq === newestSeq) {
      await s.persist('b', { hardState: null, entries: entries(index + 1, index + 1, 5, () => 'w'.repeat(200)), snapshot: null });
      index++;
    }
    await s.saveLocalSnapshot('b', snapshotAt(index, 5));
    const files = await walFiles(join(node.dir, 'wal'));
    expect(files).toContain(segmentFileName(1));
    expect(files).not.toContain(segmentFileName(newestSeq));
    const reopened = await node.reopen();
    expect(reopened.restoreGroup('b').hardState).toEqual(newest);
    expect(reopened.restoreGroup('a').entries).toHaveLength(3);
    await reopened.close();
  });

  it('registers groups created together in one synced KV write, and every one is loaded after a restart', async () => {
    const batches: number[] = [];
    const dir = await tempDir('node-register');
    const open = async (): Promise<NodeStorage> => {
      const kv = await LevelKvStore.open(join(dir, 'kv'));
      const counting: KvStore = Object.assign(Object.create(kv) as KvStore, {
        batch: (ops: Parameters<KvStore['batch']>[0], opts: Parameters<KvStore['batch']>[1]) => {
          if (ops.some((op) => op.key.startsWith(kvKey('member', 'g')))) batches.push(ops.length);
          return kv.batch(ops, opts);
        },
      });
      return NodeStorage.open({ dir: join(dir, 'wal'), fs: new NodeWalFs(), kv: counting, logger: quiet });
    };
    const s = await open();
    const ids = Array.from({ length: 200 }, (_, i) => `g${String(i).padStart(3, '0')}`);
    await Promise.all(ids.map((id, i) => s.persist(id, { hardState: hs(1, 0, 'n1'), entries: entries(1, 1 + (i % 3), 1), snapshot: null })));
    // The first registration writes alone (the KV queue was idle); the rest wait and share one.
    // Each group's registration carries its first term bound (see kv-layout.ts, termbound/).
    expect(batches.length).toBeLessThanOrEqual(2);
    expect(batches.reduce((a, b) => a + b, 0)).toBe(2 * 200);
    await s.close();
    const reopened = await open();
    expect(reopened.groups()).toEqual(ids);
    expect(reopened.restoreGroup('g002').entries).toHaveLength(3);
    await reopened.close();
  });

  it('a group deleted while its registration is being written stays deleted after a restart', async () => {
    const node = await openNode();
    const s = node.storage;
    const created = s.persist('a', { hardState: hs(1, 0), entries: entries(1, 1, 1), snapshot: null });
    const deleted = s.deleteGroup('a');
    await created;
    await deleted;
    expect(s.groups()).toEqual([]);
    const reopened = await node.reopen();
    expect(reopened.groups()).toEqual([]);
    await reopened.close();
  });

  it('deletes a group; a group created again with the same id starts empty', async () => {
    const node = await openNode();
    const s = node.storage;
    await s.persist('a', { hardState: hs(3, 5), entries: entries(1, 5, 3), snapshot: null });
    await s.persist('b', { hardState: hs(1, 1), entries: entries(1, 1, 1), snapshot: null });
    await s.deleteGroup('a');
    expect(s.groups()).toEqual(['b']);
    expect(summary(s.restoreGroup('a'))).toEqual({ hardState: hs(0, 0), snapshot: null, entries: [] });
    let reopened = await node.reopen();
    expect(reopened.groups()).toEqual(['b']);
    expect(reopened.restoreGroup('a').entries).toEqual([]);
    await reopened.persist('a', { hardState: hs(1, 0), entries: [], snapshot: null });
    reopened = await node.reopen();
    expect(summary(reopened.restoreGroup('a'))).toEqual({ hardState: hs(1, 0), snapshot: null, entries: [] });
    await reopened.persist('a', { hardState: hs(1, 0), entries: entries(1, 2, 1, (i) => `new-${i}`), snapshot: null });
    reopened = await node.reopen();
    expect(reopened.groups()).toEqual(['a', 'b']);
    expect(plainEntries(reopened.restoreGroup('a').entries)).toEqual(plainEntries(entries(1, 2, 1, (i) => `new-${i}`)));
    expect(reopened.restoreGroup('a').hardState).toEqual(hs(1, 0));
    await reopened.close();
  });

  it('repairs every group when the WAL is corrupt before its tail: snapshots kept, logs dropped, the WAL restarted', async () => {
    const node = await openNode();
    const s = node.storage;
    for (const g of ['a', 'b', 'c']) await s.persist(g, { hardState: hs(1, 1, 'n1'), entries: entries(1, 2, 1), snapshot: null });
    await s.persist('a', { hardState: hs(1, 2, 'n1'), entries: [], snapshot: null });
    await s.saveLocalSnapshot('a', snapshotAt(2, 1, 'a at 2'));
    await s.persist('a', { hardState: hs(1, 3, 'n1'), entries: entries(3, 3, 1), snapshot: null });
    await s.close();
    const path = join(node.dir, 'wal', segmentFileName(1));
    const bytes = await readFile(path);
    const victim = scanSegment(bytes, true).records[4]!.offset;
    bytes[victim + 20]! ^= 0xff;
    await writeFile(path, bytes);
    const warnings: string[] = [];
    let reopened = await NodeStorage.open({
      dir: join(node.dir, 'wal'),
      fs: new NodeWalFs(),
      kv: await LevelKvStore.open(join(node.dir, 'kv')),
      logger: { warn: (m) => warnings.push(m) },
    });
    expect(reopened.recovery.corruption).toMatchObject({ segment: 1, offset: victim });
    expect(reopened.corruption).toBeNull();
    expect(warnings.join('\n')).toMatch(/CORRUPTION in segment 1/);
    expect(warnings.join('\n')).toMatch(/REPAIR: group a: wal \(WAL corrupt in segment 1/);
    expect(reopened.repairs.map((r) => [r.groupId, r.damage, r.snapshotIndex])).toEqual([
      ['a', 'wal', 2],
      ['b', 'wal', null],
      ['c', 'wal', null],
    ]);
    const term = 1 + TERM_BOUND_STEP + 1;
    expect(reopened.restoreGroup('a')).toMatchObject({ hardState: hs(term, 2), entries: [], recovering: { term } });
    expect(textOf(reopened.restoreGroup('a').snapshot!.data)).toBe('a at 2');
    for (const g of ['b', 'c']) expect(reopened.restoreGroup(g)).toMatchObject({ hardState: hs(term, 0), snapshot: null, entries: [], recovering: { term } });
    // The WAL restarted in a fresh segment; the damaged one is gone.
    expect(await walFiles(join(node.dir, 'wal'))).toEqual([segmentFileName(2)]);
    await reopened.persist('b', { hardState: hs(term, 0), entries: entries(1, 2, 1), snapshot: null });
    await reopened.persist('b', { hardState: hs(term, 3), entries: entries(3, 3, term), snapshot: null });
    await reopened.close();
    reopened = await node.reopen();
    expect(reopened.repairs).toEqual([]);
    expect(reopened.restoreGroup('b')).toMatchObject({ hardState: hs(term, 3), recovering: null });
    expect(reopened.restoreGroup('c')).toMatchObject({ recovering: { term } });
    await reopened.close();
  });

  it('cuts a torn tail on open and reports what it cut', async () => {
    const node = await openNode();
    await node.storage.persist('a', { hardState: hs(1, 2), entries: entries(1, 2, 1), snapshot: null });
    await node.storage.persist('a', { hardState: hs(1, 3), entries: entries(3, 3, 1), snapshot: null });
    await node.storage.close();
    const path = join(node.dir, 'wal', segmentFileName(1));
    const bytes = await readFile(path);
    await writeFile(path, bytes.subarray(0, bytes.length - 5)); // the last hard-state record is torn
    const warnings: string[] = [];
    const reopened = await NodeStorage.open({
      dir: join(node.dir, 'wal'),
      fs: new NodeWalFs(),
      kv: await LevelKvStore.open(join(node.dir, 'kv')),
      logger: { warn: (m) => warnings.push(m) },
    });
    expect(reopened.recovery.truncated).toMatchObject({ segment: 1, bytesDiscarded: expect.any(Number) });
    expect(warnings.join('\n')).toMatch(/torn tail/);
    const state = reopened.restoreGroup('a');
    expect(state.entries).toHaveLength(3);
    expect(state.hardState).toEqual(hs(1, 2));
    expect((await stat(path)).size).toBe(reopened.recovery.truncated!.offset);
    await reopened.close();
  });

  it('says when to snapshot', async () => {
    const node = await openNode({ snapshotInterval: 10 });
    const s = node.storage;
    await s.persist('a', { hardState: hs(1, 12), entries: entries(1, 12, 1), snapshot: null });
    expect(s.shouldSnapshot('a', 9)).toBe(false);
    expect(s.shouldSnapshot('a', 10)).toBe(true);
    await s.saveLocalSnapshot('a', snapshotAt(10, 1));
    expect(s.shouldSnapshot('a', 12)).toBe(false);
    expect(s.shouldSnapshot('a', 20)).toBe(true);
    await expect(s.saveLocalSnapshot('a', snapshotAt(8, 1))).rejects.toBeInstanceOf(StaleSnapshotError);
    expect(plainEntries(s.restoreGroup('a').entries)).toEqual(plainEntries(entries(11, 12, 1)));
    await s.close();
  });

  it('rejects updates that would break Raft invariants', async () => {
    const node = await openNode();
    const s = node.storage;
    await s.persist('a', { hardState: hs(2, 1, 'n1'), entries: entries(1, 3, 2), snapshot: null });
    const bad = [
      { hardState: null, entries: entries(5, 6, 2), snapshot: null }, // gap after 3
      { hardState: hs(2, 1, 'n2'), entries: [], snapshot: null }, // second vote in term 2
      { hardState: hs(1, 1), entries: [], snapshot: null }, // term goes back
      { hardState: hs(2, 9, 'n1'), entries: [], snapshot: null }, // commit beyond the log
      { hardState: null, entries: [entries(4, 4, 2)[0]!, entries(6, 6, 2)[0]!], snapshot: null },
    ];
    for (const update of bad) await expect(s.persist('a', update)).rejects.toBeInstanceOf(StorageInvariantError);
    // A lone surrogate would not survive UTF-8: replay would file the records elsewhere.
    await expect(s.persist('bad-\ud800', { hardState: hs(1, 0), entries: [], snapshot: null })).rejects.toBeInstanceOf(
      StorageInvariantError,
    );
    await s.persist('a', { hardState: hs(3, 3, 'n2'), entries: entries(4, 4, 3), snapshot: null });
    expect(s.restoreGroup('a').hardState).toEqual(hs(3, 3, 'n2'));
    await s.close();
  });

  it('fails a group whose write failed until it is restored; nothing acknowledged is lost', async () => {
    const dir = await tempDir('node-enospc');
    const fs = new InstrumentedFs();
    const open = (walFs: WalFs, kv: KvStore): Promise<NodeStorage> =>
      NodeStorage.open({ dir: join(dir, 'wal'), fs: walFs, kv, logger: quiet });
    const kv = new MemoryKvStore();
    const s = await open(fs, kv);
    await s.persist('a', { hardState: hs(1, 2), entries: entries(1, 3, 1), snapshot: null });
    fs.writeFault = { error: errnoError('ENOSPC'), partialBytes: 30 };
    await expect(s.persist('a', { hardState: hs(1, 3), entries: entries(4, 5, 1), snapshot: null })).rejects.toBeInstanceOf(
      WalDiskFullError,
    );
    fs.writeFault = null;
    await expect(s.persist('a', { hardState: null, entries: entries(6, 6, 1), snapshot: null })).rejects.toBeInstanceOf(
      GroupWriteFailedError,
    );
    const restored = s.restoreGroup('a');
    expect(plainEntries(restored.entries)).toEqual(plainEntries(entries(1, 3, 1)));
    await s.persist('a', { hardState: hs(1, 4), entries: entries(4, 4, 1), snapshot: null });
    await s.close();
    const reopened = await open(new NodeWalFs(), kv.crash());
    expect(plainEntries(reopened.restoreGroup('a').entries)).toEqual(plainEntries(entries(1, 4, 1)));
    expect(reopened.restoreGroup('a').hardState).toEqual(hs(1, 4));
    await reopened.close();
  });
});
