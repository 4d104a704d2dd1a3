/** Elections: randomized timeouts, pre-vote, check-quorum (leader lease) and the leader no-op. */
import { describe, expect, test } from 'vitest';
import type { Message } from '../src/index.js';
import { TestCluster } from './cluster.js';
import { logTerms, run } from './helpers.js';

describe('election with randomized timeouts', () => {
  test('a follower campaigns after electionTicks + random(electionTicks) ticks, re-randomized each time', () => {
    const seen = new Set<number>();
    for (let seed = 1; seed <= 40; seed++) {
      const c = new TestCluster(['a', 'b', 'c'], { electionTicks: 10 }, seed);
      c.isolate('a');
      for (let round = 0; round < 3; round++) {
        const ticks = c.campaign('a'); // as a pre-candidate that never wins, it keeps retrying
        expect(ticks).toBeGreaterThanOrEqual(10);
        expect(ticks).toBeLessThan(20);
        seen.add(ticks);
      }
    }
    expect(seen.size).toBeGreaterThanOrEqual(7);
  });

  test('with everyone ticking, exactly one leader emerges and the others follow it', () => {
    for (let seed = 1; seed <= 25; seed++) {
      const ids = ['a', 'b', 'c', 'd', 'e'];
      const c = new TestCluster(ids, {}, seed);
      let ticks = 0;
      while (c.leader() === null) {
        c.tickAll();
        c.stabilize();
        ticks++;
        expect(ticks).toBeLessThan(100);
      }
      const leader = c.leader()!;
      const leaders = ids.filter((id) => c.raft(id).status().role === 'leader');
      expect(leaders).toEqual([leader]);
      run(c, 2);
      for (const id of ids) expect(c.raft(id).status()).toMatchObject({ leaderId: leader, term: c.raft(leader).status().term });
      c.assertSafe();
    }
  });

  test('followers hearing heartbeats never campaign', () => {
    const c = new TestCluster(['a', 'b', 'c']);
    c.elect('a');
    run(c, 300);
    for (const id of ['a', 'b', 'c']) expect(c.raft(id).status()).toMatchObject({ term: 1, leaderId: 'a' });
    expect(c.delivered.some((m) => m.type === 'preVote' || m.type === 'vote')).toBe(true); // a's own election
    expect(c.delivered.filter((m) => m.type === 'preVote' && m.from !== 'a')).toEqual([]);
  });

  test('a single voter elects itself at once', () => {
    const c = new TestCluster(['solo']);
    const ticks = c.campaign('solo');
    expect(ticks).toBeGreaterThanOrEqual(10);
    expect(c.raft('solo').status()).toMatchObject({ role: 'leader', term: 1 });
    c.propose('solo', 'x');
    c.processReady();
    expect(c.node('solo').machine).toEqual(['x']);
  });
});

