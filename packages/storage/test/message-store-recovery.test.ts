import { appendFile, readFile, rm, stat, unlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { MessageStoreCorruptionError, StorageInvariantError } from '../src/errors.js';
import { encodeSegmentHeader, FRAME_OVERHEAD_BYTES, SEGMENT_HEADER_BYTES } from '../src/message-store/record-format.js';
import { indexFileName, segmentFileName } from '../src/message-store/segments.js';
import { removeTempDirs, tempDir } from './helpers.js';
import { expectBytes, message, openStore, storeFiles } from './message-store-helpers.js';

afterEach(removeTempDirs);

/** Puts `count` messages (message(i) for i < count), syncs, closes; returns their record ids. */
async function writeStore(dir: string, count: number, size = 100): Promise<number[]> {
  const { store } = await openStore(dir);
  const handles = Array.from({ length: count }, (_, i) => store.put(message(i, size)));
  await store.sync();
  const ids = handles.map((h) => store.recordId(h));
  await store.close();
  return ids;
}

describe('MessageStore: open and adopt', { timeout: 30_000 }, () => {
  it('adopts records after a reopen: one handle per record, shared by every adopter', async () => {
    const dir = await tempDir('ms-adopt');
    const first = await openStore(dir);
    const storeId = first.store.storeId;
    const handles = [0, 1, 2].map((i) => first.store.put(message(i)));
    await first.store.sync();
    const ids = handles.map((h) => first.store.recordId(h));
    await first.store.close();

    const { store, warnings } = await openStore(dir);
    expect(store.storeId).toBe(storeId);
    const a = store.adopt(ids[0]!)!;
    expect(store.adopt(ids[0]!)).toBe(a);
    expectBytes(store.read(a), message(0));
    expect(store.adopt(ids[2]! + 1000)).toBeNull();
    store.release(a);
    expectBytes(store.read(a), message(0)); // the second adopter's reference
    store.recovered();
    expect(() => store.adopt(ids[1]!)).toThrow(StorageInvariantError);
    expect(store.recordId(store.put(message(9)))).toBeGreaterThan(Math.max(...ids));
    expect(warnings.messages).toEqual([]);
    await store.close();
  });

  it('deletes nothing before recovered(), then the segments nobody adopted from', async () => {
    const dir = await tempDir('ms-recovered');
    const ids = await writeStore(dir, 3);
    const { store } = await openStore(dir);
    const adopted = store.adopt(ids[0]!)!;
    store.release(adopted); // dead, but nothing may be deleted yet
    await store.idle();
    expect(await storeFiles(dir, '.seg')).toEqual([segmentFileName(1), segmentFileName(2)]);
    const diskBefore = store.stats().diskBytes;
    store.recovered();
    await store.idle();
    expect(await storeFiles(dir, '.seg')).toEqual([segmentFileName(2)]);
    expect(await storeFiles(dir, '.idx')).toEqual([]);
    expect(store.stats().diskBytes).toBe(SEGMENT_HEADER_BYTES);
    expect(diskBefore).toBeGreaterThan(store.stats().diskBytes);
    await store.close();
    // The records are gone for good.
    const again = await openStore(dir);
    expect(again.store.adopt(ids[1]!)).toBeNull();
    await again.store.close();
  });

  it('keeps a segment that has an adopted record', async () => {
    const dir = await tempDir('ms-keep');
    const ids = await writeStore(dir, 3);
    const { store } = await openStore(dir, { compactBelow: 0 }); // 1 of 3 live: not compacted away
    const handle = store.adopt(ids[1]!)!;
    store.recovered();
    await store.idle();
    expect(await storeFiles(dir, '.seg')).toEqual([segmentFileName(1), segmentFileName(2)]);
    expectBytes(store.read(handle), message(1));
    await store.close();
  });

  it('never hands out a record id twice, even after every record and file was deleted', async () => {
    const dir = await tempDir('ms-ids');
    const ids = await writeStore(dir, 3);
    const second = await openStore(dir);
    second.store.recovered(); // nobody adopts: segment 1 is deleted
    await second.store.idle();
    await second.store.close();
    expect(await storeFiles(dir, '.seg')).toEqual([segmentFileName(2)]);
    const third = await openStore(dir);
    expect(third.store.recordId(third.store.put(message(5)))).toBeGreaterThan(Math.max(...ids));
    await third.store.close();
  });

  it('cuts off a torn tail: every frame before it adopts, at every cut of the last frame', async () => {
    const source = await tempDir('ms-torn-source');
    const ids = await writeStore(source, 3, 40);
    const full = await readFile(join(source, segmentFileName(1)));
    const lastStart = SEGMENT_HEADER_BYTES + 2 * (FRAME_OVERHEAD_BYTES + 40);
    expect(full.length).toBe(lastStart + FRAME_OVERHEAD_BYTES + 40);
    for (let cut = lastStart; cut < full.length; cut++) {
      const dir = await tempDir('ms-torn');
      await writeFile(join(dir, 'store.id'), await readFile(join(source, 'store.id')));
      await writeFile(join(dir, segmentFileName(1)), full.subarray(0, cut)); // no index: a crash before sealing
      const { store, warnings } = await openStore(dir);
      expectBytes(store.read(store.adopt(ids[0]!)!), message(0, 40), `cut ${cut}`);
      expectBytes(store.read(store.adopt(ids[1]!)!), message(1, 40), `cut ${cut}`);
      expect(store.adopt(ids[2]!), `cut ${cut}`).toBeNull();
      expect(warnings.matching(/torn write/), `cut ${cut}`).toHaveLength(cut === lastStart ? 0 : 1);
      await store.close();
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('ignores a zero-filled tail and skips a damaged frame between good ones', async () => {
    const dir = await tempDir('ms-damage');
    const ids = await writeStore(dir, 3, 40);
    const path = join(dir, segmentFileName(1));
    const bytes = await readFile(path);
    bytes[SEGMENT_HEADER_BYTES + (FRAME_OVERHEAD_BYTES + 40) + FRAME_OVERHEAD_BYTES + 5]! ^= 0xff; // inside the 2nd message
    await writeFile(path, Buffer.concat([bytes, Buffer.alloc(500)]));
    await unlink(join(dir, indexFileName(1)));
    const { store, warnings } = await openStore(dir);
    expectBytes(store.read(store.adopt(ids[0]!)!), message(0, 40));
    expect(store.adopt(ids[1]!)).toBeNull();
    expectBytes(store.read(store.adopt(ids[2]!)!), message(2, 40));
    expect(warnings.matching(/damaged bytes at offset/)).toHaveLength(1);
    expect(warnings.matching(/zero-filled tail/)).toHaveLength(1);
    await store.close();
  });

  it('scans a segment whose index is missing or damaged, and writes the index again', async () => {
    const dir = await tempDir('ms-index');
    const ids = await writeStore(dir, 50);
    const indexPath = join(dir, indexFileName(1));
    const index = await readFile(indexPath);
    index[30]! ^= 0x01;
    await writeFile(indexPath, index);
    const damaged = await openStore(dir);
    ids.forEach((id, i) => expectBytes(damaged.store.read(damaged.store.adopt(id)!), message(i)));
    expect(damaged.warnings.matching(/idx is not usable \(index checksum mismatch\)/)).toHaveLength(1);
    await damaged.store.close();

    await unlink(indexPath);
    const missing = await openStore(dir);
    ids.forEach((id, i) => expectBytes(missing.store.read(missing.store.adopt(id)!), message(i)));
    await missing.store.close();
    expect((await stat(indexPath)).size).toBe(index.length); // repaired by the open

    const repaired = await openStore(dir);
    expect(repaired.warnings.messages).toEqual([]);
    ids.forEach((id) => expect(repaired.store.adopt(id)).not.toBeNull());
    await repaired.store.close();
  });

  it('takes the newest file when a record id is in two (a crash during compaction)', async () => {
    const dir = await tempDir('ms-dup');
    const ids = await writeStore(dir, 2);
    // The copy a compaction made into segment 5 before the crash, the old segment 1 still there.
    const old = await readFile(join(dir, segmentFileName(1)));
    await writeFile(join(dir, segmentFileName(5)), Buffer.concat([encodeSegmentHeader({ segment: 5, recordIdFloor: 3 }), old.subarray(SEGMENT_HEADER_BYTES)]));
    const { store } = await openStore(dir);
    const handles = ids.map((id) => store.adopt(id)!);
    store.recovered();
    await store.idle();
    expect(await storeFiles(dir, '.seg')).toEqual([segmentFileName(5), segmentFileName(6)]);
    handles.forEach((h, i) => expectBytes(store.read(h), message(i)));
    await store.close();
  });

  it('treats a segment with a torn header as empty, and deletes it at recovered()', async () => {
    const dir = await tempDir('ms-tornheader');
    const ids = await writeStore(dir, 2);
    const header = encodeSegmentHeader({ segment: 2, recordIdFloor: 3 });
    await writeFile(join(dir, segmentFileName(2)), header.subarray(0, 10)); // a crash right after creating it
    const { store, warnings } = await openStore(dir);
    expect(warnings.matching(/00000002.seg holds no records: its header was never completely written/)).toHaveLength(1);
    const handles = ids.map((id) => store.adopt(id)!);
    store.recovered();
    await store.idle();
    expect(await storeFiles(dir, '.seg')).toEqual([segmentFileName(1), segmentFileName(3)]);
    handles.forEach((h, i) => expectBytes(store.read(h), message(i)));
    await store.close();
    const again = await openStore(dir);
    expect(again.warnings.messages).toEqual([]);
    await again.store.close();
  });

  it('refuses a directory with segments but no store.id', async () => {
    const dir = await tempDir('ms-noid');
    await writeStore(dir, 1);
    await unlink(join(dir, 'store.id'));
    await expect(openStore(dir)).rejects.toBeInstanceOf(MessageStoreCorruptionError);
  });

  it('creates store.id again after a crash tore it during the first open', async () => {
    const dir = await tempDir('ms-tornid');
    await appendFile(join(dir, 'store.id'), 'abc');
    const { store } = await openStore(dir, { newStoreId: () => '0123456789abcdef0123456789abcdef' });
    expect(store.storeId).toBe('0123456789abcdef0123456789abcdef');
    await store.close();
    expect(await readFile(join(dir, 'store.id'), 'utf8')).toBe('0123456789abcdef0123456789abcdef\n');
  });
});
