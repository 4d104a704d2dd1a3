/** One-server-at-a-time membership: learners, automatic promotion, removal. */
import { describe, expect, test } from 'vitest';
import { decodeConfigEntry } from '../src/index.js';
import type { Message } from '../src/index.js';
import { TestCluster } from './cluster.js';
import { enc, run } from './helpers.js';

function configEntries(c: TestCluster, id: string): string[] {
  const raft = c.raft(id);
  const out: string[] = [];
  for (let i = raft.status().firstIndex; i <= raft.status().lastIndex; i++) {
    const e = raft.entryAt(i)!;
    if (e.type === 'config') {
      const { change } = decodeConfigEntry(e.data);
      out.push(`${change.type} ${change.nodeId}`);
    }
  }
  return out;
}

describe('learners', () => {
  test('adding a learner does not change the quorum, and a learner never campaigns', () => {
    const c = new TestCluster(['a', 'b', 'c'], { promoteLearners: false });
    c.elect('a');
    c.addNode('d');
    expect(c.raft('a').proposeConfChange({ type: 'addLearner', nodeId: 'd' })).toMatchObject({ ok: true, index: 2 });
    expect(c.raft('a').status().config).toEqual({ voters: ['a', 'b', 'c'], learners: ['d'] }); // in force once appended
    run(c, 2);
    expect(c.raft('d').status()).toMatchObject({ lastIndex: 2, commitIndex: 2, config: { voters: ['a', 'b', 'c'], learners: ['d'] } });

    // a and the learner d alone are not a quorum of {a, b, c}.
    c.crash('b');
    c.crash('c');
    const x = c.propose('a', 'x');
    c.stabilize();
    expect(c.raft('a').status().progress.get('d')?.match).toBe(x);
    expect(c.raft('a').status().commitIndex).toBe(x - 1);
    c.restart('b');
    run(c, 2);
    expect(c.raft('a').status().commitIndex).toBe(x);

    // Without a leader, the learner stays quiet.
    c.crash('a');
    c.delivered = [];
    for (let i = 0; i < 100; i++) {
      c.tick('d');
      c.stabilize();
    }
    expect(c.delivered.filter((m) => m.from === 'd')).toEqual([]);
    expect(c.raft('d').status().role).toBe('follower');
  });

  test('a learner is promoted automatically once it has caught up', () => {
    const c = new TestCluster(['a', 'b', 'c']);
    c.elect('a');
    for (let i = 0; i < 20; i++) c.propose('a', `v${i}`);
    c.stabilize();
    c.addNode('d');
    c.isolate('d');
    c.raft('a').proposeConfChange({ type: 'addLearner', nodeId: 'd' });
    run(c, 5);
    // Not caught up (unreachable): still a learner.
    expect(c.raft('a').status().config).toEqual({ voters: ['a', 'b', 'c'], learners: ['d'] });
    c.heal();
    run(c, 3);
    expect(configEntries(c, 'a')).toEqual(['addLearner d', 'promote d']);
    for (const id of ['a', 'b', 'c', 'd']) expect(c.raft(id).status().config).toEqual({ voters: ['a', 'b', 'c', 'd'], learners: [] });
    expect(c.node('d').machine).toHaveLength(20);
    // d now counts: with two voters down, a and d are not enough (quorum 3 of 4) ...
    c.crash('b');
    c.crash('c');
    const y = c.propose('a', 'y');
    run(c, 2);
    expect(c.raft('a').status().commitIndex).toBe(y - 1);
    // ... and with one down they are.
    c.restart('b');
    run(c, 2);
    expect(c.raft('a').status().commitIndex).toBe(y);
    c.assertSafe();
  });

  test('a learner that caught up before its addLearner entry committed is still promoted (regression)', () => {
    const c = new TestCluster(['a', 'b', 'c']);
    c.elect('a');
    c.addNode('d');
    // b and c are slow: d catches up first, while the entry is still uncommitted.
    c.filter = (m) => !(m.to === 'a' && (m.from === 'b' || m.from === 'c'));
    c.raft('a').proposeConfChange({ type: 'addLearner', nodeId: 'd' });
    run(c, 2);
    expect(c.raft('a').status().progress.get('d')?.match).toBe(2);
    expect(c.raft('a').status().commitIndex).toBe(1);
    c.filter = null;
    run(c, 3);
    expect(c.raft('a').status().config).toEqual({ voters: ['a', 'b', 'c', 'd'], learners: [] });
  });

  test('a new leader promotes a learner that caught up before the no-op of its term committed', () => {
    const c = new TestCluster(['a', 'b', 'c']);
    c.elect('a');
    c.addNode('d');
    c.isolate('d');
    c.raft('a').proposeConfChange({ type: 'addLearner', nodeId: 'd' });
    run(c, 2);
    c.crash('a');
    c.heal();
    // The voters' acknowledgements are lost: the new leader's no-op stays uncommitted
    // while d catches up.
    c.filter = (m) => !(m.type === 'appendResp' && m.from !== 'd');
    const leader = c.runUntilLeader();
    run(c, 2);
    const status = c.raft(leader).status();
    expect(status.progress.get('d')?.match).toBe(status.lastIndex);
    expect(status.commitIndex).toBeLessThan(status.lastIndex);
    expect(status.config.learners).toEqual(['d']);
    c.filter = null;
    run(c, 2);
    expect(c.raft(leader).status().config).toEqual({ voters: ['a', 'b', 'c', 'd'], learners: [] });
    c.assertSafe();
  });
});

