/**
 * Metadata proposals are batched on the metadata group's leader (meta-batcher.ts): the
 * commands of one turn become one entry, which every replica applies command by command.
 */
import type { Entry } from '@quorumq/raft';
import { describe, expect, it } from 'vitest';

import { decodeJson, encodeJson } from '../src/json-codec.js';
import { MetaBatcher, META_BATCH_COMMANDS } from '../src/meta-batcher.js';
import { decodeMetaEntry, parseMetaCommand } from '../src/meta-command.js';
import { MetaMachine, type MetaCommand, type MetaReply } from '../src/meta-machine.js';

const entry = (index: number, data: Uint8Array): Entry => ({ index, term: 1, type: 'normal', data });
const declare = (name: string): MetaCommand => ({ type: 'declareQueue', name, args: {}, passive: false, members: ['n1', 'n2', 'n3'], createdAt: 1000 });
const remove = (name: string): MetaCommand => ({ type: 'deleteQueue', name, reason: 'delete' });

/** A batcher whose entries a MetaMachine applies at once, as the metadata group would. */
function harness(fail: unknown = null): { batcher: MetaBatcher; entries: Uint8Array[]; machine: MetaMachine; changed: (string | null)[] } {
  const entries: Uint8Array[] = [];
  const changed: (string | null)[] = [];
  const machine = new MetaMachine((name) => changed.push(name));
  const batcher = new MetaBatcher(async (data) => {
    entries.push(data);
    if (fail !== null) throw fail;
    return machine.apply(entry(entries.length, data));
  });
  return { batcher, entries, machine, changed };
}

describe('batching metadata proposals', () => {
  it('makes the commands of one turn one entry, and each caller gets its own reply', async () => {
    const { batcher, entries, machine, changed } = harness();
    const replies = await Promise.all(['a', 'b', 'c'].map((name) => batcher.add(declare(name), Infinity)));
    expect(entries).toHaveLength(1);
    expect(decodeMetaEntry(entries[0]!).kind).toBe('batch');
    expect(replies.map((r) => r.ok && r.queue?.name)).toEqual(['a', 'b', 'c']);
    for (const reply of replies) expect(reply).toMatchObject({ ok: true, changed: true, index: 1, queue: { createdIndex: 1 } });
    expect([...machine.queues.keys()]).toEqual(['a', 'b', 'c']);
    expect(changed).toEqual(['a', 'b', 'c']);
  });

  it('proposes a command alone in its turn as a plain entry', async () => {
    const { batcher, entries } = harness();
    const reply = await batcher.add(declare('a'), Infinity);
    expect(reply).toMatchObject({ ok: true, changed: true, index: 1 });
    expect(decodeJson(entries[0]!)).toEqual(declare('a'));
  });

  it('never puts two commands naming the same queue in one entry, and caps an entry at META_BATCH_COMMANDS', async () => {
    const { batcher, entries, machine } = harness();
    const replies = await Promise.all([batcher.add(declare('a'), Infinity), batcher.add(remove('a'), Infinity), batcher.add(declare('a'), Infinity)]);
    expect(entries).toHaveLength(3);
    expect(replies.map((r) => r.ok && r.changed)).toEqual([true, true, true]);
    // The re-declared queue is a new group: created by the third entry.
    expect(machine.queues.get('a')?.createdIndex).toBe(3);

    const many = await Promise.all(Array.from({ length: META_BATCH_COMMANDS + 10 }, (_, i) => batcher.add(declare(`m${i}`), Infinity)));
    expect(entries).toHaveLength(5);
    expect(many.every((r) => r.ok && r.changed)).toBe(true);
    expect(machine.queues.size).toBe(1 + META_BATCH_COMMANDS + 10);
  });

  it('fails every command of an entry that fails, with its error', async () => {
    const failure = new Error('not the leader');
    const { batcher } = harness(failure);
    const outcomes = await Promise.allSettled([batcher.add(declare('a'), Infinity), batcher.add(declare('b'), Infinity)]);
    expect(outcomes.map((o) => (o.status === 'rejected' ? o.reason : null))).toEqual([failure, failure]);
  });

  it('gives the entry the earliest deadline of its commands', async () => {
    const deadlines: number[] = [];
    const batcher = new MetaBatcher(async (_data, deadline) => {
      deadlines.push(deadline);
      return { ok: true, changed: false, batch: [{ ok: true, changed: false }, { ok: true, changed: false }] };
    });
    await Promise.all([batcher.add({ type: 'barrier' }, 5000), batcher.add({ type: 'barrier' }, 3000)]);
    expect(deadlines).toEqual([3000]);
  });
});

describe('a replica applying a batch entry', () => {
  it('applies each command in order with its own reply; a malformed one fails alone', () => {
    const machine = new MetaMachine(() => {});
    const reply = machine.apply(entry(7, encodeJson({ type: 'batch', commands: [declare('a'), { type: 'declareQueue', name: 5 }, { type: 'batch', commands: [declare('n')] }, declare('b')] })));
    expect(reply).toMatchObject({ ok: true, changed: true, index: 7 });
    expect(reply.batch?.map((r: MetaReply) => (r.ok ? 'ok' : r.code))).toEqual(['ok', 'INVALID_ARGUMENT', 'INVALID_ARGUMENT', 'ok']);
    expect([...machine.queues.keys()]).toEqual(['a', 'b']);
  });

  it('refuses to declare again in one entry a queue that entry deleted (its group would reuse the deleted one\'s id)', () => {
    const machine = new MetaMachine(() => {});
    machine.apply(entry(1, encodeJson(declare('a'))));
    const reply = machine.apply(entry(2, encodeJson({ type: 'batch', commands: [remove('a'), declare('a'), declare('b')] })));
    expect(reply.batch?.map((r: MetaReply) => (r.ok ? r.changed : r.reason))).toEqual([true, 'PRECONDITION_FAILED', true]);
    expect(machine.queues.has('a')).toBe(false);
    expect(machine.queues.get('b')?.createdIndex).toBe(2);
  });

  it('gives every replica the same replies and state', () => {
    const data = encodeJson({ type: 'batch', commands: [declare('a'), remove('a'), declare('a'), { type: 'barrier' }, declare('c')] });
    const a = new MetaMachine(() => {});
    const b = new MetaMachine(() => {});
    expect(b.apply(entry(1, Buffer.from(data)))).toEqual(a.apply(entry(1, data)));
    expect(Buffer.from(b.snapshot())).toEqual(Buffer.from(a.snapshot()));
  });

  it('a batch is not a command: one cannot be proposed or forwarded as such', () => {
    expect(parseMetaCommand({ type: 'batch', commands: [declare('a')] })).toMatchObject({ ok: false });
  });
});
