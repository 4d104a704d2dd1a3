/**
 * A queue replica keeping its messages' bytes in the node's message store: local snapshots of
 * references (small; restored after a restart through AdoptedBodies), the bytes they list
 * served to a follower on another node, old portable snapshots, fan-out sharing, release on
 * close, and a snapshot referencing another node's store. Real stores on temporary
 * directories. (A follower preparing a snapshot: snapshot-bodies.test.ts.)
 */
import { quorumq } from '@quorumq/proto';
import { decodeSnapshot, DEFAULT_ARGUMENTS, stateHash, type Command, type Effect } from '@quorumq/queue';
import type { Entry } from '@quorumq/raft';
import type { MessageStore } from '@quorumq/storage';
import type { Logger } from 'pino';
import { afterAll, describe, expect, it, vi } from 'vitest';

import { AdoptedBodies } from '../src/adopted-bodies.js';
import { decodeQueueSnapshot, encodeQueueBatch, encodeQueueEntry, type EntryCommand } from '../src/log-format.js';
import { Status } from '../src/errors.js';
import { ENTRY_SPAN, QueueReplica, SNAPSHOT_HELD_SLICE_BYTES, type QueueReplicaOptions } from '../src/queue-replica.js';
import { serveSnapshotBodies, type FetchBodies, type SnapshotSource } from '../src/snapshot-bodies.js';
import { portableOf, TestStores } from './test-message-store.js';

import pb = quorumq.v1;

const stores = new TestStores();
afterAll(() => stores.closeAll());

const GROUP = 'q/1/orders';
const entry = (index: number, data: Uint8Array): Entry => ({ index, term: 1, type: 'normal', data });

/** An encoded message of `bytes` body bytes, distinct per `n`. */
function encoded(n: number, bytes = 1024): Buffer {
  const body = Buffer.alloc(bytes);
  for (let i = 0; i < bytes; i++) body[i] = (n * 131 + i * 7) & 0xff;
  return Buffer.from(pb.Message.encode({ body, routingKey: 'orders', headers: { n: { intValue: n } } }).finish());
}

const enqueue = (n: number, bytes = 1024, key?: string): EntryCommand => ({
  command: { type: 'enqueue', sizeBytes: bytes, exchange: '', routingKeys: ['orders'] },
  message: encoded(n, bytes),
  ...(key === undefined ? {} : { key }),
});
const get: Command = { type: 'get', ackMode: 'auto' };
const source = (index: number): SnapshotSource => ({ groupId: GROUP, from: 'n1', index, pause: () => Promise.resolve() });
const tick: Command = { type: 'tick' };

function replica(store: MessageStore, options: QueueReplicaOptions = {}, effects: Effect[] = []): QueueReplica {
  return new QueueReplica('orders', GROUP, DEFAULT_ARGUMENTS, { onEffects: (_r, e) => effects.push(...e) }, store, options);
}

/** Applies `count` enqueues of `bytes`-byte bodies in batches of 100 from entry `firstIndex`; returns the next index. */
function fill(r: QueueReplica, count: number, bytes = 1024, firstIndex = 1): number {
  let index = firstIndex;
  for (let done = 0; done < count; index++) {
    const batch = Array.from({ length: Math.min(100, count - done) }, (_, i) => enqueue(done + i, bytes));
    const result = r.apply(entry(index, encodeQueueBatch(batch, 1000)), false);
    expect(result.batch?.every((b) => b.reply.type === 'enqueued')).toBe(true);
    done += batch.length;
  }
  return index;
}

/** Every stored message's bytes, by id. */
function bodiesOf(r: QueueReplica): Map<number, Buffer> {
  const out = new Map<number, Buffer>();
  for (const id of r.bodies.keys()) {
    const bytes = r.encoded(id);
    if (bytes === undefined) throw new Error(`message ${id} cannot be read`);
    out.set(id, Buffer.from(bytes));
  }
  return out;
}

function expectSameBodies(actual: Map<number, Buffer>, expected: Map<number, Buffer>): void {
  expect([...actual.keys()]).toEqual([...expected.keys()]);
  for (const [id, bytes] of expected) if (!actual.get(id)?.equals(bytes)) throw new Error(`message ${id}: different bytes`);
}