describe('one change at a time', () => {
  test('a second change is refused while one is pending, and before the leader commits in its term', () => {
    const c = new TestCluster(['a', 'b', 'c'], { promoteLearners: false });
    // Before its no-op commits, a new leader refuses changes.
    c.filter = (m) => m.type !== 'appendResp';
    c.elect('a');
    expect(c.raft('a').proposeConfChange({ type: 'addLearner', nodeId: 'd' })).toEqual({ ok: false, reason: 'configChangePending', leaderId: 'a' });
    c.filter = null;
    c.tick('a');
    c.stabilize();

    expect(c.raft('a').proposeConfChange({ type: 'addLearner', nodeId: 'd' }).ok).toBe(true);
    expect(c.raft('a').proposeConfChange({ type: 'addLearner', nodeId: 'e' })).toEqual({ ok: false, reason: 'configChangePending', leaderId: 'a' });
    expect(c.raft('a').proposeConfChange({ type: 'remove', nodeId: 'd' })).toMatchObject({ ok: false, reason: 'configChangePending' });
    expect(c.raft('a').propose(enc('normal entries are fine')).ok).toBe(true);
    c.stabilize();
    expect(c.raft('a').proposeConfChange({ type: 'addLearner', nodeId: 'e' }).ok).toBe(true);
    c.stabilize();
    expect(c.raft('a').status().config).toEqual({ voters: ['a', 'b', 'c'], learners: ['d', 'e'] });
    expect(c.raft('b').proposeConfChange({ type: 'remove', nodeId: 'd' })).toEqual({ ok: false, reason: 'notLeader', leaderId: 'a' });
  });

  test('invalid changes are refused', () => {
    const c = new TestCluster(['a', 'b']);
    c.elect('a');
    const invalid = { ok: false, reason: 'invalidConfigChange', leaderId: 'a' };
    expect(c.raft('a').proposeConfChange({ type: 'addLearner', nodeId: 'b' })).toEqual(invalid);
    expect(c.raft('a').proposeConfChange({ type: 'promote', nodeId: 'b' })).toEqual(invalid);
    expect(c.raft('a').proposeConfChange({ type: 'promote', nodeId: 'z' })).toEqual(invalid);
    expect(c.raft('a').proposeConfChange({ type: 'remove', nodeId: 'z' })).toEqual(invalid);
    const solo = new TestCluster(['s']);
    solo.elect('s');
    solo.processReady();
    expect(solo.raft('s').proposeConfChange({ type: 'remove', nodeId: 's' })).toEqual({ ok: false, reason: 'invalidConfigChange', leaderId: 's' });
  });
});

