import type { Command } from '@quorumq/queue';
import { describe, expect, it } from 'vitest';

import { BATCH_BYTES_MAX, EntryBatcher } from '../src/entry-batcher.js';
import { BrokerError, Status } from '../src/errors.js';
import type { QueueApplyResult } from '../src/queue-replica.js';
import { decodeQueueEntry } from '../src/log-format.js';

const enqueue = (n: number): Command => ({ type: 'enqueue', sizeBytes: n, exchange: '', routingKeys: ['q'] });

/** A proposer that records proposals and answers each with `answer`. */
function fakeGroup(answer: (data: Uint8Array) => Promise<QueueApplyResult>) {
  const proposed: Uint8Array[] = [];
  const group = (data: Uint8Array): Promise<QueueApplyResult> => {
    proposed.push(data);
    return answer(data);
  };
  return { group, proposed };
}

/** Replies as a replica would: one result per command, in order. */
function applied(data: Uint8Array): Promise<QueueApplyResult> {
  const decoded = decodeQueueEntry(data);
  const results = decoded.commands.map((c, i) => ({ reply: { type: 'enqueued' as const, messageId: (c.command as { sizeBytes: number }).sizeBytes * 10 + i } }));
  return Promise.resolve(decoded.batch ? { reply: { type: 'ok' }, batch: results } : results[0]!);
}

const notLeader = new BrokerError(Status.UNAVAILABLE, 'NOT_LEADER', 'this node does not lead queue/q');
const unknown = new BrokerError(Status.UNAVAILABLE, 'OUTCOME_UNKNOWN', 'did not commit in time');

function batcher(propose: (data: Uint8Array) => Promise<QueueApplyResult>, fallback: (data: Uint8Array) => Promise<QueueApplyResult> = applied) {
  return new EntryBatcher({ now: () => Date.now(), propose, retriable: (e) => e instanceof BrokerError && e.reason === 'NOT_LEADER', fallback });
}

describe('the entry batcher', () => {
  it('proposes what one turn added as one entry, and hands each command its own result', async () => {
    const { group, proposed } = fakeGroup(applied);
    const b = batcher(group);
    const results = await Promise.all([1, 2, 3].map((n) => b.add(enqueue(n), Buffer.from([n]))));
    expect(proposed).toHaveLength(1);
    const decoded = decodeQueueEntry(proposed[0]!);
    expect(decoded.batch).toBe(true);
    expect(decoded.commands.map((c) => c.command)).toEqual([enqueue(1), enqueue(2), enqueue(3)]);
    expect(results.map((r) => r.reply)).toEqual([10, 21, 32].map((messageId) => ({ type: 'enqueued', messageId })));
  });

  it('proposes a command alone in its turn as a plain entry, and the next turn as another entry', async () => {
    const { group, proposed } = fakeGroup(applied);
    const b = batcher(group);
    expect((await b.add(enqueue(4), null)).reply).toEqual({ type: 'enqueued', messageId: 40 });
    await Promise.all([b.add(enqueue(5), null), b.add(enqueue(6), null)]);
    expect(proposed.map((p) => decodeQueueEntry(p).batch)).toEqual([false, true]);
  });

  it('starts a new entry when the messages reach the byte limit', async () => {
    const { group, proposed } = fakeGroup(applied);
    const b = batcher(group);
    const half = Buffer.alloc(BATCH_BYTES_MAX / 2 + 1);
    await Promise.all([b.add(enqueue(1), half), b.add(enqueue(2), half), b.add(enqueue(3), Buffer.alloc(10))]);
    expect(proposed.map((p) => decodeQueueEntry(p).commands.length)).toEqual([1, 2]);
  });

  it('after a retriable failure, retries each command that may be retried on its own, and fails the others', async () => {
    const { group } = fakeGroup(() => Promise.reject(notLeader));
    const retried: Uint8Array[] = [];
    const b = batcher(group, (data) => {
      retried.push(data);
      return applied(data);
    });
    const [a, settle, c] = await Promise.allSettled([b.add(enqueue(1), null), b.add({ type: 'ack', consumerId: 'c', deliveryTag: 1, multiple: false }, null, false), b.add(enqueue(3), null)]);
    expect(a).toEqual({ status: 'fulfilled', value: { reply: { type: 'enqueued', messageId: 10 } } });
    expect(settle).toEqual({ status: 'rejected', reason: notLeader });
    expect(c).toEqual({ status: 'fulfilled', value: { reply: { type: 'enqueued', messageId: 30 } } });
    expect(retried.map((d) => decodeQueueEntry(d).batch)).toEqual([false, false]);
  });

  it('fails every command when the outcome is unknown (nothing is proposed twice)', async () => {
    const { group, proposed } = fakeGroup(() => Promise.reject(unknown));
    let fallbacks = 0;
    const b = batcher(group, (data) => {
      fallbacks += 1;
      return applied(data);
    });
    const outcomes = await Promise.allSettled([b.add(enqueue(1), null), b.add(enqueue(2), null)]);
    expect(outcomes).toEqual([
      { status: 'rejected', reason: unknown },
      { status: 'rejected', reason: unknown },
    ]);
    expect(proposed).toHaveLength(1);
    expect(fallbacks).toBe(0);
  });
});
