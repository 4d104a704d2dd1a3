import { quorumq } from '@quorumq/proto';
import { DEFAULT_ARGUMENTS, stateHash, type Command, type Effect } from '@quorumq/queue';
import type { Entry } from '@quorumq/raft';
import { describe, expect, it } from 'vitest';

import { ENTRY_SPAN, QueueReplica } from '../src/queue-replica.js';
import { encodeQueueBatch, encodeQueueEntry, type EntryCommand } from '../src/log-format.js';

import pb = quorumq.v1;

const enqueue = (n: number): EntryCommand => ({
  command: { type: 'enqueue', sizeBytes: 4, exchange: '', routingKeys: ['q'] },
  message: Buffer.from(pb.Message.encode({ body: Buffer.from(`m-${n}`), routingKey: 'q' }).finish()),
});

function replica(effects: Effect[] = []): QueueReplica {
  return new QueueReplica('q', 'queue/q', DEFAULT_ARGUMENTS, { onEffects: (_r, e) => effects.push(...e) });
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
    // And a snapshot restores it.
    const restored = replica();
    restored.restore(leader.snapshot());
    expect(stateHash(restored.state)).toBe(stateHash(leader.state));
    expect(restored.message(9 * ENTRY_SPAN + 3)?.body?.toString()).toBe('m-3');
  });

  it('is due for a snapshot once the log grew by snapshotInterval commands and twice the live bytes', () => {
    const r = replica();
    r.apply(entry(1, encodeQueueBatch([kilobyte(1), kilobyte(2), kilobyte(3)], 0)), false);
    // The log grew by about the live bytes once: not yet, however few commands are asked for.
    expect(r.snapshotDue(1)).toBe(false);
    r.apply(entry(2, encodeQueueEntry(kilobyte(4).command, kilobyte(4).message, 0)), false);
    expect(r.snapshotDue(1)).toBe(false);
    // Purging empties the queue: nothing live, so the log has grown by more than twice that.
    r.apply(entry(3, encodeQueueBatch(Array.from({ length: 10 }, () => ({ command: { type: 'purge' } as Command, message: null })), 0)), false);
    r.sweep();
    expect(r.bodyBytes).toBe(0);
    expect(r.snapshotDue(14)).toBe(true);
    expect(r.snapshotDue(15)).toBe(false);
    const snapshot = r.snapshot();
    expect(r.snapshotDue(1)).toBe(false);
    // Small commands (acks, purges) grow the log little: a queue being drained is not snapshotted over and over.
    r.apply(entry(4, encodeQueueBatch([kilobyte(5), kilobyte(6)], 0)), false);
    r.apply(entry(5, encodeQueueBatch(Array.from({ length: 20 }, () => ({ command: { type: 'credit', consumerId: 'c', prefetch: 1 } as Command, message: null })), 0)), false);
    expect(r.snapshotDue(1)).toBe(false);
    r.restore(snapshot);
    expect(r.snapshotDue(1)).toBe(false);
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
