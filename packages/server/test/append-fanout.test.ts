/**
 * append-fanout.ts: a group's appends go at once to as many followers as a majority needs
 * (healthy ones first, then by id), and wait a moment for the others.
 */
import { describe, expect, it } from 'vitest';

import type { Entry, Message } from '@quorumq/raft';

import {
  DEFERRED_APPEND_BYTES_MAX,
  DEFERRED_APPEND_ENTRIES_MAX,
  coalesceAppends,
  deferrableAppends,
  eagerFollowers,
  holdFills,
} from '../src/append-fanout.js';
import type { GroupMessage } from '../src/raft-codec.js';

const append = (groupId: string, to: string): GroupMessage => ({
  groupId,
  message: { type: 'append', from: 'n2', to, term: 2, prevLogIndex: 4, prevLogTerm: 2, entries: [], commit: 3 },
});
const heartbeat = (groupId: string, to: string): GroupMessage => ({
  groupId,
  message: { type: 'heartbeat', from: 'n2', to, term: 2, commit: 3, readSeq: 0, quiesce: false },
});

describe('eagerFollowers', () => {
  it('is the number of followers that make a majority with the leader', () => {
    expect([1, 2, 3, 4, 6].map(eagerFollowers)).toEqual([1, 1, 2, 2, 3]);
  });
});

describe('deferrableAppends', () => {
  const everyoneHealthy = (): boolean => true;

  it('of a three-member group, defers the appends to one follower: the later id when both are healthy', () => {
    const queued = new Map([
      ['n3', [append('q/1', 'n3')]],
      ['n1', [append('q/1', 'n1')]],
    ]);
    expect(deferrableAppends(queued, everyoneHealthy)).toEqual(new Map([['q/1', new Set(['n3'])]]));
  });

  it('keeps a healthy follower eager over an unhealthy one', () => {
    const queued = new Map([
      ['n1', [append('q/1', 'n1')]],
      ['n3', [append('q/1', 'n3')]],
    ]);
    expect(deferrableAppends(queued, (peer) => peer === 'n3')).toEqual(new Map([['q/1', new Set(['n1'])]]));
  });

  it('of a five-member group, defers two of four', () => {
    const queued = new Map(['n1', 'n3', 'n4', 'n5'].map((to) => [to, [append('q/1', to)]]));
    expect(deferrableAppends(queued, (peer) => peer !== 'n1')).toEqual(new Map([['q/1', new Set(['n5', 'n1'])]]));
  });

  it('defers nothing when only as many followers as a majority needs are addressed, and never a message that is not an append', () => {
    const queued = new Map([
      ['n1', [append('q/1', 'n1'), heartbeat('q/2', 'n1')]],
      ['n3', [heartbeat('q/2', 'n3'), append('q/3', 'n3')]],
    ]);
    expect(deferrableAppends(queued, everyoneHealthy)).toEqual(new Map());
  });

  it('chooses per group', () => {
    const queued = new Map([
      ['n1', [append('q/1', 'n1'), append('q/2', 'n1')]],
      ['n3', [append('q/1', 'n3'), append('q/2', 'n3')]],
    ]);
    expect(deferrableAppends(queued, (peer) => peer === 'n3')).toEqual(
      new Map([
        ['q/1', new Set(['n1'])],
        ['q/2', new Set(['n1'])],
      ]),
    );
  });
});

/** An append to n3 of entries prev+1..prev+count (term 2), each `size` bytes, with commit `commit`. */
const run = (groupId: string, prev: number, count: number, commit: number, size = 10, term = 2): GroupMessage => ({
  groupId,
  message: {
    type: 'append',
    from: 'n2',
    to: 'n3',
    term,
    prevLogIndex: prev,
    prevLogTerm: 2,
    entries: Array.from({ length: count }, (_, i): Entry => ({ index: prev + 1 + i, term, type: 'normal', data: new Uint8Array(size).fill(prev + 1 + i) })),
    commit,
  },
});
const indexes = (item: GroupMessage): number[] => (item.message.type === 'append' ? item.message.entries.map((e) => e.index) : []);