describe('removal', () => {
  test('removing a follower shrinks the quorum', () => {
    const c = new TestCluster(['a', 'b', 'c', 'd']);
    c.elect('a');
    expect(c.raft('a').proposeConfChange({ type: 'remove', nodeId: 'd' }).ok).toBe(true);
    expect(c.raft('a').status().progress.has('d')).toBe(false);
    run(c, 2);
    expect(c.raft('b').status().config.voters).toEqual(['a', 'b', 'c']);
    // Quorum is now 2 of 3: one more failure is tolerated.
    c.crash('d');
    c.crash('c');
    const x = c.propose('a', 'x');
    run(c, 2);
    expect(c.raft('a').status().commitIndex).toBe(x);
    c.assertSafe();
  });

  test('a leader that removes itself keeps leading until the removal commits without it, then steps down', () => {
    const c = new TestCluster(['a', 'b', 'c']);
    c.elect('a');
    c.propose('a', 'x');
    c.stabilize();
    c.isolate('c');
    const removal = c.raft('a').proposeConfChange({ type: 'remove', nodeId: 'a' });
    expect(removal.ok).toBe(true);
    run(c, 3);
    // The new configuration {b, c} needs both: a's own copy does not count.
    expect(c.raft('a').status()).toMatchObject({ role: 'leader', commitIndex: 2 });
    expect(c.raft('b').status().lastIndex).toBe(3);
    c.heal();
    c.tick('a');
    c.stabilize();
    expect(c.raft('a').status()).toMatchObject({ role: 'follower', leaderId: null, commitIndex: 3 });
    const leader = c.runUntilLeader();
    expect(['b', 'c']).toContain(leader);
    expect(c.raft(leader).status().config).toEqual({ voters: ['b', 'c'], learners: [] });
    c.propose(leader, 'y');
    run(c, 2);
    expect(c.node('b').machine).toEqual(['x', 'y']);
    expect(c.node('c').machine).toEqual(['x', 'y']);
    // a knows it was removed: it never campaigns again.
    c.delivered = [];
    run(c, 100);
    expect(c.delivered.filter((m) => m.from === 'a')).toEqual([]);
    c.assertSafe();
  });

  test('a removed node that missed its removal cannot disrupt the cluster', () => {
    const c = new TestCluster(['a', 'b', 'c', 'd']);
    c.elect('a');
    c.isolate('d');
    c.raft('a').proposeConfChange({ type: 'remove', nodeId: 'd' });
    run(c, 3);
    c.heal();
    expect(c.raft('d').status().config.voters).toContain('d'); // it does not know
    const sentByD: Message[] = [];
    c.onDeliver = (m) => {
      if (m.from === 'd') sentByD.push(m);
    };
    run(c, 200);
    expect(sentByD.filter((m) => m.type === 'preVote').length).toBeGreaterThan(5);
    expect(sentByD.some((m) => m.type === 'vote')).toBe(false);
    for (const id of ['a', 'b', 'c']) expect(c.raft(id).status()).toMatchObject({ term: 1, leaderId: 'a' });
    expect(c.raft('d').status().term).toBe(1);
    c.assertSafe();
  });
});

describe('acceptsMessageFrom: which senders a driver steps into a group', () => {
  test('members of a configuration the log holds, including one being left or entered, and never itself', () => {
    const c = new TestCluster(['a', 'b', 'c'], { promoteLearners: false });
    c.elect('a');
    expect(['a', 'b', 'c'].map((id) => c.raft('b').acceptsMessageFrom(id))).toEqual([true, false, true]);
    expect(c.raft('b').acceptsMessageFrom('stranger')).toBe(false);
    expect(c.raft('b').acceptsMessageFrom('d')).toBe(false);
    c.addNode('d');
    // A node that is no member yet (a learner being added) cannot judge: it accepts its leader.
    expect(c.raft('d').acceptsMessageFrom('a')).toBe(true);
    c.raft('a').proposeConfChange({ type: 'addLearner', nodeId: 'd' });
    run(c, 2);
    // The learner caught up through the leader, and now knows the configuration.
    expect(c.raft('d').status().config).toEqual({ voters: ['a', 'b', 'c'], learners: ['d'] });
    expect(c.raft('d').acceptsMessageFrom('a')).toBe(true);
    expect(c.raft('d').acceptsMessageFrom('stranger')).toBe(false);
    expect(c.raft('b').acceptsMessageFrom('d')).toBe(true);
    // A removal: while the configuration that names c is still in the log, c is accepted.
    c.raft('a').proposeConfChange({ type: 'remove', nodeId: 'c' });
    run(c, 2);
    expect(c.raft('b').status().config.voters).toEqual(['a', 'b']);
    expect(c.raft('b').acceptsMessageFrom('c')).toBe(true);
  });
});