describe('pre-vote', () => {
  test("a partitioned node's term does not inflate, and rejoining does not disrupt the leader", () => {
    const c = new TestCluster(['a', 'b', 'c']);
    c.elect('a');
    c.isolate('c');
    const dropped: Message[] = [];
    c.onDeliver = (m, wasDropped) => {
      if (wasDropped) dropped.push(m);
    };
    run(c, 200);
    expect(dropped.filter((m) => m.from === 'c' && m.type === 'preVote').length).toBeGreaterThan(5);
    expect(dropped.some((m) => m.from === 'c' && m.type === 'vote')).toBe(false);
    expect(c.raft('c').status()).toMatchObject({ term: 1, role: 'preCandidate' });
    c.heal();
    run(c, 20);
    for (const id of ['a', 'b', 'c']) expect(c.raft(id).status()).toMatchObject({ term: 1, leaderId: 'a' });
    c.assertSafe();
  });

  test('without pre-vote the same partition inflates the term and the rejoining node deposes the leader', () => {
    const c = new TestCluster(['a', 'b', 'c'], { preVote: false });
    c.elect('a');
    c.isolate('c');
    run(c, 200);
    expect(c.raft('c').status().term).toBeGreaterThan(5);
    c.heal();
    run(c, 40);
    expect(c.raft('a').status().term).toBeGreaterThan(5); // a learned c's term: it was deposed
    c.assertSafe();
  });

  test('a pre-vote leaves the voter unchanged and is granted only to an up-to-date log', () => {
    const c = new TestCluster(['a', 'b', 'c']);
    c.elect('a');
    c.propose('a', 'x');
    c.stabilize();
    c.crash('a');
    c.tick('b', 20); // b's lease on a has expired
    c.processReady();
    c.queue = [];
    const before = c.raft('b').status();
    const ask = (lastLogIndex: number, lastLogTerm: number): Message[] => {
      c.raft('b').step({ type: 'preVote', from: 'c', to: 'b', term: 2, lastLogIndex, lastLogTerm });
      c.processReady();
      const sent = c.queue;
      c.queue = [];
      return sent;
    };
    expect(ask(1, 1)).toEqual([{ type: 'preVoteResp', from: 'b', to: 'c', term: 1, reject: true }]);
    expect(ask(2, 1)).toEqual([{ type: 'preVoteResp', from: 'b', to: 'c', term: 2, reject: false }]);
    const after = c.raft('b').status();
    expect({ term: after.term, vote: after.vote }).toEqual({ term: before.term, vote: before.vote });
  });

  test('a pre-candidate that wins the pre-vote campaigns in the next term, and only then', () => {
    const c = new TestCluster(['a', 'b', 'c']);
    c.campaign('a');
    expect(c.raft('a').status()).toMatchObject({ role: 'preCandidate', term: 0, vote: null });
    expect(c.queue.map((m) => `${m.type}:${m.term}`)).toEqual(['preVote:1', 'preVote:1']);
    c.deliverRound(); // pre-votes
    c.deliverRound(); // responses
    expect(c.raft('a').status()).toMatchObject({ role: 'candidate', term: 1, vote: 'a' });
    expect(c.raft('b').status().term).toBe(0);
    c.stabilize();
    expect(c.raft('a').status()).toMatchObject({ role: 'leader', term: 1 });
  });
});

describe('check-quorum', () => {
  test('a leader cut off from the majority steps down within two election timeouts', () => {
    const c = new TestCluster(['a', 'b', 'c', 'd', 'e']);
    c.elect('a');
    c.partition(['a', 'b'], ['c', 'd', 'e']);
    let ticks = 0;
    while (c.raft('a').status().role === 'leader') {
      c.tickAll();
      c.stabilize();
      ticks++;
      expect(ticks).toBeLessThanOrEqual(2 * c.electionTicks);
    }
    expect(ticks).toBeGreaterThanOrEqual(c.electionTicks);
    expect(c.raft('a').status()).toMatchObject({ role: 'follower', term: 1, leaderId: null });
    run(c, 40);
    const majorityLeader = ['c', 'd', 'e'].filter((id) => c.raft(id).status().role === 'leader');
    expect(majorityLeader).toHaveLength(1);
    expect(c.raft('a').status().role).not.toBe('leader');
    c.assertSafe();
  });

  test('without check-quorum the cut-off leader keeps believing it leads', () => {
    const c = new TestCluster(['a', 'b', 'c', 'd', 'e'], { checkQuorum: false });
    c.elect('a');
    c.partition(['a', 'b'], ['c', 'd', 'e']);
    run(c, 100);
    expect(c.raft('a').status()).toMatchObject({ role: 'leader', term: 1 });
  });

  test('voters within their lease ignore vote requests: a node that stops hearing the leader cannot depose it', () => {
    // Pre-vote is off so that only the lease protects the leader.
    const c = new TestCluster(['a', 'b', 'c'], { preVote: false });
    c.elect('a');
    c.cutLink('a', 'c'); // c hears nothing, but everyone hears c
    run(c, 100);
    expect(c.raft('c').status().term).toBeGreaterThan(3); // it keeps campaigning
    expect(c.delivered.filter((m) => m.type === 'voteResp' && m.to === 'c')).toEqual([]);
    expect(c.raft('a').status()).toMatchObject({ role: 'leader', term: 1 });
    expect(c.raft('b').status()).toMatchObject({ term: 1, leaderId: 'a' });
    c.assertSafe();
  });

  test('without check-quorum the same node deposes the leader', () => {
    const c = new TestCluster(['a', 'b', 'c'], { preVote: false, checkQuorum: false });
    c.elect('a');
    c.cutLink('a', 'c');
    run(c, 100);
    expect(c.raft('a').status().term).toBeGreaterThan(1);
  });

  test('a rejoining node whose timer fired does not depose a healthy leader', () => {
    const c = new TestCluster(['a', 'b', 'c']);
    c.elect('a');
    c.isolate('c');
    run(c, 50);
    c.campaign('c'); // its pre-votes are queued as the partition heals
    expect(c.queue.filter((m) => m.type === 'preVote').map((m) => m.to)).toEqual(['a', 'b']);
    c.heal();
    c.stabilize();
    expect(c.delivered.filter((m) => m.type === 'preVoteResp' && m.to === 'c')).toEqual([]); // ignored: both within the lease
    run(c, 5);
    for (const id of ['a', 'b', 'c']) expect(c.raft(id).status()).toMatchObject({ term: 1, leaderId: 'a' });
    c.assertSafe();
  });
});