const silentLogger = (): { logger: Logger; error: ReturnType<typeof vi.fn> } => {
  const error = vi.fn();
  return { logger: { error, warn: vi.fn(), info: vi.fn(), debug: vi.fn() } as unknown as Logger, error };
};

/** What NodeStorage gives AdoptedBodies: one group with one saved snapshot. */
const savedStorage = (data: Uint8Array, index: number, groupId = GROUP) => ({
  groups: () => [groupId],
  savedSnapshot: (id: string) => (id === groupId ? { meta: { index, term: 1, config: { voters: ['n1'], learners: [] } }, data } : null),
});

describe('a queue replica on the message store', () => {
  it('takes a local snapshot of references, a few bytes a message, that restores after the store is closed and reopened', async () => {
    const { store, dir } = await stores.openWith();
    const r = replica(store);
    let index = fill(r, 1000, 1024);
    expect(r.bodies.size).toBe(1000);
    expect(r.bodies.bytes).toBeGreaterThan(1000 * 1024);
    // Held as views of their log entries (under HOLD_BYTES_MAX): the snapshot puts them.
    expect(store.stats().liveRecords).toBe(0);

    const local = r.snapshot();
    expect(store.stats().liveRecords).toBe(1000);
    const decoded = decodeQueueSnapshot(local);
    expect(decoded.refs?.storeId).toBe(store.storeId);
    expect(decoded.refs?.messageIds).toEqual([...r.bodies.keys()]);
    expect(decoded.messages.size).toBe(0);
    // References, not bytes: the machine's own snapshot plus a few bytes a message (1 MiB of bodies).
    expect(local.byteLength).toBeLessThan(20 * 1000);
    expect(local.byteLength - decoded.machine.byteLength).toBeLessThan(5 * 1000);
    expect(await r.snapshotDurable()).toBe(true);
    r.snapshotSaved();
    const hash = stateHash(r.state);
    const bodies = bodiesOf(r);

    // Applied after the snapshot: in no saved snapshot, so gone after the restart (the WAL has it).
    r.apply(entry(index++, encodeQueueEntry(enqueue(5000).command, enqueue(5000).message, 2000)), false);
    expect(store.stats().liveRecords).toBe(1000);
    expect(r.encoded((index - 1) * ENTRY_SPAN)).toBeDefined();
    await store.sync();
    await stores.close(store);

    const reopened = await stores.open({ dir, recovered: false });
    expect(reopened.storeId).toBe(store.storeId);
    const { logger, error } = silentLogger();
    const adopted = AdoptedBodies.collect(reopened, savedStorage(local, index - 2), logger);
    expect(error).not.toHaveBeenCalled();
    expect(reopened.stats().liveRecords).toBe(1000);

    const lost = vi.fn();
    const restored = replica(reopened, { adopted, onLostBodies: lost });
    restored.restore(local);
    expect(lost).not.toHaveBeenCalled();
    expect(stateHash(restored.state)).toBe(hash);
    expectSameBodies(bodiesOf(restored), bodies);
    expect(restored.message(ENTRY_SPAN + 7)?.headers?.n?.intValue).toBe(7);
    // Each record adopted once, for this replica.
    expect(reopened.stats().liveRecords).toBe(1000);
    expect(adopted.take(GROUP)).toBeNull();
    // A restored local snapshot is not replaced at once.
    expect(restored.snapshotDue(1)).toBe(false);
    restored.close();
    expect(reopened.stats().liveRecords).toBe(0);
  });

  it("restores a portable snapshot (saved by a release before the message store) on another node's store, and replaces it soon", async () => {
    const store = await stores.open();
    const other = await stores.open();
    expect(other.storeId).not.toBe(store.storeId);
    const r = replica(store);
    fill(r, 300, 200);
    const local = r.snapshot();
    const portable = portableOf(r, local)!;
    const decoded = decodeQueueSnapshot(portable);
    expect(decoded.refs).toBeNull();
    expect(decoded.messages.size).toBe(300);

    const lost = vi.fn();
    const follower = replica(other, { onLostBodies: lost });
    // Nothing to prepare for the portable form.
    expect(await follower.prepareSnapshot(portable, source(1))).toBe(portable);
    follower.restore(portable);
    expect(lost).not.toHaveBeenCalled();
    expect(stateHash(follower.state)).toBe(stateHash(r.state));
    expectSameBodies(bodiesOf(follower), bodiesOf(r));
    expect(other.stats().liveRecords).toBe(300);
    // Replaced by a local snapshot after the next command, not before.
    expect(follower.snapshotDue(1024)).toBe(false);
    follower.apply(entry(100, encodeQueueEntry(tick, null, 3000)), false);
    expect(follower.snapshotDue(1024)).toBe(true);
    const replacement = decodeQueueSnapshot(follower.snapshot());
    expect(replacement.refs?.storeId).toBe(other.storeId);
    expect(replacement.refs?.messageIds).toEqual([...decoded.messages.keys()]);
  });

  it('serves a follower the bytes of every message its newest snapshot lists, those that left since too, until the next one is saved', async () => {
    const store = await stores.open();
    const r = replica(store);
    let index = fill(r, 20, 100);
    const before = bodiesOf(r);
    const local = decodeQueueSnapshot(r.snapshot());
    const server = { snapshotIndex: 7, bodies: r.bodies };
    const ids = local.refs!.messageIds;
    // Ten leave, then a next snapshot begins (its predecessor is still the newest in the core).
    for (let i = 0; i < 10; i++) expect(r.apply(entry(index++, encodeQueueEntry(get, null, 2000)), true).reply.type).toBe('message');
    r.sweep();
    expect(r.bodies.size).toBe(10);
    const build = r.snapshotSteps();
    for (let i = 0; i < 5; i++) r.apply(entry(index++, encodeQueueEntry(get, null, 2000)), true);
    r.sweep();
    const served = serveSnapshotBodies(server, GROUP, 7, ids, 1 << 20);
    expect(served.length).toBe(20);
    served.forEach((bytes, i) => expect(Buffer.from(bytes!).equals(before.get(ids[i]!)!), `message ${ids[i]}`).toBe(true));
    // An answer stops at its byte limit (one message at least).
    expect(serveSnapshotBodies(server, GROUP, 7, ids, 1).length).toBe(1);
    const size = before.get(ids[0]!)!.byteLength;
    expect(serveSnapshotBodies(server, GROUP, 7, ids, 3 * size).length).toBe(3);
    expect(serveSnapshotBodies(server, GROUP, 7, ids, 3 * size + size - 1).length).toBe(3);
    // Another snapshot than the newest is refused: what it lists may be gone.
    expect(() => serveSnapshotBodies(server, GROUP, 6, ids, 1 << 20)).toThrow(expect.objectContaining({ code: Status.FAILED_PRECONDITION }));
    while (build.step(1 << 20) === null);
    expect(await r.snapshotDurable()).toBe(true);
    r.snapshotSaved();
    // Saved: what only the older snapshot listed is gone; the newer one lists the other ten
    // (five of them left while it was built: kept until the one after it is saved).
    expect(store.stats().liveRecords).toBe(10);
  });

  it('takes a snapshot a step at a time that holds the queue of its start, while messages leave and arrive between the steps', async () => {
    const store = await stores.open();
    const r = replica(store);
    let index = fill(r, 3000, 200);
    // Some held as views of their entries, some in the store: both kinds are listed.
    r.snapshot();
    expect(await r.snapshotDurable()).toBe(true);
    r.snapshotSaved();
    index = fill(r, 500, 200, index);
    const hash = stateHash(r.state);
    const before = bodiesOf(r);

    const build = r.snapshotSteps();
    let data: Uint8Array | null = null;
    let steps = 0;
    while (data === null) {
      // Between steps the queue goes on: its head is consumed, new messages arrive, and
      // what left is swept from the replica's index.
      for (let i = 0; i < 20 && r.state.messages.size > 0; i++) expect(r.apply(entry(index++, encodeQueueEntry(get, null, 2000)), true).reply.type).toBe('message');
      index = fill(r, 5, 200, index);
      r.sweep();
      data = build.step(64);
      steps++;
    }
    expect(steps).toBeGreaterThan(20);
    expect(r.state.messages.has([...before.keys()][0]!)).toBe(false);
    expect(decodeQueueSnapshot(data).refs?.messageIds).toEqual([...before.keys()]);
    // Everything it lists is still readable (pinned): its portable form restores that queue elsewhere.
    const elsewhere = replica(await stores.open());
    elsewhere.restore(portableOf(r, data)!);
    expect(stateHash(elsewhere.state)).toBe(hash);
    expectSameBodies(bodiesOf(elsewhere), before);
    expect(await r.snapshotDurable()).toBe(true);
    r.snapshotSaved();
    // The next snapshot saved lets go of what left meanwhile.
    r.snapshot();
    expect(await r.snapshotDurable()).toBe(true);
    r.snapshotSaved();
    expect(store.stats().liveRecords).toBe(r.state.messages.size);
  });

  it('a second snapshot taken in steps reuses the first one\'s memory and lists its own start', async () => {
    const store = await stores.open();
    const r = replica(store);
    let index = fill(r, 2000, 100);
    for (const [grow, take] of [[0, 300], [1500, 10], [20, 1200]] as const) {
      index = fill(r, grow, 100, index);
      for (let i = 0; i < take; i++) r.apply(entry(index++, encodeQueueEntry(get, null, 2000)), true);
      r.sweep();
      const hash = stateHash(r.state);
      const ids = [...r.bodies.keys()];
      const build = r.snapshotSteps();
      let data: Uint8Array | null = null;
      while (data === null) {
        for (let i = 0; i < 5 && r.state.messages.size > 0; i++) r.apply(entry(index++, encodeQueueEntry(get, null, 2000)), true);
        index = fill(r, 3, 100, index);
        r.sweep();
        data = build.step(128);
      }
      const decoded = decodeQueueSnapshot(data);
      expect(decoded.refs?.messageIds).toEqual(ids);
      expect(stateHash(decodeSnapshot(decoded.machine))).toBe(hash);
      expect(await r.snapshotDurable()).toBe(true);
      r.snapshotSaved();
    }
  });

  it('lists in a snapshot only the messages the queue still holds', async () => {
    const store = await stores.open();
    const effects: Effect[] = [];
    const r = replica(store, {}, effects);
    let index = fill(r, 5, 10);
    r.apply(entry(index++, encodeQueueEntry({ type: 'subscribe', consumerId: 'c', prefetch: 10 }, null, 2000)), true);
    // Ack the third message only: it leaves from the middle of the queue.
    const third = ENTRY_SPAN + 2;
    const delivered = effects.find((e) => e.type === 'deliver' && e.messageId === third);
    if (delivered?.type !== 'deliver') throw new Error('the third message was not delivered');
    expect(r.apply(entry(index++, encodeQueueEntry({ type: 'ack', consumerId: 'c', deliveryTag: delivered.deliveryTag }, null, 2000)), true).reply.type).toBe('ok');
    expect(r.state.messages.has(third)).toBe(false);
    expect(r.state.messages.size).toBe(4);
    const refs = decodeQueueSnapshot(r.snapshot()).refs!;
    expect(refs.messageIds).toEqual(r.state.messages.keys().sort((a, b) => a - b));
    expect(refs.messageIds).not.toContain(third);
  });

  it('shares one record between the replicas a fan-out reaches on the node, each releasing its reference', async () => {
    const store = await stores.open();
    const a = replica(store);
    const b = new QueueReplica('audit', 'q/1/audit', DEFAULT_ARGUMENTS, { onEffects: () => {} }, store);
    const key = 'n1/4f6c0b36-8a53-4e0c-9f0c-2d3b8d1c8e11';
    const message = enqueue(42, 512, key);
    const data = encodeQueueEntry(message.command, message.message, 1000, key);
    a.apply(entry(1, data), false);
    b.apply(entry(7, Buffer.from(data)), false); // its own log: another index, a copy of the bytes
    expect(store.stats().liveRecords).toBe(1);
    // The same message in a batch entry of a third replica, with the same key.
    const c = new QueueReplica('mirror', 'q/1/mirror', DEFAULT_ARGUMENTS, { onEffects: () => {} }, store);
    c.apply(entry(3, encodeQueueBatch([enqueue(1, 64), message], 1000)), false);
    expect(store.stats().liveRecords).toBe(1); // the first element has no key: held, not stored yet
    expect(c.encoded(3 * ENTRY_SPAN)?.byteLength).toBeGreaterThan(64);
    c.close();
    expect(store.stats().liveRecords).toBe(1);

    // Acked on a: still readable on b.
    expect(a.apply(entry(2, encodeQueueEntry(get, null, 2000)), true).stored?.headers?.n?.intValue).toBe(42);
    a.sweep();
    expect(a.bodies.size).toBe(0);
    expect(b.message(7 * ENTRY_SPAN)?.headers?.n?.intValue).toBe(42);
    expect(Buffer.from(b.encoded(7 * ENTRY_SPAN)!).equals(message.message as Buffer)).toBe(true);
    expect(store.stats().liveRecords).toBe(1);
    b.apply(entry(8, encodeQueueEntry(get, null, 2000)), true);
    b.sweep();
    expect(store.stats().liveRecords).toBe(0);

    // Without a key, each replica has its own record.
    const unkeyed = encodeQueueEntry(message.command, message.message, 1000);
    a.apply(entry(3, unkeyed), false);
    b.apply(entry(9, unkeyed), false);
    expect(store.stats().liveRecords).toBe(0); // held until a snapshot (or a few MiB)
    a.snapshot();
    b.snapshot();
    expect(store.stats().liveRecords).toBe(2);
  });

  it('snapshots at once when drained while records stay pinned, so a quiet empty queue keeps none', async () => {
    const store = await stores.open();
    const r = replica(store);
    let index = fill(r, 50, 64);
    r.snapshot();
    r.snapshotSaved();
    for (let i = 0; i < 49; i++) r.apply(entry(index++, encodeQueueEntry(get, null, 2000)), true);
    r.sweep();
    // Far below SNAPSHOT_PINNED_BYTES_MIN and the interval: not due while one is queued.
    expect(r.snapshotDue(1024)).toBe(false);
    r.apply(entry(index++, encodeQueueEntry(get, null, 2000)), true);
    r.sweep();
    expect(r.bodies.size).toBe(0);
    expect(store.stats().liveRecords).toBe(50); // pinned by the saved snapshot
    expect(r.snapshotDue(1024)).toBe(true);
    expect(decodeQueueSnapshot(r.snapshot()).refs?.messageIds).toEqual([]);
    r.snapshotSaved();
    expect(store.stats().liveRecords).toBe(0);
    expect(r.snapshotDue(1024)).toBe(false);
  });

  it('a regular snapshot that is due first puts the held messages into the store a slice per check, then begins', async () => {
    const store = await stores.open();
    const r = replica(store, { snapshotLogBytesMin: 2 * 1024 * 1024 });
    // 3,000 x 1 KiB: due (over the interval and snapshotLogBytesMin), all held (under 4 MiB).
    fill(r, 3000, 1024);
    expect(store.stats().liveRecords).toBe(0);
    const held = r.bodies.heldBytes;
    expect(held).toBeGreaterThan(2 * SNAPSHOT_HELD_SLICE_BYTES);
    const checks: number[] = [];
    while (!r.snapshotDue(1024)) {
      checks.push(store.stats().liveRecords);
      expect(checks.length).toBeLessThan(20);
    }
    // Each check put about a slice (512 x 1 KiB messages, a little less with their headers).
    expect(checks.length).toBe(Math.ceil((held - SNAPSHOT_HELD_SLICE_BYTES) / SNAPSHOT_HELD_SLICE_BYTES));
    for (let i = 1; i < checks.length; i++) expect(checks[i]! - checks[i - 1]!).toBeGreaterThan(400);
    expect(r.bodies.heldBytes).toBeLessThanOrEqual(SNAPSHOT_HELD_SLICE_BYTES);
    expect(r.bodies.heldBytes).toBeGreaterThan(0);
    const taken = decodeQueueSnapshot(r.snapshot());
    expect(taken.refs?.messageIds.length).toBe(3000);
    expect(store.stats().liveRecords).toBe(3000);
    expect(r.bodies.heldBytes).toBe(0);
  });

  it('an idle replica with a long log since its snapshot asks for one; a busy one, or one whose log must stay, does not', async () => {
    const store = await stores.open();
    const r = replica(store, { snapshotLogBytesMin: 4 * 1024 * 1024 });
    // 5,000 x 1 KiB: over snapshotLogBytesMin of log, under the regular rule's bytes (64 B per message) and interval.
    let index = fill(r, 5000, 1024);
    expect(r.snapshotDue(Number.MAX_SAFE_INTEGER)).toBe(false);
    expect(r.idleCheck(() => true)).toBe(false); // it applied since the last check
    expect(r.snapshotDue(Number.MAX_SAFE_INTEGER)).toBe(false);
    expect(r.idleCheck(() => false)).toBe(true); // idle, but a member still needs the entries
    expect(r.snapshotDue(Number.MAX_SAFE_INTEGER)).toBe(false);
    expect(r.idleSnapshotPending).toBe(false);
    expect(r.idleCheck(() => true)).toBe(true);
    expect(r.idleSnapshotPending).toBe(true);
    expect(r.snapshotDue(Number.MAX_SAFE_INTEGER)).toBe(true);
    const taken = decodeQueueSnapshot(r.snapshot());
    expect(r.idleSnapshotPending).toBe(false);
    expect(taken.refs?.messageIds.length).toBe(5000);
    expect(r.snapshotDue(Number.MAX_SAFE_INTEGER)).toBe(false);
    // A short log since the snapshot is not worth one.
    index = fill(r, 100, 1024, index);
    expect(r.idleCheck(() => true)).toBe(false);
    expect(r.idleCheck(() => true)).toBe(true);
    expect(r.snapshotDue(Number.MAX_SAFE_INTEGER)).toBe(false);
  });

  it('releases its records on close(), pinned ones included', async () => {
    const store = await stores.open();
    const r = replica(store);
    let index = fill(r, 50, 64);
    r.snapshot();
    for (let i = 0; i < 20; i++) r.apply(entry(index++, encodeQueueEntry(get, null, 2000)), true);
    r.sweep();
    expect(r.bodies.size).toBe(30);
    expect(store.stats().liveRecords).toBe(50); // 20 pinned by the snapshot
    r.close();
    expect(store.stats().liveRecords).toBe(0);
    expect(store.stats().liveBytes).toBe(0);
    expect(r.bodies.size).toBe(0);
    expect(r.bodies.bytes).toBe(0);
  });

  it("restores the machine from a local snapshot of another node's store, and reports the bodies it lacks", async () => {
    const theirs = await stores.open();
    const ours = await stores.openWith({ recovered: false });
    const r = replica(theirs);
    fill(r, 25, 32);
    const local = r.snapshot();
    expect(decodeQueueSnapshot(local).refs?.storeId).toBe(theirs.storeId);

    // At the start, the node does not adopt what a foreign snapshot lists: it logs it.
    const { logger, error } = silentLogger();
    const adopted = AdoptedBodies.collect(ours.store, savedStorage(local, 1), logger);
    expect(error).toHaveBeenCalledTimes(1);
    expect(ours.store.stats().liveRecords).toBe(0);

    const lost = vi.fn();
    const restored = replica(ours.store, { adopted, onLostBodies: lost });
    expect(() => restored.restore(local)).not.toThrow();
    expect(stateHash(restored.state)).toBe(stateHash(r.state));
    expect(lost).toHaveBeenCalledTimes(1);
    expect(lost).toHaveBeenCalledWith(restored, 25);
    expect(restored.bodies.size).toBe(0);
    expect(restored.encoded(ENTRY_SPAN)).toBeUndefined();
    expect(restored.message(ENTRY_SPAN)).toBeUndefined();
    // It keeps applying: a get hands the message out without its bytes.
    const got = restored.apply(entry(10, encodeQueueEntry(get, null, 2000)), true);
    expect(got.reply.type).toBe('message');
    expect(got.stored).toBeUndefined();
  });
});