describe('coalesceAppends', () => {
  it('joins a group\'s appends that continue one another into one: all their entries, the first one\'s start, the later commit', () => {
    const joined = coalesceAppends([run('q/1', 4, 1, 3), run('q/1', 5, 2, 4), run('q/1', 7, 1, 5)]);
    expect(joined).toHaveLength(1);
    const message = joined[0]!.message as Extract<Message, { type: 'append' }>;
    expect({ prevLogIndex: message.prevLogIndex, prevLogTerm: message.prevLogTerm, commit: message.commit, to: message.to, term: message.term }).toEqual({
      prevLogIndex: 4,
      prevLogTerm: 2,
      commit: 5,
      to: 'n3',
      term: 2,
    });
    expect(indexes(joined[0]!)).toEqual([5, 6, 7, 8]);
  });

  it('joins across other groups\' messages, keeping each group\'s order', () => {
    const joined = coalesceAppends([run('q/1', 4, 1, 3), run('q/2', 10, 1, 9), heartbeat('q/3', 'n3'), run('q/1', 5, 1, 4), run('q/2', 11, 1, 10)]);
    expect(joined.map((m) => [m.groupId, m.message.type, indexes(m)])).toEqual([
      ['q/1', 'append', [5, 6]],
      ['q/2', 'append', [11, 12]],
      ['q/3', 'heartbeat', []],
    ]);
  });

  it('does not join across another message of the group, a gap, a new term, or past the byte limit', () => {
    // Another message of the group between the two: both stay, in order.
    expect(coalesceAppends([run('q/1', 4, 1, 3), heartbeat('q/1', 'n3'), run('q/1', 5, 1, 4)]).map((m) => m.message.type)).toEqual(['append', 'heartbeat', 'append']);
    // The second does not start where the first ends (a probe sent again from further back).
    expect(coalesceAppends([run('q/1', 4, 2, 3), run('q/1', 4, 1, 3)]).map(indexes)).toEqual([[5, 6], [5]]);
    // A leader of a new term.
    expect(coalesceAppends([run('q/1', 4, 1, 3), run('q/1', 5, 1, 4, 10, 3)]).map(indexes)).toEqual([[5], [6]]);
    // The byte limit: 3 entries of 40 bytes under a limit of 100 make two appends.
    expect(coalesceAppends([run('q/1', 4, 1, 3, 40), run('q/1', 5, 1, 3, 40), run('q/1', 6, 1, 3, 40)], 100).map(indexes)).toEqual([[5, 6], [7]]);
  });

  it('leaves a single message, or messages with no append, as they are', () => {
    const single = [run('q/1', 4, 1, 3)];
    expect(coalesceAppends(single)).toEqual(single);
    const none = [heartbeat('q/1', 'n3'), heartbeat('q/2', 'n3')];
    expect(coalesceAppends(none)).toEqual(none);
  });
});

describe('holdFills', () => {
  it('is true once the held appends carry enough entries or bytes to leave without waiting', () => {
    const load = { entries: 0, bytes: 0 };
    expect(holdFills(load, [run('q/1', 0, DEFERRED_APPEND_ENTRIES_MAX - 1, 0), heartbeat('q/1', 'n3')])).toBe(false);
    expect(load).toEqual({ entries: DEFERRED_APPEND_ENTRIES_MAX - 1, bytes: (DEFERRED_APPEND_ENTRIES_MAX - 1) * 10 });
    expect(holdFills(load, [run('q/1', DEFERRED_APPEND_ENTRIES_MAX - 1, 1, 0)])).toBe(true);

    const big = { entries: 0, bytes: 0 };
    expect(holdFills(big, [run('q/1', 0, 1, 0, DEFERRED_APPEND_BYTES_MAX - 1)])).toBe(false);
    expect(holdFills(big, [run('q/2', 0, 1, 0, 1)])).toBe(true);
  });
});
