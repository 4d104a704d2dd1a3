/**
 * append-fanout.ts: a group's appends go at once to as many followers as a majority needs
 * (healthy ones first, then by id), and wait a moment for the others.
 */
import { describe, expect, it } from 'vitest';

import { deferrableAppends, eagerFollowers } from '../src/append-fanout.js';
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
