import { quorumq } from '@quorumq/proto';
import { DEFAULT_ARGUMENTS, stateHash, type Command, type Effect } from '@quorumq/queue';
import type { Entry } from '@quorumq/raft';
import { afterAll, describe, expect, it } from 'vitest';

import { ENTRY_SPAN, QueueReplica, SNAPSHOT_LOG_BYTES_PER_MESSAGE, type QueueReplicaOptions } from '../src/queue-replica.js';
import { encodeQueueBatch, encodeQueueEntry, type EntryCommand } from '../src/log-format.js';
import { portableOf, TestStores } from './test-message-store.js';

import pb = quorumq.v1;

const stores = new TestStores();
const store = await stores.open();
afterAll(() => stores.closeAll());

const enqueue = (n: number): EntryCommand => ({
  command: { type: 'enqueue', sizeBytes: 4, exchange: '', routingKeys: ['q'] },
  message: Buffer.from(pb.Message.encode({ body: Buffer.from(`m-${n}`), routingKey: 'q' }).finish()),
});

function replica(effects: Effect[] = [], options: QueueReplicaOptions = {}): QueueReplica {
  return new QueueReplica('q', 'queue/q', DEFAULT_ARGUMENTS, { onEffects: (_r, e) => effects.push(...e) }, store, options);
}

const entry = (index: number, data: Uint8Array): Entry => ({ index, term: 1, type: 'normal', data });

/** An enqueue of a 1 KB body: its command's JSON is small beside it. */
const kilobyte = (n: number): EntryCommand => ({
  command: { type: 'enqueue', sizeBytes: 1024, exchange: '', routingKeys: ['q'] },
  message: Buffer.from(pb.Message.encode({ body: Buffer.alloc(1024, n), routingKey: 'q' }).finish()),
});

