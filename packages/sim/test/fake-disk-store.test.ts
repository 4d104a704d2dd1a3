import { createRandom, type Random } from '@quorumq/raft';
import { MessageStore } from '@quorumq/storage';
import { expect, test } from 'vitest';
import { FakeDisk } from '../src/fake-disk.js';
import { Scheduler } from '../src/scheduler.js';

/**
 * The node's message store over the simulator's disk: records whose sync resolved survive a
 * crash with their exact bytes, whatever the crash tore or lost of the rest; a record put
 * after the last sync is either back intact or missing, never wrong. Compaction and segment
 * deletion run in the second session, so a crash can land in the middle of them too.
 */
const NODE = 'n1';
const DIR = '/data/store';

interface Session {
  readonly store: MessageStore;
  /** Cleared at the crash: the dead process's timers never fire. */
  alive: boolean;
}

async function openSession(disk: FakeDisk, scheduler: Scheduler, seed: number): Promise<Session> {
  const session = { alive: true } as { store: MessageStore; alive: boolean };
  const opening = MessageStore.open({
    dir: DIR,
    fs: disk.fsOf(NODE),
    segmentBytes: 4096,
    readAheadBytes: 4096,
    cacheBytes: 16 * 1024,
    scheduleFlush: (run) => scheduler.after(0, 'store flush', () => session.alive && run()),
    logger: { warn: () => {} },
    newStoreId: () => seed.toString(16).padStart(32, '0'),
  });
  session.store = await drive(scheduler, opening);
  return session;
}

/** Runs simulated events (and the microtasks between them) until `promise` settles. */
async function drive<T>(scheduler: Scheduler, promise: Promise<T>): Promise<T> {
  let settled = false;
  void promise.then(
    () => (settled = true),
    () => (settled = true),
  );
  for (let idle = 0; !settled; ) {
    const event = scheduler.pop();
    if (event !== undefined) event.run();
    await new Promise((resolve) => setImmediate(resolve));
    idle = event === undefined ? idle + 1 : 0;
    if (idle > 100) throw new Error('the simulation stalled: no events left and the promise is still pending');
  }
  return promise;
}

/** Runs up to `count` events: a crash then lands anywhere in the writes, syncs and deletions. */
async function runSome(scheduler: Scheduler, count: number): Promise<void> {
  for (let i = 0; i < count; i++) {
    scheduler.pop()?.run();
    await new Promise((resolve) => setImmediate(resolve));
  }
}

function bytesOf(random: Random, tag: number): Uint8Array {
  const out = new Uint8Array(random.nextInt(600));
  for (let i = 0; i < out.length; i++) out[i] = (tag * 131 + i * 17) & 0xff;
  return out;
}

function same(a: Uint8Array | undefined, b: Uint8Array): boolean {
  return a !== undefined && Buffer.from(a).equals(Buffer.from(b));
}

async function crash(disk: FakeDisk, session: Session, random: Random): Promise<void> {
  session.alive = false;
  disk.crash(NODE, [0, 0.5, 1][random.nextInt(3)]!);
  // Let the dead process's already-running continuations end before the next one starts.
  for (let i = 0; i < 5; i++) await new Promise((resolve) => setImmediate(resolve));
}

test('the message store keeps every synced record across crashes of the simulated disk', { timeout: 60_000 }, async () => {
  for (let seed = 1; seed <= 25; seed++) {
    const random = createRandom(seed);
    const scheduler = new Scheduler();
    const disk = new FakeDisk(scheduler, random);

    // Session 1: a synced batch, then an unsynced one cut short by a crash.
    const first = await openSession(disk, scheduler, seed);
    const synced = new Map<number, Uint8Array>();
    for (let i = 0; i < 40; i++) {
      const bytes = bytesOf(random, i);
      synced.set(first.store.recordId(first.store.put(bytes)), bytes);
    }
    await drive(scheduler, first.store.sync());
    const unsynced = new Map<number, Uint8Array>();
    for (let i = 0; i < 20; i++) {
      const bytes = bytesOf(random, 100 + i);
      unsynced.set(first.store.recordId(first.store.put(bytes)), bytes);
    }
    const syncing = first.store.sync();
    void syncing.catch(() => {});
    await runSome(scheduler, random.nextInt(6));
    await crash(disk, first, random);

    // Session 2: every synced record adopts with its bytes; keep half, compact, crash again.
    const second = await openSession(disk, scheduler, seed);
    const kept = new Map<number, Uint8Array>();
    for (const [id, bytes] of synced) {
      const handle = second.store.adopt(id);
      expect(handle, `seed ${seed}: synced record ${id}`).not.toBeNull();
      expect(same(second.store.read(handle!), bytes), `seed ${seed}: bytes of record ${id}`).toBe(true);
      if (id % 2 === 0) second.store.release(handle!);
      else kept.set(id, bytes);
    }
    for (const [id, bytes] of unsynced) {
      const handle = second.store.adopt(id);
      if (handle !== null) expect(same(second.store.read(handle), bytes), `seed ${seed}: unsynced record ${id}`).toBe(true);
    }
    second.store.recovered();
    for (let i = 0; i < 30; i++) {
      const bytes = bytesOf(random, 200 + i);
      kept.set(second.store.recordId(second.store.put(bytes)), bytes);
    }
    await drive(scheduler, second.store.sync());
    await runSome(scheduler, random.nextInt(40));
    await crash(disk, second, random);

    // Session 3: the kept ones are all there, byte for byte.
    const third = await openSession(disk, scheduler, seed);
    for (const [id, bytes] of kept) {
      const handle = third.store.adopt(id);
      expect(handle, `seed ${seed}: kept record ${id}`).not.toBeNull();
      expect(same(third.store.read(handle!), bytes), `seed ${seed}: bytes of kept record ${id}`).toBe(true);
    }
    third.store.recovered();
    await drive(scheduler, third.store.idle());
    expect(third.store.stats().liveRecords).toBe(kept.size);
    await drive(scheduler, third.store.close());
  }
});