describe('the leader no-op', () => {
  test('a new leader appends an empty entry of its term and replicates it at once', () => {
    const c = new TestCluster(['a', 'b', 'c']);
    c.campaign('a');
    for (let i = 0; i < 10 && c.raft('a').status().role !== 'leader'; i++) c.deliverRound();
    expect(c.raft('a').status().role).toBe('leader');
    const noop = c.raft('a').entryAt(1);
    expect(noop).toEqual({ index: 1, term: 1, type: 'normal', data: new Uint8Array(0) });
    c.processReady();
    expect(c.queue.filter((m) => m.type === 'append').map((m) => m.type === 'append' && m.entries.map((e) => e.index))).toEqual([[1], [1]]);
    c.stabilize();
    expect(c.raft('b').status().commitIndex).toBe(0); // learned with the next message
    run(c, 1);
    for (const id of ['a', 'b', 'c']) expect(c.raft(id).status().commitIndex).toBe(1);
    expect(c.node('a').machine).toEqual([]); // the no-op is not a command
  });

  test("the no-op commits the previous leader's uncommitted entries", () => {
    // Without check-quorum, c, d and e vote for b at once (no lease to wait out).
    const c = new TestCluster(['a', 'b', 'c', 'd', 'e'], { checkQuorum: false });
    c.elect('a');
    c.partition(['a', 'b'], ['c', 'd', 'e']);
    const x = c.propose('a', 'x');
    c.stabilize();
    expect(c.raft('b').termAt(x)).toBe(1);
    expect(c.raft('a').status().commitIndex).toBe(x - 1);
    c.crash('a');
    c.heal();
    // b's appends are held back: its term-2 no-op is not on a majority yet.
    c.filter = (m) => !(m.from === 'b' && m.type === 'append');
    c.elect('b');
    expect(logTerms(c.raft('b'))).toEqual(['1@1', `${x}@1`, `${x + 1}@2`]);
    expect(c.raft('b').status().commitIndex).toBe(x - 1);
    c.filter = null;
    c.tick('b');
    c.stabilize();
    expect(c.raft('b').status().commitIndex).toBe(x + 1);
    run(c, 1);
    for (const id of ['b', 'c', 'd', 'e']) expect(c.node(id).machine).toEqual(['x']);
    c.assertSafe();
  });
});
