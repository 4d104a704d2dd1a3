import { afterEach, describe, expect, it } from 'vitest';
import { MessageStoreDiskFullError, MessageStoreFatalError, StorageInvariantError } from '../src/errors.js';
import { FRAME_OVERHEAD_BYTES, SEGMENT_HEADER_BYTES } from '../src/message-store/record-format.js';
import { errnoError, InstrumentedFs, removeTempDirs, tempDir, turns } from './helpers.js';
import { expectBytes, message, openStore, until } from './message-store-helpers.js';

afterEach(removeTempDirs);

describe('MessageStore: put, read, references', { timeout: 30_000 }, () => {
  it('reads back what was put: pending, written, and larger than a read-ahead chunk', async () => {
    const dir = await tempDir('ms-roundtrip');
    const { store } = await openStore(dir, { readAheadBytes: 4096 });
    const sizes = [0, 1, 100, 4095, 4096, 5000, 3 * 1024 * 1024];
    const handles = sizes.map((size, i) => store.put(message(i, size)));
    // Nothing is written before the end of the turn (below a megabyte), except the 3 MiB one.
    expect(store.stats().pendingWriteBytes).toBeGreaterThan(0);
    sizes.forEach((size, i) => expectBytes(store.read(handles[i]!), message(i, size)));
    await store.sync();
    expect(store.stats().pendingWriteBytes).toBe(0);
    sizes.forEach((size, i) => {
      expect(store.size(handles[i]!)).toBe(size);
      expectBytes(store.read(handles[i]!), message(i, size));
    });
    expect(new Set(handles.map((h) => store.recordId(h))).size).toBe(sizes.length);
    await store.close();
  });

  it('serves records from memory while their write has not run', async () => {
    const dir = await tempDir('ms-pending');
    const flushes: Array<() => void> = [];
    const { store } = await openStore(dir, { scheduleFlush: (run) => flushes.push(run) });
    const a = store.put(message(1));
    const b = store.put(message(2));
    expect(store.stats().pendingWriteBytes).toBe(2 * (FRAME_OVERHEAD_BYTES + 100));
    expectBytes(store.read(a), message(1));
    expectBytes(store.read(b), message(2));
    expect(flushes).toHaveLength(1); // one flush per turn, however many puts
    const synced = store.sync();
    for (const run of flushes.splice(0)) run();
    await synced;
    expectBytes(store.read(a), message(1));
    for (const run of flushes.splice(0)) run();
    await store.close();
  });

  it('counts references: a record lives until its last release', async () => {
    const dir = await tempDir('ms-refs');
    const { store } = await openStore(dir);
    const handle = store.put(message(7));
    store.retain(handle);
    store.release(handle);
    expectBytes(store.read(handle), message(7));
    expect(store.stats().liveRecords).toBe(1);
    store.release(handle);
    expect(store.stats()).toMatchObject({ liveRecords: 0, liveBytes: 0 });
    expect(() => store.read(handle)).toThrow(StorageInvariantError);
    expect(() => store.release(handle)).toThrow(StorageInvariantError);
    await store.close();
  });

  it('stores a fan-out once: ten puts under one key share one record', async () => {
    const dir = await tempDir('ms-fanout');
    const { store } = await openStore(dir);
    await store.sync();
    const before = store.stats().diskBytes;
    const body = message(3, 1000);
    const handles = Array.from({ length: 10 }, () => store.put(body, 'msg-3'));
    await store.sync();
    expect(new Set(handles).size).toBe(1);
    expect(store.stats().diskBytes - before).toBe(FRAME_OVERHEAD_BYTES + 1000);
    expect(store.stats()).toMatchObject({ liveRecords: 1, liveBytes: 1000 });
    for (let i = 0; i < 9; i++) store.release(handles[0]!);
    expectBytes(store.read(handles[0]!), body);
    store.release(handles[0]!);
    expect(store.stats().liveRecords).toBe(0);
    // The key's record is dead: the next put under it stores the bytes again.
    const again = store.put(body, 'msg-3');
    expectBytes(store.read(again), body);
    expect(store.stats().liveRecords).toBe(1);
    // A different size under the same key is not the same message.
    const other = store.put(message(4, 10), 'msg-3');
    expect(other).not.toBe(again);
    await store.close();
  });

  it('forgets keys beyond recentKeys, oldest first', async () => {
    const dir = await tempDir('ms-keys');
    const { store } = await openStore(dir, { recentKeys: 2 });
    const k1 = store.put(message(1), 'k1');
    const k2 = store.put(message(2), 'k2');
    store.put(message(3), 'k3');
    expect(store.put(message(2), 'k2')).toBe(k2);
    expect(store.put(message(1), 'k1')).not.toBe(k1);
    await store.close();
  });

  it('keeps the read cache within cacheBytes and reads ahead for a sequential reader', async () => {
    const dir = await tempDir('ms-cache');
    const fs = new InstrumentedFs();
    const cacheBytes = 64 * 1024;
    const readAheadBytes = 16 * 1024;
    const { store } = await openStore(dir, { cacheBytes, readAheadBytes }, fs);
    const count = 1000;
    const handles = Array.from({ length: count }, (_, i) => store.put(message(i, 1024)));
    await store.sync();
    const readsBefore = fs.calls.readSync;
    for (let i = 0; i < count; i++) {
      expectBytes(store.read(handles[i]!), message(i, 1024));
      expect(store.stats().cacheBytes).toBeLessThanOrEqual(cacheBytes);
    }
    const chunks = Math.ceil((SEGMENT_HEADER_BYTES + count * (FRAME_OVERHEAD_BYTES + 1024)) / readAheadBytes);
    expect(fs.calls.readSync - readsBefore).toBeLessThanOrEqual(chunks);
    expect(store.stats().cacheBytes).toBeGreaterThan(0);
    // Random order: still bounded, still right.
    for (let k = 0; k < 2000; k++) {
      const i = (k * 7919) % count;
      expectBytes(store.read(handles[i]!), message(i, 1024));
      expect(store.stats().cacheBytes).toBeLessThanOrEqual(cacheBytes);
    }
    await store.close();
  });

  it('returns undefined and reports, never throws, when a record cannot be read', async () => {
    const dir = await tempDir('ms-readfail');
    const fs = new InstrumentedFs();
    const { store, warnings } = await openStore(dir, {}, fs);
    const handle = store.put(message(1));
    await store.sync();
    fs.readFault = errnoError('EIO');
    expect(store.read(handle)).toBeUndefined();
    expect(warnings.matching(/cannot be read.*EIO/)).toHaveLength(1);
    fs.readFault = null;
    expectBytes(store.read(handle), message(1));
    await store.close();
  });
});