describe('a queue replica applying batch entries', () => {
  it('applies each command at its own position; ids grow with the log', () => {
    const r = replica();
    const result = r.apply(entry(5, encodeQueueBatch([enqueue(1), enqueue(2), enqueue(3)], 1000)), true);
    expect(result.reply.type).toBe('ok');
    expect(result.batch?.map((b) => b.reply)).toEqual([0, 1, 2].map((i) => ({ type: 'enqueued', messageId: 5 * ENTRY_SPAN + i })));
    const alone = r.apply(entry(6, encodeQueueEntry(enqueue(4).command, enqueue(4).message, 1001)), true);
    expect(alone.reply).toEqual({ type: 'enqueued', messageId: 6 * ENTRY_SPAN });
    expect(alone.batch).toBeUndefined();
    expect([...r.bodies.keys()]).toEqual([5 * ENTRY_SPAN, 5 * ENTRY_SPAN + 1, 5 * ENTRY_SPAN + 2, 6 * ENTRY_SPAN]);
    expect(r.message(5 * ENTRY_SPAN + 2)?.body?.toString()).toBe('m-3');
  });

  it('ends in the same state as a replica applying the same commands from a copy of the entry (a follower)', () => {
    const commands: EntryCommand[] = [enqueue(1), enqueue(2), { command: { type: 'purge' } as Command, message: null }, enqueue(3)];
    const leader = replica();
    const follower = replica();
    const data = encodeQueueBatch(commands, 2000);
    leader.apply(entry(9, data), true);
    follower.apply(entry(9, Buffer.from(data)), false);
    expect(stateHash(follower.state)).toBe(stateHash(leader.state));
    expect([...follower.bodies.keys()]).toEqual([...leader.bodies.keys()]);
    // And a snapshot restores it (in the form a follower is sent).
    const restored = replica();
    restored.restore(portableOf(leader, leader.snapshot())!);
    expect(stateHash(restored.state)).toBe(stateHash(leader.state));
    expect(restored.message(9 * ENTRY_SPAN + 3)?.body?.toString()).toBe('m-3');
  });

  /** Applies `data` at `index` (as a follower) and returns its size: how much the log grew. */
  const logged = (r: QueueReplica, index: number, data: Uint8Array): number => {
    r.apply(entry(index, data), false);
    return data.byteLength;
  };
  const tick = (now = 0): Uint8Array => encodeQueueEntry({ type: 'tick' }, null, now);
  const get = (): Uint8Array => encodeQueueEntry({ type: 'get', ackMode: 'auto' }, null, 0);

  it(`is due for a snapshot once the log grew by snapshotInterval commands and ${SNAPSHOT_LOG_BYTES_PER_MESSAGE} bytes per live message`, () => {
    const r = replica();
    let index = 1;
    // 100 small messages: the log grew by far less than SNAPSHOT_LOG_BYTES_PER_MESSAGE bytes per live message.
    let bytes = logged(r, index++, encodeQueueBatch(Array.from({ length: 100 }, (_, i) => enqueue(i)), 0));
    let commands = 100;
    expect(r.state.messages.size).toBe(100);
    const needed = SNAPSHOT_LOG_BYTES_PER_MESSAGE * 100;
    expect(bytes).toBeLessThan(needed);
    // Not yet, however few commands are asked for.
    expect(r.snapshotDue(1)).toBe(false);
    // Small commands that leave the messages live: due exactly once the log grew by `needed` bytes.
    let flipped = false;
    while (!flipped) {
      const before = bytes;
      bytes += logged(r, index++, tick());
      commands += 1;
      flipped = r.snapshotDue(1);
      if (flipped) expect(before).toBeLessThan(needed);
      expect(flipped, `after ${bytes} bytes of log`).toBe(bytes >= needed);
    }
    // ... and by snapshotInterval commands (the 100 in the batch count one each).
    expect(r.snapshotDue(commands)).toBe(true);
    expect(r.snapshotDue(commands + 1)).toBe(false);

    const snapshot = r.snapshot();
    const atSnapshot = stateHash(r.state);
    expect(r.snapshotDue(1)).toBe(false);
    // A queue being drained (small commands, many messages still live) is not snapshotted over and over.
    let drained = 0;
    for (let i = 0; i < 50; i++) drained += logged(r, index++, get());
    expect(r.state.messages.size).toBe(50);
    expect(drained).toBeLessThan(SNAPSHOT_LOG_BYTES_PER_MESSAGE * 50);
    expect(r.snapshotDue(1)).toBe(false);
    // Purging empties the queue. The messages the snapshot listed stay pinned for it: due at
    // once, however many commands are asked for (a drained queue lets its records go) ...
    logged(r, index++, encodeQueueEntry({ type: 'purge' }, null, 0));
    r.sweep();
    expect(r.bodies.bytes).toBe(0);
    expect(r.bodies.size).toBe(0);
    expect(r.bodies.pinnedBytes).toBeGreaterThan(0);
    expect(r.snapshotDue(1_000_000)).toBe(true);
    r.snapshot();
    r.snapshotSaved();
    // ... and with nothing live or pinned, the commands alone decide.
    logged(r, index++, tick());
    logged(r, index++, tick());
    expect(r.snapshotDue(2)).toBe(true);
    expect(r.snapshotDue(3)).toBe(false);

    // A restored local snapshot starts the count again.
    r.restore(snapshot);
    expect(stateHash(r.state)).toBe(atSnapshot);
    expect(r.snapshotDue(1)).toBe(false);
  });

  it('waits for snapshotLogBytesMin bytes of log even when few messages are live', () => {
    const min = 4000;
    const r = replica([], { snapshotLogBytesMin: min });
    let index = 1;
    let bytes = logged(r, index++, encodeQueueBatch([kilobyte(1), kilobyte(2)], 0));
    expect(bytes).toBeGreaterThanOrEqual(SNAPSHOT_LOG_BYTES_PER_MESSAGE * 2); // what the live messages alone ask for
    expect(bytes).toBeLessThan(min);
    expect(r.snapshotDue(1)).toBe(false);
    let seenNotDue = 0;
    while (!r.snapshotDue(1)) {
      seenNotDue++;
      expect(bytes).toBeLessThan(min);
      bytes += logged(r, index++, tick());
    }
    expect(seenNotDue).toBeGreaterThan(1);
    expect(bytes).toBeGreaterThanOrEqual(min);
    expect(bytes - tick().byteLength).toBeLessThan(min);
    // Without the option the same replica would have been due at once.
    const plain = replica();
    logged(plain, 1, encodeQueueBatch([kilobyte(1), kilobyte(2)], 0));
    expect(plain.snapshotDue(1)).toBe(true);
  });

  it('is due as soon as one command was applied after restoring a portable snapshot (to replace it by a local one)', () => {
    const leader = replica();
    leader.apply(entry(1, encodeQueueBatch(Array.from({ length: 10 }, (_, i) => kilobyte(i)), 0)), true);
    const portable = portableOf(leader, leader.snapshot())!;
    const follower = replica();
    follower.restore(portable);
    expect(stateHash(follower.state)).toBe(stateHash(leader.state));
    expect(follower.snapshotDue(1)).toBe(false);
    follower.apply(entry(2, tick()), false);
    // One small command, far below the interval and the bytes per live message.
    expect(follower.snapshotDue(1_000_000)).toBe(true);
    follower.snapshot();
    follower.apply(entry(3, tick()), false);
    expect(follower.snapshotDue(1)).toBe(false);
  });

  it('replies with an error to a malformed entry and keeps its state', () => {
    const r = replica();
    r.apply(entry(1, encodeQueueEntry(enqueue(1).command, enqueue(1).message, 0)), true);
    const before = stateHash(r.state);
    const bad = Buffer.from(encodeQueueBatch([enqueue(2), enqueue(3)], 0));
    const reply = r.apply(entry(2, bad.subarray(0, bad.length - 3)), true).reply;
    expect(reply).toMatchObject({ type: 'error', code: 'INVALID_ARGUMENT' });
    const tooMany = r.apply(entry(3, encodeQueueBatch(Array.from({ length: ENTRY_SPAN + 1 }, () => ({ command: { type: 'purge' } as Command, message: null })), 0)), true);
    expect(tooMany.reply).toMatchObject({ type: 'error', message: expect.stringMatching(/at most 4096/) });
    expect(stateHash(r.state)).toBe(before);
  });
});
