/** Leadership transfer (TimeoutNow). */
import { describe, expect, test } from 'vitest';
import type { VoteMessage } from '../src/index.js';
import { TestCluster } from './cluster.js';
import { enc, run } from './helpers.js';

describe('leadership transfer', () => {
  test('is immediate when the target is caught up, and voters set their lease aside for it', () => {
    const c = new TestCluster(['a', 'b', 'c']);
    c.elect('a');
    c.propose('a', 'x');
    c.stabilize();
    expect(c.raft('a').transferLeadership('c')).toEqual({ ok: true });
    c.processNode(c.node('a'));
    expect(c.queue).toEqual([{ type: 'timeoutNow', from: 'a', to: 'c', term: 1 }]);
    c.stabilize();
    expect(c.raft('c').status()).toMatchObject({ role: 'leader', term: 2 });
    expect(c.raft('a').status()).toMatchObject({ role: 'follower', term: 2, leaderId: 'c' });
    // c skipped pre-vote, and b granted although it had just heard from a.
    const votes = c.delivered.filter((m): m is VoteMessage => m.type === 'vote' && m.from === 'c');
    expect(votes.map((m) => [m.to, m.leaderTransfer])).toEqual([
      ['a', true],
      ['b', true],
    ]);
    expect(c.delivered.some((m) => m.type === 'preVote' && m.from === 'c')).toBe(false);
    c.propose('c', 'y');
    run(c, 2);
    for (const id of ['a', 'b', 'c']) expect(c.node(id).machine).toEqual(['x', 'y']);
    c.assertSafe();
  });

  test('waits for a lagging target to catch up, refusing proposals meanwhile', () => {
    const c = new TestCluster(['a', 'b', 'c']);
    c.elect('a');
    c.isolate('c');
    for (let i = 0; i < 5; i++) c.propose('a', `v${i}`);
    c.stabilize();
    c.heal();
    expect(c.raft('a').transferLeadership('c')).toEqual({ ok: true });
    expect(c.raft('a').status().leadTransferee).toBe('c');
    expect(c.raft('a').propose(enc('refused'))).toEqual({ ok: false, reason: 'leadershipTransfer', leaderId: 'a' });
    expect(c.raft('a').proposeConfChange({ type: 'remove', nodeId: 'b' })).toMatchObject({ ok: false, reason: 'leadershipTransfer' });
    // No TimeoutNow until c has acknowledged the leader's last entry.
    const order: string[] = [];
    c.onDeliver = (m) => {
      if (m.type === 'timeoutNow') order.push('timeoutNow');
      if (m.type === 'appendResp' && m.from === 'c' && !m.reject) order.push(`ack ${m.index}`);
    };
    c.stabilize();
    expect(order.at(-2)).toBe('ack 6');
    expect(order.at(-1)).toBe('timeoutNow');
    expect(c.raft('c').status().role).toBe('leader');
    run(c, 1);
    expect(c.node('c').machine).toEqual(['v0', 'v1', 'v2', 'v3', 'v4']);
    c.assertSafe();
  });

  test('is aborted after an election timeout if the target never catches up', () => {
    const c = new TestCluster(['a', 'b', 'c']);
    c.elect('a');
    c.isolate('c');
    c.raft('a').transferLeadership('c');
    c.tick('a', c.electionTicks - 1);
    c.stabilize();
    expect(c.raft('a').status().leadTransferee).toBe('c');
    expect(c.raft('a').propose(enc('x')).ok).toBe(false);
    c.tick('a');
    expect(c.raft('a').status()).toMatchObject({ role: 'leader', leadTransferee: null });
    expect(c.raft('a').propose(enc('x')).ok).toBe(true);
    c.stabilize();
    expect(c.raft('a').status().commitIndex).toBe(2);
  });

  test('is refused by a follower and for a non-voter; to the leader itself it is a no-op', () => {
    const c = new TestCluster(['a', 'b', 'c'], { promoteLearners: false });
    c.elect('a');
    c.addNode('d');
    c.raft('a').proposeConfChange({ type: 'addLearner', nodeId: 'd' });
    run(c, 2);
    expect(c.raft('b').transferLeadership('c')).toEqual({ ok: false, reason: 'notLeader', leaderId: 'a' });
    expect(c.raft('a').transferLeadership('d')).toEqual({ ok: false, reason: 'notAVoter', leaderId: 'a' });
    expect(c.raft('a').transferLeadership('zz')).toEqual({ ok: false, reason: 'notAVoter', leaderId: 'a' });
    expect(c.raft('a').transferLeadership('a')).toEqual({ ok: true });
    expect(c.raft('a').status().leadTransferee).toBeNull();
    run(c, 3);
    expect(c.leader()).toBe('a');
  });

  test('a lost TimeoutNow leaves the old leader in charge once the transfer times out', () => {
    const c = new TestCluster(['a', 'b', 'c']);
    c.elect('a');
    c.dropTypes.add('timeoutNow');
    c.raft('a').transferLeadership('b');
    run(c, c.electionTicks + 1);
    expect(c.raft('a').status()).toMatchObject({ role: 'leader', term: 1, leadTransferee: null });
    c.dropTypes.clear();
    c.raft('a').transferLeadership('b');
    c.stabilize();
    expect(c.leader()).toBe('b');
  });
});
