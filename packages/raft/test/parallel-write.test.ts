import { describe, expect, test } from 'vitest';
import { sendableBeforePersist } from '../src/index.js';
import type { Message } from '../src/index.js';
import { TestCluster } from './cluster.js';
import { enc } from './helpers.js';

describe('a leader writes in parallel with its followers (dissertation 10.2.1)', () => {
  test('only leader requests may leave before the Ready is durable', () => {
    const base = { from: 'a', to: 'b', term: 1 };
    const early: Message[] = [
      { ...base, type: 'append', prevLogIndex: 0, prevLogTerm: 0, entries: [], commit: 0 },
      { ...base, type: 'heartbeat', commit: 0, readSeq: 0, quiesce: false },
      { ...base, type: 'snapshot', meta: { index: 1, term: 1, config: { voters: ['a'], learners: [] } }, offset: 0, totalBytes: 0, chunk: new Uint8Array(), done: true },
      { ...base, type: 'timeoutNow' },
    ];
    const late: Message[] = [
      { ...base, type: 'vote', lastLogIndex: 0, lastLogTerm: 0, leaderTransfer: false },
      { ...base, type: 'preVote', lastLogIndex: 0, lastLogTerm: 0 },
      { ...base, type: 'voteResp', reject: false },
      { ...base, type: 'preVoteResp', reject: false },
      { ...base, type: 'appendResp', reject: false, index: 1, hintIndex: 0, hintTerm: 0 },
      { ...base, type: 'heartbeatResp', readSeq: 0, wake: false },
      { ...base, type: 'snapshotResp', snapshotIndex: 1, nextOffset: 0, reject: false },
    ];
    expect(early.map(sendableBeforePersist)).toEqual(early.map(() => true));
    expect(late.map(sendableBeforePersist)).toEqual(late.map(() => false));
  });

  test('an entry commits on a follower majority before the leader wrote it, but the leader applies it only after', () => {
    const cluster = new TestCluster(['a', 'b', 'c']);
    cluster.elect('a');
    const a = cluster.raft('a');
    const index = cluster.propose('a', 'x');
    // The leader's Ready: its entry is not durable on the leader while its appends go out.
    const ready = a.ready();
    expect(ready.entries.map((entry) => entry.index)).toEqual([index]);
    const appends = ready.messages.filter(sendableBeforePersist);
    expect(appends.map((message) => message.to).sort()).toEqual(['b', 'c']);
    for (const message of appends) cluster.deliver(message);
    cluster.processReady(); // b and c persist, and answer a
    const answers = cluster.queue.filter((message) => message.to === 'a');
    cluster.queue = cluster.queue.filter((message) => message.to !== 'a');
    for (const message of answers) a.step(message);
    // b and c make a majority of three: committed, though the leader's write is still going.
    expect(a.status().commitIndex).toBe(index);
    expect(ready.committedEntries.map((entry) => entry.index)).not.toContain(index);
    a.advance();
    // Only now, with its own write done, does the leader hand the entry to its state machine.
    const next = a.ready();
    expect(next.committedEntries.map((entry) => entry.index)).toContain(index);
    a.advance();
    expect(a.status().appliedIndex).toBe(index);
    expect(enc('x')).toEqual(a.entryAt(index)?.data);
  });
});
