import { open, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { StorageInvariantError } from '../src/errors.js';
import { FRAME_OVERHEAD_BYTES, SEGMENT_HEADER_BYTES } from '../src/message-store/record-format.js';
import { segmentFileName } from '../src/message-store/segments.js';
import { InstrumentedFs, removeTempDirs, tempDir, turns } from './helpers.js';
import { expectBytes, message, openStore, storeFiles, until } from './message-store-helpers.js';

afterEach(removeTempDirs);

async function segmentFileBytes(dir: string): Promise<number> {
  let total = 0;
  for (const name of await storeFiles(dir, '.seg')) total += (await stat(join(dir, name))).size;
  return total;
}

describe('MessageStore: compaction', { timeout: 60_000 }, () => {
  it('does not let one old live record pin the files behind it', async () => {
    const dir = await tempDir('ms-pin');
    const segmentBytes = 64 * 1024;
    const { store } = await openStore(dir, { segmentBytes });
    store.recovered();
    const head = store.put(message(0, 1024));
    const headId = store.recordId(head);
    const perSegment = Math.floor((segmentBytes - SEGMENT_HEADER_BYTES) / (FRAME_OVERHEAD_BYTES + 1024));
    // Twenty segments' worth, each batch acked (released) once it is durable.
    for (let batch = 0; batch < 20; batch++) {
      const handles = Array.from({ length: perSegment }, (_, i) => store.put(message(batch * 1000 + i, 1024)));
      await store.sync();
      for (const h of handles) store.release(h);
      await store.idle();
    }
    const stats = store.stats();
    // The head's segment is compacted once it settled (a segment's worth released since a
    // record of it last died): about every second or third batch.
    expect(stats.compactions).toBeGreaterThanOrEqual(6);
    expect(stats.liveRecords).toBe(1);
    // What is left: the segment being written (dead records and the head's latest copy).
    expect(stats.segments).toBeLessThanOrEqual(2);
    expect(stats.diskBytes).toBeLessThanOrEqual(2 * segmentBytes);
    expect(await segmentFileBytes(dir)).toBe(stats.diskBytes);
    expect(store.recordId(head)).toBe(headId);
    expectBytes(store.read(head), message(0, 1024));
    await store.close();

    const { store: reopened, warnings } = await openStore(dir, { segmentBytes });
    const adopted = reopened.adopt(headId)!;
    expectBytes(reopened.read(adopted), message(0, 1024));
    reopened.recovered();
    await reopened.idle();
    // The old segments with nothing live are gone; the head's copy moved to the new one.
    expect(reopened.stats().diskBytes).toBeLessThanOrEqual(SEGMENT_HEADER_BYTES + 2 * (FRAME_OVERHEAD_BYTES + 1024));
    expectBytes(reopened.read(adopted), message(0, 1024));
    expect(warnings.messages).toEqual([]);
    await reopened.close();
  });

  it('keeps reads working during a compaction and does not revive a record released during its copy', async () => {
    const dir = await tempDir('ms-race');
    const fs = new InstrumentedFs();
    const segmentBytes = 8192;
    const size = 500;
    // Compacted as soon as mostly dead: this test is about the copy, not about when it starts.
    const { store } = await openStore(dir, { segmentBytes, compactSettleBytes: 0 }, fs);
    store.recovered();
    // 15 frames fill a segment: records 0-14 in segment 1, 15-29 in 2, 30 in 3.
    const handles = Array.from({ length: 31 }, (_, i) => store.put(message(i, size)));
    await store.sync();
    await store.idle();
    expect(await storeFiles(dir, '.idx')).toEqual(['00000001.idx', '00000002.idx']);

    // Hold every datasync: the compaction will wait in its sync, copies written, handles not moved.
    let openGate!: () => void;
    fs.datasyncGate = new Promise((resolve) => (openGate = resolve));
    const datasyncs = fs.calls.datasync;
    for (let i = 0; i < 10; i++) store.release(handles[i]!); // segment 1: 5 of 15 live
    await until(() => fs.calls.datasync > datasyncs, 'the compaction syncs its copies');
    await turns(5);
    expect(store.stats().compactions).toBe(0);
    for (let i = 10; i < 15; i++) expectBytes(store.read(handles[i]!), message(i, size));
    store.release(handles[10]!); // during its copy
    fs.datasyncGate = null;
    openGate();
    await store.idle();

    expect(store.stats().compactions).toBe(1);
    expect(store.stats().liveRecords).toBe(31 - 11);
    expect(await storeFiles(dir, '.seg')).not.toContain(segmentFileName(1));
    expect(() => store.read(handles[10]!)).toThrow(StorageInvariantError);
    for (let i = 11; i < 31; i++) expectBytes(store.read(handles[i]!), message(i, size));

    // Everything released, and enough put behind it to seal the segments the copies went to:
    // had the released record's copy been counted live, its segment could not be deleted.
    for (let i = 11; i < 31; i++) store.release(handles[i]!);
    for (let round = 0; round < 3; round++) {
      const filler = Array.from({ length: 15 }, (_, i) => store.put(message(100 + i, size)));
      await store.sync();
      for (const h of filler) store.release(h);
      await store.idle();
    }
    expect(store.stats()).toMatchObject({ liveRecords: 0, liveBytes: 0 });
    expect(store.stats().segments).toBe(1);
    await store.close();
  });

  it('leaves a segment whose live record does not read back, and reports it', async () => {
    const dir = await tempDir('ms-badcopy');
    const segmentBytes = 8192;
    const size = 500;
    const { store, warnings } = await openStore(dir, { segmentBytes, compactSettleBytes: 0 });
    store.recovered();
    const handles = Array.from({ length: 16 }, (_, i) => store.put(message(i, size)));
    await store.sync();
    await store.idle();
    // Damage record 14 (live) on disk, then make segment 1 mostly dead.
    const file = await open(join(dir, segmentFileName(1)), 'r+');
    await file.write(Buffer.from([0xee]), 0, 1, SEGMENT_HEADER_BYTES + 14 * (FRAME_OVERHEAD_BYTES + size) + FRAME_OVERHEAD_BYTES + 3);
    await file.close();
    for (let i = 0; i < 10; i++) store.release(handles[i]!);
    await turns(5);
    await store.idle();
    expect(store.stats().compactions).toBe(0);
    expect(warnings.matching(/compacting segment 1 failed: record \d+ at offset \d+ does not read back/)).toHaveLength(1);
    expect(await storeFiles(dir, '.seg')).toContain(segmentFileName(1));
    expectBytes(store.read(handles[13]!), message(13, size));
    expect(store.read(handles[14]!)).toBeUndefined();
    await store.close();
  });
  it('copies nothing out of segments a queue empties in order: they are deleted once empty', async () => {
    const dir = await tempDir('ms-fifo');
    const segmentBytes = 64 * 1024;
    const size = 1024;
    const { store } = await openStore(dir, { segmentBytes });
    store.recovered();
    const perSegment = Math.floor((segmentBytes - SEGMENT_HEADER_BYTES) / (FRAME_OVERHEAD_BYTES + size));
    // Six segments' worth, then consumed oldest first in batches of a quarter segment (a
    // node releases a snapshot's worth at a time), the store idle between batches, while as
    // much again is written: each segment passes below half live long before it is empty.
    const queue = Array.from({ length: 6 * perSegment }, (_, i) => store.put(message(i, size)));
    await store.sync();
    await store.idle();
    const batch = Math.floor(perSegment / 4);
    for (let next = 6 * perSegment; queue.length > 0; ) {
      for (const h of queue.splice(0, batch)) store.release(h);
      if (next < 12 * perSegment) {
        for (let i = 0; i < batch; i++) queue.push(store.put(message(next++, size)));
        await store.sync();
      }
      await store.idle();
    }
    const stats = store.stats();
    expect(stats.compactions).toBe(0);
    expect(stats.liveRecords).toBe(0);
    expect(stats.segments).toBe(1);
    await store.close();
  });

  it('compacts a mostly dead segment once none of its records died while a segment of others was released', async () => {
    const dir = await tempDir('ms-settle');
    const segmentBytes = 64 * 1024;
    const size = 1024;
    const { store } = await openStore(dir, { segmentBytes });
    store.recovered();
    const perSegment = Math.floor((segmentBytes - SEGMENT_HEADER_BYTES) / (FRAME_OVERHEAD_BYTES + size));
    // Segment 1: a slow queue's records (every eighth) among a fast queue's.
    const first = Array.from({ length: perSegment }, (_, i) => store.put(message(i, size)));
    const slow = first.filter((_, i) => i % 8 === 0);
    const fast = first.filter((_, i) => i % 8 !== 0);
    await store.sync();
    const later = Array.from({ length: 2 * perSegment }, (_, i) => store.put(message(perSegment + i, size)));
    await store.sync();
    await store.idle();
    for (const h of fast) store.release(h);
    await store.idle();
    expect(store.stats().compactions).toBe(0); // a record of it died just now: not settled
    // Less than a segment's worth of other records released: still not settled.
    const settleRecords = Math.ceil(segmentBytes / (FRAME_OVERHEAD_BYTES + size));
    for (const h of later.splice(0, settleRecords - 1)) store.release(h);
    await store.idle();
    expect(store.stats().compactions).toBe(0);
    // A segment's worth (settling segments are looked at every eighth of one): settled,
    // compacted, and the slow queue's records read back.
    for (const h of later.splice(0, 1 + Math.ceil(settleRecords / 8))) store.release(h);
    await store.idle();
    expect(store.stats().compactions).toBe(1);
    expect(await storeFiles(dir, '.seg')).not.toContain(segmentFileName(1));
    slow.forEach((h, k) => expectBytes(store.read(h), message(k * 8, size)));
    await store.close();
  });
});
