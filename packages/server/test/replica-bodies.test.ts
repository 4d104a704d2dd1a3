/**
 * ReplicaBodies (replica-bodies.ts): a queue replica's handles into the node's message store,
 * and the pinning of records a snapshot lists until the next snapshot is saved. Against a
 * real store, so that "released" means the store's record is dead (stats().liveRecords).
 */
import type { MessageStore } from '@quorumq/storage';
import { afterAll, describe, expect, it } from 'vitest';

import { HOLD_BYTES_MAX, ReplicaBodies } from '../src/replica-bodies.js';
import { TestStores } from './test-message-store.js';

const stores = new TestStores();
afterAll(() => stores.closeAll());

/** Distinct, checkable bytes for message `id`. */
const bytesOf = (id: number, length = 100): Buffer => {
  const out = Buffer.alloc(length);
  for (let i = 0; i < length; i++) out[i] = (id * 31 + i * 7) & 0xff;
  return out;
};

const live = (store: MessageStore): number => store.stats().liveRecords;
const read = (bodies: ReplicaBodies, id: number): Buffer | undefined => {
  const bytes = bodies.read(id);
  return bytes === undefined ? undefined : Buffer.from(bytes);
};

describe('ReplicaBodies', () => {
  it('puts, reads and deletes a message: one record each, released on delete', async () => {
    const store = await stores.open();
    const bodies = new ReplicaBodies(store);
    const input = bytesOf(1, 300);
    bodies.put(1, input);
    input.fill(0); // put copies
    bodies.put(2, bytesOf(2, 50));
    expect(read(bodies, 1)).toEqual(bytesOf(1, 300));
    expect(read(bodies, 2)).toEqual(bytesOf(2, 50));
    expect(bodies.read(3)).toBeUndefined();
    expect([...bodies.keys()]).toEqual([1, 2]);
    expect(bodies.size).toBe(2);
    expect(bodies.bytes).toBe(350);
    expect(bodies.has(1)).toBe(true);
    expect(live(store)).toBe(2);

    bodies.delete(1);
    expect(bodies.has(1)).toBe(false);
    expect(bodies.read(1)).toBeUndefined();
    expect(bodies.size).toBe(1);
    expect(bodies.bytes).toBe(50);
    expect(live(store)).toBe(1);
    bodies.delete(1); // twice: nothing more
    bodies.delete(99); // never there
    expect(live(store)).toBe(1);

    // Put again under the same id: the previous record is released, the new bytes read back.
    bodies.put(2, bytesOf(20, 70));
    expect(read(bodies, 2)).toEqual(bytesOf(20, 70));
    expect(bodies.bytes).toBe(70);
    expect(live(store)).toBe(1);
  });

  it("keeps a message the snapshot listed readable after it leaves, and its record until the next snapshot's save", async () => {
    const store = await stores.open();
    const bodies = new ReplicaBodies(store);
    for (const id of [10, 11, 12]) bodies.put(id, bytesOf(id));
    const taken = bodies.snapshotTaken(() => true);
    expect(taken.messageIds).toEqual([10, 11, 12]);
    expect(new Set(taken.recordIds).size).toBe(3);
    expect(live(store)).toBe(3);

    // 11 leaves after the snapshot listed it: pinned, still readable, its record still live.
    bodies.delete(11);
    expect(bodies.has(11)).toBe(false);
    expect([...bodies.keys()]).toEqual([10, 12]);
    expect(bodies.size).toBe(2);
    expect(bodies.bytes).toBe(200);
    expect(read(bodies, 11)).toEqual(bytesOf(11));
    expect(live(store)).toBe(3);

    // That snapshot is saved: it lists 11, so 11 stays (the one on disk can be adopted at a restart).
    bodies.snapshotSaved();
    expect(read(bodies, 11)).toEqual(bytesOf(11));
    expect(live(store)).toBe(3);

    // The next snapshot does not list 11; until it is saved, the one on disk still does.
    const next = bodies.snapshotTaken(() => true);
    expect(next.messageIds).toEqual([10, 12]);
    expect(next.recordIds).toEqual([taken.recordIds[0], taken.recordIds[2]]);
    expect(live(store)).toBe(3);
    bodies.snapshotSaved();
    expect(bodies.read(11)).toBeUndefined();
    expect(live(store)).toBe(2);
    expect(read(bodies, 10)).toEqual(bytesOf(10));
    expect(read(bodies, 12)).toEqual(bytesOf(12));
  });

  it('releases at once a message enqueued after the snapshot (no snapshot lists it)', async () => {
    const store = await stores.open();
    const bodies = new ReplicaBodies(store);
    bodies.put(1, bytesOf(1));
    bodies.snapshotTaken(() => true);
    bodies.put(2, bytesOf(2));
    expect(live(store)).toBe(2);
    bodies.delete(2);
    expect(bodies.read(2)).toBeUndefined();
    expect(live(store)).toBe(1);
    // While 1, listed, is pinned.
    bodies.delete(1);
    expect(read(bodies, 1)).toEqual(bytesOf(1));
    expect(live(store)).toBe(1);
  });

  it('pins after a restore from references what the restored snapshot lists, and only that', async () => {
    const store = await stores.open();
    const bodies = new ReplicaBodies(store);
    // Adopt takes over a reference the caller holds (as AdoptedBodies hands them over).
    for (const id of [5, 7]) bodies.adopt(id, store.put(bytesOf(id)));
    bodies.restoredFromRefs([5, 7]);
    expect(bodies.bytes).toBe(200);
    bodies.put(8, bytesOf(8));
    expect(live(store)).toBe(3);
    bodies.delete(7);
    bodies.delete(8);
    expect(read(bodies, 7)).toEqual(bytesOf(7));
    expect(bodies.read(8)).toBeUndefined();
    expect(live(store)).toBe(2);
    bodies.snapshotTaken(() => true);
    bodies.snapshotSaved();
    expect(live(store)).toBe(1);
  });

  it('clear() releases every record: live, pinned, and awaiting the next save', async () => {
    const store = await stores.open();
    const bodies = new ReplicaBodies(store);
    for (let id = 1; id <= 6; id++) bodies.put(id, bytesOf(id));
    bodies.snapshotTaken(() => true);
    bodies.delete(1); // pinned
    bodies.snapshotTaken(() => true);
    bodies.delete(2); // pinned; 1 now awaits the save of this snapshot
    expect(live(store)).toBe(6);
    bodies.clear();
    expect(live(store)).toBe(0);
    expect(bodies.size).toBe(0);
    expect(bodies.bytes).toBe(0);
    for (let id = 1; id <= 6; id++) expect(bodies.read(id), `message ${id}`).toBeUndefined();
    // Nothing is pinned any more: a message put and deleted now is released at once,
    // and a later save releases nothing twice.
    bodies.put(3, bytesOf(3));
    bodies.delete(3);
    expect(live(store)).toBe(0);
    bodies.snapshotSaved();
    expect(live(store)).toBe(0);
  });

  describe('sweep(has, remaining)', () => {
    it('deletes the messages gone from the front, and stops at the first one still held', async () => {
      const store = await stores.open();
      const bodies = new ReplicaBodies(store);
      for (let id = 1; id <= 5; id++) bodies.put(id, bytesOf(id));
      const held = new Set([3, 5]);
      bodies.sweep((id) => held.has(id), held.size);
      // 1 and 2 went from the front; 4 sits behind 3, which is held.
      expect([...bodies.keys()]).toEqual([3, 4, 5]);
      expect(live(store)).toBe(3);
    });

    it('does nothing when no more messages than remain are kept', async () => {
      const store = await stores.open();
      const bodies = new ReplicaBodies(store);
      for (let id = 1; id <= 3; id++) bodies.put(id, bytesOf(id));
      bodies.sweep(() => false, 3);
      expect([...bodies.keys()]).toEqual([1, 2, 3]);
    });

    it('deletes every message gone once they are far more than remain', async () => {
      const store = await stores.open();
      const bodies = new ReplicaBodies(store);
      const count = 1100;
      for (let id = 0; id < count; id++) bodies.put(id, bytesOf(id, 8));
      // Only 0 and 600 are held: 0 stops the front sweep, the full pass removes the rest.
      const held = new Set([0, 600]);
      bodies.sweep((id) => held.has(id), held.size);
      expect([...bodies.keys()]).toEqual([0, 600]);
      expect(live(store)).toBe(2);
      expect(bodies.bytes).toBe(16);
    });

    it('behind a held head, keeps at most 64 (or an eighth of those held) messages that left', async () => {
      const store = await stores.open();
      const bodies = new ReplicaBodies(store);
      // An unacked head (0) and 1,000 messages behind it, consumed one by one.
      for (let id = 0; id <= 1000; id++) bodies.put(id, bytesOf(id, 8));
      const held = new Set(Array.from({ length: 1001 }, (_, id) => id));
      let most = 0;
      for (let id = 1; id <= 1000; id++) {
        held.delete(id);
        bodies.sweep((m) => held.has(m), held.size);
        most = Math.max(most, bodies.size - held.size);
      }
      expect(most).toBeLessThanOrEqual(Math.max(65, Math.ceil(1001 / 8) + 1));
      expect(bodies.size - held.size).toBeLessThanOrEqual(65);
      expect(live(store)).toBe(bodies.size);
    });

    it('pins what it deletes if the latest snapshot listed it', async () => {
      const store = await stores.open();
      const bodies = new ReplicaBodies(store);
      for (let id = 1; id <= 4; id++) bodies.put(id, bytesOf(id));
      bodies.snapshotTaken(() => true);
      bodies.put(5, bytesOf(5));
      bodies.sweep((id) => id === 5, 1);
      expect([...bodies.keys()]).toEqual([5]);
      for (let id = 1; id <= 4; id++) expect(read(bodies, id), `message ${id}`).toEqual(bytesOf(id));
      expect(live(store)).toBe(5);
      bodies.snapshotTaken(() => true);
      bodies.snapshotSaved();
      expect(live(store)).toBe(1);
    });

    it('when every message left (a purge): pins those the snapshot listed, readable until the next save, and releases the rest at once', async () => {
      const store = await stores.open();
      const bodies = new ReplicaBodies(store);
      for (let id = 1; id <= 1000; id++) bodies.put(id, bytesOf(id));
      bodies.snapshotTaken(() => true);
      for (let id = 1001; id <= 1100; id++) bodies.put(id, bytesOf(id)); // after the snapshot
      for (let id = 1101; id <= 1110; id++) bodies.hold(id, bytesOf(id)); // held
      expect(live(store)).toBe(1100);

      bodies.sweep(() => false, 0);
      expect(bodies.size).toBe(0);
      expect(bodies.bytes).toBe(0);
      expect(bodies.heldBytes).toBe(0);
      expect(bodies.pinnedBytes).toBe(1000 * 100);
      expect(live(store)).toBe(1000); // those no snapshot lists are gone
      for (const id of [1, 2, 500, 999, 1000]) expect(read(bodies, id), `message ${id}`).toEqual(bytesOf(id));
      for (const id of [1001, 1100, 1105]) expect(bodies.read(id), `message ${id}`).toBeUndefined();
      const shared = bodies.shareRecord(7); // a follower installing the snapshot may still fetch it
      expect(shared).toBeDefined();
      store.release(shared!);

      // The next snapshot lists none of them; the one on disk does until it is saved.
      bodies.put(2000, bytesOf(2000));
      bodies.snapshotTaken(() => true);
      expect(read(bodies, 500)).toEqual(bytesOf(500));
      expect(live(store)).toBe(1001);
      bodies.snapshotSaved();
      expect(bodies.read(500)).toBeUndefined();
      expect(live(store)).toBe(1);
      expect(read(bodies, 2000)).toEqual(bytesOf(2000));
    });
  });

  describe('held messages (views of their log entries until a snapshot or a few MiB)', () => {
    it('reads a held message from its entry, and one that leaves before the snapshot never reaches the store', async () => {
      const store = await stores.open();
      const bodies = new ReplicaBodies(store);
      const entry = Buffer.concat([bytesOf(1, 200), bytesOf(2, 300)]);
      expect(bodies.hold(1, entry.subarray(0, 200))).toBe(0);
      expect(bodies.hold(2, entry.subarray(200))).toBe(0);
      expect(read(bodies, 1)).toEqual(bytesOf(1, 200));
      expect(read(bodies, 2)).toEqual(bytesOf(2, 300));
      expect(bodies.size).toBe(2);
      expect(bodies.bytes).toBe(500);
      expect([...bodies.keys()]).toEqual([1, 2]);
      expect(live(store)).toBe(0);
      expect(store.stats().pendingWriteBytes).toBe(0);

      bodies.delete(1);
      expect(bodies.read(1)).toBeUndefined();
      expect(bodies.bytes).toBe(300);
      const taken = bodies.snapshotTaken(() => true);
      expect(taken.messageIds).toEqual([2]);
      expect(taken.lost).toBe(0);
      expect(live(store)).toBe(1);
      expect(taken.recordIds).toEqual([store.recordId(0)]);
      // Stored: the store's copy is read back, not the entry (changing the entry changes nothing).
      entry.fill(0);
      expect(read(bodies, 2)).toEqual(bytesOf(2, 300));
      // Listed by the snapshot: pinned after it leaves, until the next save.
      bodies.delete(2);
      expect(read(bodies, 2)).toEqual(bytesOf(2, 300));
      expect(bodies.pinnedBytes).toBe(300);
      bodies.snapshotTaken(() => true);
      bodies.snapshotSaved();
      expect(live(store)).toBe(0);
    });

    it(`holds at most ${HOLD_BYTES_MAX / 1024 / 1024} MiB: beyond, the oldest held go into the store, a few at a time`, async () => {
      const store = await stores.open();
      const bodies = new ReplicaBodies(store);
      const size = 64 * 1024;
      const count = HOLD_BYTES_MAX / size;
      const entries = new Map<number, Buffer>();
      for (let id = 1; id <= count; id++) bodies.hold(id, entries.set(id, bytesOf(id, size)).get(id)!);
      expect(live(store)).toBe(0);
      // One more: only the oldest goes into the store (not the whole 4 MiB at once).
      bodies.hold(count + 1, bytesOf(count + 1, size));
      expect(live(store)).toBe(1);
      // Stored, it is read back from the store (a copy); the second is still a view of its entry.
      entries.get(1)!.fill(0);
      entries.get(2)!.fill(0);
      expect(read(bodies, 1)).toEqual(bytesOf(1, size));
      expect(read(bodies, 2)).toEqual(Buffer.alloc(size));
      entries.get(2)!.set(bytesOf(2, size));
      // A larger one pushes out as many of the oldest as it needs room for.
      bodies.hold(count + 2, bytesOf(count + 2, 3 * size));
      expect(live(store)).toBe(4);
      for (let id = 1; id <= count + 2; id++) expect(read(bodies, id)?.equals(bytesOf(id, id === count + 2 ? 3 * size : size))).toBe(true);
      // The snapshot puts the rest, in id order.
      const held = count + 2;
      // Record ids follow message ids.
      const { messageIds, recordIds } = bodies.snapshotTaken(() => true);
      expect(messageIds).toHaveLength(held);
      expect(live(store)).toBe(held);
      expect([...recordIds].sort((a, b) => a - b)).toEqual(recordIds);
      // Held again after the snapshot; a held message replaced under its id drops the old bytes.
      bodies.hold(held + 1, bytesOf(7, 10));
      bodies.hold(held + 1, bytesOf(8, 20));
      expect(read(bodies, held + 1)).toEqual(bytesOf(8, 20));
      expect(bodies.bytes).toBe((count + 4) * size + 20);
      expect(live(store)).toBe(held);
    });

    it('clear() drops held messages without touching the store', async () => {
      const store = await stores.open();
      const bodies = new ReplicaBodies(store);
      bodies.put(1, bytesOf(1));
      bodies.hold(2, bytesOf(2));
      bodies.clear();
      expect(bodies.size).toBe(0);
      expect(bodies.bytes).toBe(0);
      expect(bodies.read(2)).toBeUndefined();
      expect(live(store)).toBe(0);
      expect(bodies.snapshotTaken(() => true)).toEqual({ messageIds: [], recordIds: [], lost: 0 });
    });

    it('counts as lost, and no longer lists, the held messages the store refuses at the snapshot', async () => {
      const store = await stores.open();
      const bodies = new ReplicaBodies(store);
      bodies.put(1, bytesOf(1));
      bodies.hold(2, bytesOf(2));
      bodies.hold(3, bytesOf(3));
      await stores.close(store);
      const taken = bodies.snapshotTaken(() => true);
      expect(taken.lost).toBe(2);
      expect(taken.messageIds).toEqual([1]);
      expect(bodies.size).toBe(1);
      expect(bodies.bytes).toBe(100);
      expect(bodies.has(2)).toBe(false);
    });
  });
});
