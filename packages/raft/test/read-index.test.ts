/** ReadIndex linearizable reads (no lease). */
import { describe, expect, test } from 'vitest';
import type { HeartbeatMessage } from '../src/index.js';
import { TestCluster } from './cluster.js';
import { run } from './helpers.js';

describe('read index', () => {
  test('a read is released only after a quorum answers a heartbeat round sent after it', () => {
    // (No check-quorum: the leader would step down after hearing nothing for so long.)
    const c = new TestCluster(['a', 'b', 'c', 'd', 'e'], { checkQuorum: false });
    c.elect('a');
    const x = c.propose('a', 'x');
    c.stabilize();
    c.dropTypes.add('heartbeatResp');
    expect(c.raft('a').readIndex('r1')).toEqual({ ok: true });
    c.processNode(c.node('a'));
    const round = c.queue.filter((m): m is HeartbeatMessage => m.type === 'heartbeat');
    expect(round.map((m) => [m.to, m.readSeq])).toEqual([
      ['b', 1],
      ['c', 1],
      ['d', 1],
      ['e', 1],
    ]);
    run(c, 20); // heartbeats keep going, no answer gets through
    expect(c.node('a').readStates).toEqual([]);

    c.dropTypes.clear();
    const answering = new Set(['b']);
    c.filter = (m) => m.type !== 'heartbeatResp' || answering.has(m.from);
    run(c, 3); // with a, 2 of 5
    expect(c.node('a').readStates).toEqual([]);
    answering.add('e');
    run(c, 1); // 3 of 5
    expect(c.node('a').readStates).toEqual([{ requestId: 'r1', index: x }]);
  });

  test('answers to heartbeats sent before the read do not count', () => {
    const c = new TestCluster(['a', 'b', 'c']);
    c.elect('a');
    c.tick('a');
    c.processNode(c.node('a')); // a heartbeat round (readSeq 0) is in flight
    const oldRound = c.queue.splice(0);
    c.raft('a').readIndex('r');
    for (const m of oldRound) c.deliver(m);
    c.processNode(c.node('b'));
    c.processNode(c.node('c'));
    const oldAnswers = c.queue.splice(0);
    expect(oldAnswers.map((m) => m.type === 'heartbeatResp' && m.readSeq)).toEqual([0, 0]);
    for (const m of oldAnswers) c.deliver(m);
    c.processReady(); // a's Ready holds the read's own heartbeat round (readSeq 1) ...
    expect(c.node('a').readStates).toEqual([]);
    expect(c.queue.map((m) => m.type === 'heartbeat' && m.readSeq)).toEqual([1, 1]);
    c.queue = []; // ... which is lost
    run(c, 1); // the next round carries the read's sequence too
    expect(c.node('a').readStates).toEqual([{ requestId: 'r', index: 1 }]);
  });

  test("a deposed leader's read never completes", () => {
    const c = new TestCluster(['a', 'b', 'c', 'd', 'e'], { checkQuorum: false });
    c.elect('a');
    c.partition(['a', 'b'], ['c', 'd', 'e']);
    expect(c.raft('a').readIndex('stale')).toEqual({ ok: true });
    run(c, 40); // a still believes it leads; c, d or e is elected and commits y
    const leader = ['c', 'd', 'e'].find((id) => c.raft(id).status().role === 'leader')!;
    c.propose(leader, 'y');
    run(c, 2);
    expect(c.raft('a').status().role).toBe('leader');
    expect(c.node('a').readStates).toEqual([]); // serving it at a's commit index would miss y
    c.heal();
    run(c, 20);
    expect(c.raft('a').status().role).toBe('follower');
    expect(c.node('a').readStates).toEqual([]);
    expect(c.raft('a').readIndex('again')).toEqual({ ok: false, reason: 'notLeader', leaderId: leader });
  });

  test('a read before the leader commits an entry of its term is deferred until it does', () => {
    const c = new TestCluster(['a', 'b', 'c'], { checkQuorum: false });
    c.elect('a');
    const x = c.propose('a', 'x');
    c.stabilize(); // a commits x; b and c have it but do not know it is committed yet
    expect(c.raft('b').status().commitIndex).toBe(x - 1);
    c.crash('a');
    c.filter = (m) => !(m.from === 'b' && m.type === 'append');
    c.elect('b');
    const noop = c.raft('b').status().lastIndex;
    expect(c.raft('b').status().commitIndex).toBe(x - 1);
    expect(c.raft('b').readIndex('early')).toEqual({ ok: true });
    c.tick('b', 3);
    c.stabilize();
    // No read round started: heartbeats carry no read sequence and nothing is released.
    expect(c.delivered.filter((m) => m.type === 'heartbeat' && m.from === 'b').every((m) => m.type === 'heartbeat' && m.readSeq === 0)).toBe(true);
    expect(c.node('b').readStates).toEqual([]);
    c.filter = null;
    run(c, 2);
    // Served at the new commit index, which covers x (a read at x - 1 would have missed it).
    expect(c.node('b').readStates).toEqual([{ requestId: 'early', index: noop }]);
    expect(noop).toBeGreaterThan(x);
  });

  test('pending reads are released in order by one round; a single voter releases at once; followers refuse', () => {
    const c = new TestCluster(['a', 'b', 'c']);
    c.elect('a');
    c.raft('a').readIndex('r1');
    c.propose('a', 'x');
    c.raft('a').readIndex('r2');
    c.stabilize();
    expect(c.node('a').readStates.map((r) => r.requestId)).toEqual(['r1', 'r2']);
    expect(c.node('a').readStates.map((r) => r.index)).toEqual([1, 1]); // commit index at request time
    expect(c.raft('b').readIndex('r3')).toEqual({ ok: false, reason: 'notLeader', leaderId: 'a' });

    const solo = new TestCluster(['s']);
    solo.elect('s');
    solo.processReady();
    solo.raft('s').readIndex('mine');
    solo.processReady();
    expect(solo.node('s').readStates).toEqual([{ requestId: 'mine', index: 1 }]);
  });
});