describe('a follower preparing a snapshot the leader sent (snapshot-bodies.ts)', () => {
  /** A fetch served by `leader`'s replica (its newest snapshot at `index`), `bytesMax` a call; lists the ids it answered. */
  function fetchFrom(leader: QueueReplica, index: () => number, bytesMax = 16 * 1024) {
    const asked: number[] = [];
    let failAfter = Infinity;
    const fetchBodies: FetchBodies = (_peer, groupId, snapshotIndex, ids) => {
      if (failAfter-- <= 0) return Promise.reject(new Error('the connection broke'));
      const served = serveSnapshotBodies({ snapshotIndex: index(), bodies: leader.bodies }, groupId, snapshotIndex, ids, bytesMax);
      asked.push(...ids.slice(0, served.length));
      return Promise.resolve(served);
    };
    return { fetchBodies, asked, failAfter: (calls: number) => (failAfter = calls) };
  }

  it("fetches every listed message into its own store and installs the snapshot with references into it", async () => {
    const leaderStore = await stores.open();
    const followerStore = await stores.open();
    const leader = replica(leaderStore);
    fill(leader, 500, 200);
    const local = leader.snapshot();
    const fetch = fetchFrom(leader, () => 9);
    const lost = vi.fn();
    const follower = replica(followerStore, { fetchBodies: fetch.fetchBodies, onLostBodies: lost });
    const prepared = await follower.prepareSnapshot(local, source(9));
    const decoded = decodeQueueSnapshot(prepared);
    expect(decoded.refs?.storeId).toBe(followerStore.storeId);
    expect(decoded.refs?.messageIds).toEqual(decodeQueueSnapshot(local).refs?.messageIds);
    // A batch at a time (16 KiB a call here), each message asked for once.
    expect(new Set(fetch.asked).size).toBe(500);
    expect(fetch.asked.length).toBe(500);
    expect(followerStore.stats().liveRecords).toBe(500);
    follower.restore(prepared);
    expect(lost).not.toHaveBeenCalled();
    expect(follower.incomingRecords).toBe(0);
    expect(stateHash(follower.state)).toBe(stateHash(leader.state));
    expectSameBodies(bodiesOf(follower), bodiesOf(leader));
    expect(followerStore.stats().liveRecords).toBe(500);
    // Installed in the local form already: nothing to replace soon.
    follower.apply(entry(100, encodeQueueEntry(tick, null, 3000)), false);
    expect(follower.snapshotDue(1024)).toBe(false);
    follower.close();
    expect(followerStore.stats().liveRecords).toBe(0);
  });

  it('keeps what it fetched when a fetch fails, and the next attempt (a newer snapshot) fetches only the rest', async () => {
    const leaderStore = await stores.open();
    const followerStore = await stores.open();
    const leader = replica(leaderStore);
    let index = fill(leader, 400, 200);
    const first = leader.snapshot();
    let newest = 9;
    const fetch = fetchFrom(leader, () => newest);
    fetch.failAfter(3);
    const follower = replica(followerStore, { fetchBodies: fetch.fetchBodies });
    await expect(follower.prepareSnapshot(first, source(9))).rejects.toThrow('the connection broke');
    const kept = follower.incomingRecords;
    expect(kept).toBeGreaterThan(0);
    expect(kept).toBe(fetch.asked.length);
    expect(followerStore.stats().liveRecords).toBe(kept);

    // The leader goes on: 100 consumed, 50 more, then a newer snapshot is its newest.
    for (let i = 0; i < 100; i++) leader.apply(entry(index++, encodeQueueEntry(get, null, 2000)), true);
    index = fill(leader, 50, 200, index);
    leader.sweep();
    const second = leader.snapshot();
    newest = 12;
    fetch.failAfter(Infinity);
    await expect(follower.prepareSnapshot(second, source(9))).rejects.toMatchObject({ code: Status.FAILED_PRECONDITION });
    const before = fetch.asked.length;
    const prepared = await follower.prepareSnapshot(second, source(12));
    const listed = decodeQueueSnapshot(second).refs!.messageIds;
    const keptListed = fetch.asked.slice(0, kept).filter((id) => listed.includes(id)).length;
    expect(fetch.asked.length - before).toBe(listed.length - keptListed);
    follower.restore(prepared);
    expectSameBodies(bodiesOf(follower), bodiesOf(leader));
    // What the first attempt fetched and the newer snapshot no longer lists was let go.
    expect(followerStore.stats().liveRecords).toBe(listed.length);
  });

  it('shares the records its own replica has, and fetches only the messages it lacks', async () => {
    const leaderStore = await stores.open();
    const followerStore = await stores.open();
    const leader = replica(leaderStore);
    let index = fill(leader, 300, 200);
    const fetch = fetchFrom(leader, () => 9);
    const follower = replica(followerStore, { fetchBodies: fetch.fetchBodies });
    follower.restore(await follower.prepareSnapshot(leader.snapshot(), source(9)));
    // The follower is cut off while 50 are consumed and 120 more arrive.
    for (let i = 0; i < 50; i++) leader.apply(entry(index++, encodeQueueEntry(get, null, 2000)), true);
    index = fill(leader, 120, 200, index);
    leader.sweep();
    fetch.asked.length = 0;
    const prepared = await follower.prepareSnapshot(leader.snapshot(), source(9));
    expect(fetch.asked.length).toBe(120);
    follower.restore(prepared);
    expectSameBodies(bodiesOf(follower), bodiesOf(leader));
    expect(followerStore.stats().liveRecords).toBe(370);
  });

  it('reports the messages the sender has no bytes for, and installs the rest', async () => {
    const leaderStore = await stores.open();
    const followerStore = await stores.open();
    const leader = replica(leaderStore);
    fill(leader, 30, 100);
    const local = leader.snapshot();
    const ids = decodeQueueSnapshot(local).refs!.messageIds;
    const gone = new Set([ids[3]!, ids[17]!]);
    const fetchBodies: FetchBodies = (_peer, groupId, snapshotIndex, asked) =>
      Promise.resolve(serveSnapshotBodies({ snapshotIndex: 9, bodies: { read: (id) => (gone.has(id) ? undefined : leader.bodies.read(id)) } }, groupId, snapshotIndex, asked, 1 << 20));
    const lost = vi.fn();
    const follower = replica(followerStore, { fetchBodies, onLostBodies: lost });
    follower.restore(await follower.prepareSnapshot(local, source(9)));
    expect(lost).toHaveBeenCalledWith(follower, 2);
    expect(follower.state.messages.size).toBe(30);
    expect(follower.bodies.size).toBe(28);
    expect(followerStore.stats().liveRecords).toBe(28);
  });

  it('refuses a snapshot that does not decode, holding nothing', async () => {
    const followerStore = await stores.open();
    const follower = replica(followerStore, { fetchBodies: () => Promise.reject(new Error('not called')) });
    await expect(follower.prepareSnapshot(new Uint8Array([0x0a, 0xff, 0xff, 0x01]), source(9))).rejects.toThrow();
    expect(follower.incomingRecords).toBe(0);
    expect(followerStore.stats().liveRecords).toBe(0);
  });

  it('a replica closed with records held for a snapshot releases them', async () => {
    const leaderStore = await stores.open();
    const followerStore = await stores.open();
    const leader = replica(leaderStore);
    fill(leader, 100, 200);
    const fetch = fetchFrom(leader, () => 9, 2048);
    fetch.failAfter(2);
    const follower = replica(followerStore, { fetchBodies: fetch.fetchBodies });
    await expect(follower.prepareSnapshot(leader.snapshot(), source(9))).rejects.toThrow();
    expect(followerStore.stats().liveRecords).toBeGreaterThan(0);
    follower.close();
    expect(followerStore.stats().liveRecords).toBe(0);
  });
});
