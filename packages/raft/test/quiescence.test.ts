/** Quiet groups (RaftNode.isQuiet / wake): idle groups send nothing; work, restarts and a silent node wake them. */
import { describe, expect, test } from 'vitest';
import { TestCluster } from './cluster.js';
import { run } from './helpers.js';
import type { Message } from '../src/index.js';

const IDS = ['a', 'b', 'c'];

/** A three-voter group led by `a` with one committed entry, run until it is quiet. */
function quietGroup(seed = 1): TestCluster {
  const c = new TestCluster(IDS, { quiesce: true }, seed);
  c.elect('a');
  c.propose('a', 'x');
  run(c, 20);
  return c;
}

function quietIds(c: TestCluster): string[] {
  return c.liveNodes().filter((n) => n.raft.isQuiet).map((n) => n.id);
}

describe('quiescence', () => {
  test('an idle group goes quiet on every replica and then sends nothing however long it ticks', () => {
    const c = quietGroup();
    expect(quietIds(c)).toEqual(IDS);
    for (const id of IDS) expect(c.node(id).machine).toEqual(['x']);
    const sent = c.delivered.length;
    run(c, 1_000);
    expect(c.delivered.length).toBe(sent);
    for (const id of IDS) expect(c.raft(id).status()).toMatchObject({ leaderId: 'a', term: 1 });
    c.assertSafe();
  });

  test('without the option a group never goes quiet (classic heartbeats)', () => {
    const c = new TestCluster(IDS);
    c.elect('a');
    run(c, 50);
    expect(quietIds(c)).toEqual([]);
    const sent = c.delivered.length;
    run(c, 10);
    expect(c.delivered.length).toBeGreaterThan(sent);
  });

  test('a proposal wakes the group, commits everywhere, and the group goes quiet again', () => {
    const c = quietGroup();
    c.propose('a', 'y');
    expect(c.raft('a').isQuiet).toBe(false);
    c.stabilize();
    expect(c.node('a').machine).toEqual(['x', 'y']);
    run(c, 10);
    for (const id of IDS) expect(c.node(id).machine).toEqual(['x', 'y']);
    expect(quietIds(c)).toEqual(IDS);
  });

  test('a follower that missed entries is caught up when it answers again, before it goes quiet', () => {
    const c = new TestCluster(IDS, { quiesce: true });
    c.elect('a');
    c.isolate('c');
    c.propose('a', 'x');
    run(c, 40);
    // a and b went quiet without c (not heard from), c campaigns in vain.
    expect(c.raft('a').isQuiet).toBe(true);
    expect(c.node('c').machine).toEqual([]);
    c.heal();
    run(c, 60);
    expect(c.node('c').machine).toEqual(['x']);
    expect(quietIds(c)).toEqual(IDS);
    expect(c.raft('a').status()).toMatchObject({ role: 'leader', term: 1 });
    c.assertSafe();
  });

  test('a learner whose answer to a snapshot was lost is still caught up: the leader does not go quiet while a snapshot is in flight (regression)', () => {
    const c = new TestCluster(IDS, { quiesce: true, promoteLearners: false, retainedEntriesAfterSnapshot: 0 });
    c.elect('a');
    c.addNode('d');
    c.isolate('d');
    c.raft('a').proposeConfChange({ type: 'addLearner', nodeId: 'd' });
    for (let i = 0; i < 5; i++) c.propose('a', `v${i}`);
    c.stabilize();
    const snapshot = c.snapshot('a');
    // d installs the snapshot, its answer to the last chunk is lost, and then nothing from
    // d reaches a for a while: a is left with d's transfer unanswered, and (unless it keeps
    // retrying) goes quiet. A learner never campaigns, so only the leader can end it.
    let lostAck = false;
    let released = false;
    c.filter = (m) => {
      if (m.from !== 'd' || released) return true;
      if (m.type === 'appendResp' && !m.reject && m.index >= snapshot.meta.index) lostAck = true;
      return !lostAck;
    };
    c.heal();
    run(c, 100);
    expect(lostAck).toBe(true);
    expect(c.node('d').durable.snapshot?.meta.index).toBe(snapshot.meta.index);
    c.propose('a', 'late');
    run(c, 100);
    released = true;
    run(c, 200);
    expect(c.node('d').machine).toEqual(c.node('a').machine);
    expect(c.node('d').machine.at(-1)).toBe('late');
    expect(quietIds(c)).toEqual([...IDS, 'd']);
    c.assertSafe();
  });

  test('a learner that caught up during a leadership transfer that then failed is promoted: the leader does not go quiet with it a learner (regression)', () => {
    const c = new TestCluster(IDS, { quiesce: true });
    c.elect('a');
    c.propose('a', 'x');
    c.stabilize();
    c.addNode('d');
    // The transfer to b never finishes (its TimeoutNow is lost); d catches up meanwhile, when
    // a leader in a transfer does not promote.
    c.dropTypes.add('timeoutNow');
    c.isolate('d');
    c.raft('a').proposeConfChange({ type: 'addLearner', nodeId: 'd' });
    run(c, 3);
    expect(c.raft('a').transferLeadership('b')).toEqual({ ok: true });
    c.heal();
    run(c, 5);
    expect(c.raft('a').status().leadTransferee).toBe('b');
    expect(c.raft('a').status().progress.get('d')?.match).toBe(c.raft('a').status().commitIndex);
    run(c, c.electionTicks * 4);
    expect(c.raft('a').status()).toMatchObject({ role: 'leader', leadTransferee: null });
    expect(c.raft('a').status().config.voters).toEqual(['a', 'b', 'c', 'd']);
    expect(quietIds(c)).toEqual([...IDS, 'd']);
    c.assertSafe();
  });

  test('a quiet follower whose appends were lost stays behind a quiet leader until the driver says its node is back (memberBack)', () => {
    const c = quietGroup();
    expect(quietIds(c)).toEqual(IDS);
    // c's node drops out of reach: the append of y is lost, and the leader goes quiet again
    // without c (not heard from in its window), while c, quiet since x, hears nothing.
    c.isolate('c');
    c.propose('a', 'y');
    run(c, 40);
    expect(c.raft('a').isQuiet).toBe(true);
    c.heal();
    run(c, 500);
    expect(c.node('b').machine).toEqual(['x', 'y']);
    expect(c.node('c').machine).toEqual(['x']);
    // A member caught up is no reason to wake.
    c.raft('a').memberBack('b');
    expect(c.raft('a').isQuiet).toBe(true);
    // The driver hears from c's node again after a gap.
    c.raft('a').memberBack('c');
    expect(c.raft('a').isQuiet).toBe(false);
    run(c, 60);
    expect(c.node('c').machine).toEqual(['x', 'y']);
    expect(quietIds(c)).toEqual(IDS);
    c.assertSafe();
  });

  test('a quiet follower never notices its leader crash by itself; woken as the leader\'s node went silent, it elects within three election timeouts', () => {
    const c = quietGroup();
    c.crash('a');
    run(c, 200);
    expect(c.leader()).toBe(null);
    expect(quietIds(c)).toEqual(['b', 'c']);
    // The driver's node-level failure detector found a's node silent.
    c.raft('b').wake('a');
    c.raft('c').wake('a');
    let ticks = 0;
    while (c.leader() === null || c.leader() === 'a') {
      run(c, 1);
      ticks++;
      expect(ticks).toBeLessThanOrEqual(3 * c.electionTicks);
    }
    expect(['b', 'c']).toContain(c.leader());
    c.assertSafe();
  });

  test('with a first candidate chosen, the leader\'s loss is one election: the first wins its term at once, no split vote', () => {
    for (const first of ['b', 'c']) {
      const other = first === 'b' ? 'c' : 'b';
      const c = quietGroup();
      c.crash('a');
      run(c, 50);
      c.raft(first).leaderLost(true);
      // The other survivor finds the silence a little later (its beats' phase differs).
      run(c, 2);
      c.raft(other).leaderLost(false);
      expect(c.raft(other).status().leaderId).toBe(null);
      let ticks = 2;
      while (c.leader() !== first) {
        run(c, 1);
        ticks++;
        expect(ticks).toBeLessThanOrEqual(c.electionTicks);
      }
      expect(c.raft(first).status().term).toBe(2);
      expect(c.raft(other).status()).toMatchObject({ leaderId: first, term: 2 });
      c.assertSafe();
    }
  });

  test('a follower that is not quiet forgets a lost leader too, and one that leads or knows no leader ignores it', () => {
    const c = new TestCluster(IDS, { quiesce: true });
    c.elect('a');
    expect(c.raft('b').isQuiet).toBe(false);
    c.crash('a');
    c.raft('b').leaderLost(true);
    c.raft('c').leaderLost(false);
    run(c, c.electionTicks);
    expect(c.leader()).toBe('b');
    c.raft('b').leaderLost(true);
    expect(c.raft('b').status().role).toBe('leader');
    c.assertSafe();
  });

  test('a replica that still hears its leader drops the first candidate\'s pre-vote: a mistaken leaderLost disrupts nothing', () => {
    const c = quietGroup();
    c.raft('b').leaderLost(true);
    run(c, 5 * c.electionTicks);
    for (const id of IDS) expect(c.raft(id).status()).toMatchObject({ leaderId: 'a', term: 1 });
    c.assertSafe();
  });

  test('a quiet leader partitioned away steps down within an election timeout once woken, and the majority elects another', () => {
    const c = quietGroup();
    c.isolate('a');
    run(c, 100);
    expect(c.raft('a').status().role).toBe('leader'); // quiet: nothing tells it yet
    c.raft('a').wake('b');
    c.raft('b').wake('a');
    c.raft('c').wake('a');
    run(c, c.electionTicks + 1);
    expect(c.raft('a').status().role).not.toBe('leader');
    expect(c.raft('a').propose(new Uint8Array([1])).ok).toBe(false);
    run(c, 2 * c.electionTicks);
    expect(['b', 'c']).toContain(c.leader());
    c.assertSafe();
  });

  test('a quiet leader that still hears a majority stays leader when woken by a silent follower, and goes quiet again', () => {
    const c = quietGroup();
    c.crash('c');
    c.raft('a').wake('c');
    run(c, 3 * c.electionTicks);
    expect(c.raft('a').status()).toMatchObject({ role: 'leader', term: 1 });
    expect(c.raft('a').isQuiet).toBe(true);
  });

  test('a restarted replica (never quiet) wakes the leader with its first message and joins it without an election', () => {
    const c = quietGroup();
    c.crash('c');
    c.restart('c');
    expect(c.raft('c').isQuiet).toBe(false);
    run(c, 4 * c.electionTicks);
    for (const id of IDS) expect(c.raft(id).status()).toMatchObject({ leaderId: 'a', term: 1 });
    expect(quietIds(c)).toEqual(IDS);
    c.assertSafe();
  });

  test('a follower woken for no reason of its leader asks the leader to heartbeat again: no election', () => {
    const c = quietGroup();
    const before = c.delivered.length;
    c.raft('b').wake();
    expect(c.raft('b').isQuiet).toBe(false);
    run(c, 5 * c.electionTicks);
    for (const id of IDS) expect(c.raft(id).status()).toMatchObject({ leaderId: 'a', term: 1 });
    expect(quietIds(c)).toEqual(IDS);
    const after = c.delivered.slice(before);
    expect(after.filter((m) => m.type === 'preVote' || m.type === 'vote')).toEqual([]);
    // The ping, the leader's heartbeats and their answers, the quiesce round: then nothing.
    expect(after.length).toBeLessThanOrEqual(9);
  });

  test('answers slower than the heartbeat interval do not keep a group awake: a late answer to a heartbeat sent before the leader went quiet does not wake it', () => {
    const c = quietGroup();
    // Every heartbeat answer arrives three heartbeat intervals late (a loaded node).
    const late: { message: Message; at: number }[] = [];
    const released = new Set<Message>();
    let now = 0;
    c.filter = (m) => {
      if (m.type !== 'heartbeatResp' || released.has(m)) return true;
      late.push({ message: m, at: now + 3 });
      return false;
    };
    c.propose('a', 'y');
    const tickDelivering = (): void => {
      now += 1;
      c.tickAll();
      c.stabilize();
      for (const { message } of late.filter((l) => l.at <= now)) {
        released.add(message);
        c.deliver(message);
      }
      late.splice(0, late.length, ...late.filter((l) => l.at > now));
      c.stabilize();
    };
    for (let i = 0; i < 4 * c.electionTicks; i++) tickDelivering();
    expect(quietIds(c)).toEqual(IDS);
    const sent = c.delivered.length;
    for (let i = 0; i < 10 * c.electionTicks; i++) tickDelivering();
    expect(c.delivered.length - sent).toBe(0);
    for (const id of IDS) expect(c.node(id).machine).toEqual(['x', 'y']);
    for (const id of IDS) expect(c.raft(id).status()).toMatchObject({ leaderId: 'a', term: 1 });
  });

  test('after every member restarted, the first candidate of startupElection wins in one election and the others never campaign', () => {
    const c = quietGroup();
    const term = c.raft('a').status().term;
    for (const id of IDS) c.crash(id);
    for (const id of IDS) c.restart(id);
    for (const id of IDS) c.raft(id).startupElection(id === 'c');
    expect(c.raft('c').campaignDue).toBe(false);
    const before = c.delivered.length;
    run(c, c.electionTicks);
    expect(c.leader()).toBe('c');
    expect(c.raft('c').status().term).toBe(term + 1);
    const campaigns = c.delivered.slice(before).filter((m) => (m.type === 'preVote' || m.type === 'vote') && m.from !== 'c');
    expect(campaigns).toEqual([]);
    c.assertSafe();
  });

  test('campaignDue says when the next tick starts an election, and startupElection leaves a replica that knows its leader alone', () => {
    const c = quietGroup();
    c.raft('b').startupElection(true);
    expect(c.raft('b').status().leaderId).toBe('a');
    c.crash('a');
    c.raft('b').wake('a');
    let ticks = 0;
    while (!c.raft('b').campaignDue && ticks < 10 * c.electionTicks) {
      c.tick('b');
      ticks += 1;
    }
    expect(c.raft('b').campaignDue).toBe(true);
    expect(c.raft('b').campaigning).toBe(false);
    c.tick('b');
    expect(c.raft('b').campaigning).toBe(true);
  });

  test('a read wakes the leader and is confirmed by a quorum', () => {
    const c = quietGroup();
    expect(c.raft('a').readIndex('r1').ok).toBe(true);
    c.stabilize();
    expect(c.node('a').readStates.map((r) => r.requestId)).toEqual(['r1']);
    run(c, 10);
    expect(quietIds(c)).toEqual(IDS);
  });

  test('seeded runs with crashes, partitions and wake-ups of every silent member stay safe and keep electing', () => {
    for (let seed = 1; seed <= 30; seed++) {
      const c = new TestCluster(IDS, { quiesce: true }, seed);
      let step = 0;
      const random = (n: number): number => {
        step = (step * 1103515245 + 12345 + seed) & 0x7fffffff;
        return step % n;
      };
      c.runUntilLeader();
      for (let round = 0; round < 40; round++) {
        const leader = c.leader();
        if (leader !== null && random(2) === 0) c.raft(leader).propose(new TextEncoder().encode(`v${round}`));
        if (random(5) === 0) {
          const victim = IDS[random(3)]!;
          c.isolate(victim);
          run(c, c.electionTicks);
          // Every replica's driver wakes it for the member it no longer hears.
          for (const id of IDS) for (const other of IDS) if (id !== other && (id === victim || other === victim)) c.raft(id).wake(other);
        }
        run(c, 3 * c.electionTicks);
        c.heal();
        run(c, 3 * c.electionTicks);
        expect(c.leader()).not.toBe(null);
      }
      c.assertSafe();
    }
  });
});

describe('campaign now', () => {
  test('the preferred leader of a brand-new group wins at once, with a vote and no pre-vote', () => {
    const c = new TestCluster(IDS, { quiesce: true });
    c.raft('b').campaign();
    c.stabilize();
    expect(c.leader()).toBe('b');
    expect(c.raft('b').status().term).toBe(1);
    expect(c.delivered.filter((m) => m.type === 'preVote')).toEqual([]);
    c.assertSafe();
  });

  test('once a group had a term, campaigning now is a pre-vote that a follower with a live leader refuses', () => {
    const c = quietGroup();
    c.raft('b').campaign();
    c.stabilize();
    expect(c.leader()).toBe('a');
    expect(c.raft('a').status().term).toBe(1);
    c.assertSafe();
  });
});