describe('MessageStore: read cache', { timeout: 30_000 }, () => {
  it('keeps its cache while reads go through it and empties it once none did between two calls', async () => {
    const dir = await tempDir('ms-cache');
    const { store } = await openStore(dir, { readAheadBytes: 4096 });
    const handles = Array.from({ length: 40 }, (_, i) => store.put(message(i, 1000)));
    await store.sync();
    for (const handle of handles) expectBytes(store.read(handle), message(handles.indexOf(handle), 1000));
    const cached = store.stats().cacheBytes;
    expect(cached).toBeGreaterThan(0);
    // Read since the last call: kept.
    expect(store.dropCacheIfUnused()).toBe(0);
    expect(store.stats().cacheBytes).toBe(cached);
    // Nothing read since: dropped, and reads work again afterwards.
    expect(store.dropCacheIfUnused()).toBe(cached);
    expect(store.stats().cacheBytes).toBe(0);
    expectBytes(store.read(handles[7]!), message(7, 1000));
    expect(store.stats().cacheBytes).toBeGreaterThan(0);
    await store.close();
  });
});

describe('MessageStore: durability', { timeout: 30_000 }, () => {
  it('resolves sync only after a datasync covering the records, coalescing concurrent syncs', async () => {
    const dir = await tempDir('ms-sync');
    const fs = new InstrumentedFs();
    const { store } = await openStore(dir, {}, fs);
    await store.sync(); // nothing put: at once
    let release!: () => void;
    fs.datasyncGate = new Promise((resolve) => (release = resolve));
    const datasyncsBefore = fs.calls.datasync;
    store.put(message(1));
    let resolved = 0;
    const syncs = [store.sync(), store.sync(), store.sync()].map((p) => p.then(() => resolved++));
    await until(() => fs.calls.datasync > datasyncsBefore, 'the writer datasyncs');
    await turns(10);
    expect(fs.calls.writev).toBeGreaterThan(0);
    expect(fs.calls.datasync - datasyncsBefore).toBe(1); // the three syncs share it
    expect(resolved).toBe(0); // the datasync has not returned
    fs.datasyncGate = null;
    release();
    await Promise.all(syncs);
    expect(resolved).toBe(3);
    expect(fs.calls.datasync - datasyncsBefore).toBe(1);
    await store.close();
  });

  it('rejects sync on ENOSPC without throwing from put, keeps the records readable, and writes them once there is room', async () => {
    const dir = await tempDir('ms-enospc');
    const fs = new InstrumentedFs();
    const { store, warnings } = await openStore(dir, {}, fs);
    const first = store.put(message(1));
    await store.sync();
    fs.writeFault = { error: errnoError('ENOSPC'), partialBytes: 50 };
    const handles = Array.from({ length: 5 }, (_, i) => store.put(message(10 + i)));
    await expect(store.sync()).rejects.toBeInstanceOf(MessageStoreDiskFullError);
    await expect(store.sync()).rejects.toThrow(/ENOSPC.*sync\(\) rejects/);
    // A megabyte at once takes the immediate-flush path: still no throw.
    const big = store.put(message(99, 2 * 1024 * 1024));
    await expect(store.sync()).rejects.toBeInstanceOf(MessageStoreDiskFullError);
    handles.forEach((h, i) => expectBytes(store.read(h), message(10 + i)));
    expectBytes(store.read(first), message(1));
    expect(warnings.matching(/ENOSPC/).length).toBeGreaterThanOrEqual(1);
    fs.writeFault = null;
    await store.sync();
    const ids = handles.map((h) => store.recordId(h));
    const bigId = store.recordId(big);
    await store.close();
    const reopened = await openStore(dir, {}, new InstrumentedFs());
    ids.forEach((id, i) => expectBytes(reopened.store.read(reopened.store.adopt(id)!), message(10 + i)));
    expectBytes(reopened.store.read(reopened.store.adopt(bigId)!), message(99, 2 * 1024 * 1024));
    expect(reopened.warnings.messages).toEqual([]); // the partial writes were cut away
    await reopened.store.close();
  });

  it('fails for good when a datasync fails', async () => {
    const dir = await tempDir('ms-fatal');
    const fs = new InstrumentedFs();
    const { store } = await openStore(dir, {}, fs);
    const handle = store.put(message(1));
    fs.datasyncFault = errnoError('EIO');
    await expect(store.sync()).rejects.toBeInstanceOf(MessageStoreFatalError);
    fs.datasyncFault = null;
    store.put(message(2));
    await expect(store.sync()).rejects.toBeInstanceOf(MessageStoreFatalError);
    expectBytes(store.read(handle), message(1));
    await store.close();
  });
});
