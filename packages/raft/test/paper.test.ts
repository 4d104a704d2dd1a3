/**
 * The safety properties of the Raft paper (Figure 3), each exercised in scenarios with
 * partitions, crashes, competing candidates and divergent logs, plus Figure 8 itself.
 *
 * The cluster's SafetyChecker (safety.ts) watches every tick, step and Ready; tests both
 * assert on the concrete state of the scenario and that the checker saw no violation.
 * Planted bugs (`testOnlyBugs`) show that the assertions fail when the property breaks.
 */
import { describe, expect, test } from 'vitest';
import type { Message, PlantedBug } from '../src/index.js';
import { TestCluster, entriesWithTerms } from './cluster.js';
import { chaos, enc, logTerms, run, termsWithTwoLeaders } from './helpers.js';

const isAppend = (m: Message): boolean => m.type === 'append' || m.type === 'heartbeat' || m.type === 'snapshot';

describe('Election Safety: at most one leader can be elected in a given term', () => {
  test('competing candidates split the vote: no leader in that term, then exactly one', () => {
    const c = new TestCluster(['a', 'b', 'c', 'd'], { preVote: false });
    c.campaign('a');
    c.campaign('b');
    expect(c.raft('a').status()).toMatchObject({ role: 'candidate', term: 1 });
    expect(c.raft('b').status()).toMatchObject({ role: 'candidate', term: 1 });
    // c hears a first, d hears b first: 2 votes each out of 4, a quorum is 3.
    const first = c.queue.filter((m) => (m.from === 'a' && m.to === 'c') || (m.from === 'b' && m.to === 'd'));
    c.queue = [...first, ...c.queue.filter((m) => !first.includes(m))];
    c.stabilize();
    expect(c.checker.leadersByTerm.get(1)).toBeUndefined();
    expect(c.raft('c').status().vote).toBe('a');
    expect(c.raft('d').status().vote).toBe('b');
    // Each saw two rejections out of four voters: the election is lost for both.
    expect(c.raft('a').status()).toMatchObject({ role: 'follower', term: 1 });
    expect(c.raft('b').status()).toMatchObject({ role: 'follower', term: 1 });

    // Randomized timeouts break the tie in a later term.
    const leader = c.runUntilLeader();
    expect(c.raft(leader).status().term).toBeGreaterThan(1);
    expect(termsWithTwoLeaders(c)).toEqual([]);
    c.assertSafe();
  });

  test('a deposed leader in a minority partition coexists with the new one only in an older term', () => {
    const c = new TestCluster(['a', 'b', 'c', 'd', 'e'], { checkQuorum: false });
    c.elect('a');
    c.partition(['a', 'b'], ['c', 'd', 'e']);
    run(c, 40);
    const newLeader = ['c', 'd', 'e'].find((id) => c.raft(id).status().role === 'leader');
    expect(newLeader).toBeDefined();
    // Two nodes believe they lead, but in different terms.
    expect(c.raft('a').status()).toMatchObject({ role: 'leader', term: 1 });
    expect(c.raft(newLeader!).status().term).toBeGreaterThan(1);
    c.heal();
    run(c, 5);
    expect(c.raft('a').status().role).toBe('follower');
    expect(termsWithTwoLeaders(c)).toEqual([]);
    c.assertSafe();
  });

  /**
   * b votes for a in term 1 and restarts; c then asks b for its vote in term 1. A correct
   * node remembers its durable vote; with `forgetVoteOnRestart` it votes again.
   */
  function voteTwiceScenario(bugs: PlantedBug[]): TestCluster {
    const c = new TestCluster(['a', 'b', 'c'], { preVote: false, checkQuorum: false, testOnlyBugs: new Set(bugs) });
    c.partition(['a', 'b'], ['c']);
    // a's log must not reach b, or b would refuse c for having an older log.
    c.filter = (m) => !(m.from === 'a' && isAppend(m));
    c.campaign('a');
    c.stabilize();
    expect(c.raft('a').status()).toMatchObject({ role: 'leader', term: 1 });
    expect(c.node('b').durable.hardState).toMatchObject({ term: 1, vote: 'a' });
    c.crash('b');
    c.restart('b');
    c.partition(['a'], ['b', 'c']);
    c.campaign('c');
    expect(c.raft('c').status()).toMatchObject({ role: 'candidate', term: 1 });
    c.stabilize();
    return c;
  }

  test('a voter that crashes and restarts remembers its vote: no second leader in the term', () => {
    const c = voteTwiceScenario([]);
    expect(c.raft('b').status().vote).toBe('a');
    expect(c.raft('c').status().role).toBe('candidate');
    expect(c.checker.leadersByTerm.get(1)).toEqual(new Set(['a']));
    // c wins a later term once it times out again.
    c.campaign('c');
    c.stabilize();
    expect(c.raft('c').status()).toMatchObject({ role: 'leader', term: 2 });
    expect(c.checker.violations).toEqual([]);
  });

  test('with forgetVoteOnRestart the same scenario elects two leaders in one term (caught)', () => {
    const c = voteTwiceScenario(['forgetVoteOnRestart']);
    expect(c.raft('a').status()).toMatchObject({ role: 'leader', term: 1 });
    expect(c.raft('c').status()).toMatchObject({ role: 'leader', term: 1 });
    expect(termsWithTwoLeaders(c)).toEqual([1]);
    expect(c.checker.violations).toContain('Election Safety: term 1 has leaders a, c');
  });
});

describe('Leader Append-Only: a leader never overwrites or deletes entries in its log', () => {
  test('a leader back-tracking followers with longer, conflicting logs keeps its own log', () => {
    const c = new TestCluster(['a', 'b', 'c', 'd', 'e'], { checkQuorum: false });
    c.elect('a');
    for (let i = 0; i < 3; i++) c.propose('a', `base${i}`);
    c.stabilize();
    // a (still leader in term 1) keeps appending in a minority: b gets a long term-1 tail.
    c.partition(['a', 'b'], ['c', 'd', 'e']);
    for (let i = 0; i < 10; i++) c.propose('a', `stale${i}`);
    c.stabilize();
    c.elect('c');
    c.propose('c', 'fresh');
    c.stabilize();
    // d leads term 3 with a log shorter than a's and b's.
    c.partition(['a', 'b', 'd', 'e'], ['c']);
    const staleLast = c.raft('a').status().lastIndex;
    c.elect('d');
    const atElection = logTerms(c.raft('d'));
    expect(c.raft('d').status().lastIndex).toBeLessThan(staleLast);
    for (let i = 0; i < 5; i++) {
      c.propose('d', `d${i}`);
      c.stabilize();
    }
    // The stale leader c rejoins and keeps sending appends of term 2 until it learns of term 3.
    c.heal();
    run(c, 3);
    expect(c.leader()).toBe('d');
    const now = logTerms(c.raft('d'));
    expect(now.slice(0, atElection.length)).toEqual(atElection);
    expect(now.length).toBe(atElection.length + 5);
    // The followers' conflicting entries were the ones replaced.
    expect(logTerms(c.raft('a'))).toEqual(now);
    expect(logTerms(c.raft('b'))).toEqual(now);
    c.assertSafe();
  });
});

describe('Log Matching: logs with an entry of the same index and term are identical up to it', () => {
  test('rotating partitions with minority leaders create divergent logs that converge', () => {
    const ids = ['a', 'b', 'c', 'd', 'e'];
    const c = new TestCluster(ids, { checkQuorum: false, electionTicks: 5 });
    c.elect('a');
    const groups: string[][][] = [
      [['a', 'b'], ['c', 'd', 'e']],
      [['c', 'a'], ['b', 'd', 'e']],
      [['a', 'e'], ['b', 'c', 'd']],
      [['b', 'c'], ['a', 'd', 'e']],
    ];
    let divergedSomewhere = false;
    let n = 0;
    for (const [minority, majority] of groups) {
      c.partition(minority!, majority!);
      // Whoever leads proposes on both sides; only the majority side commits.
      for (let round = 0; round < 30; round++) {
        for (const node of c.liveNodes()) if (node.raft.status().role === 'leader') node.raft.propose(enc(`p${n++}`));
        c.tickAll();
        c.stabilize();
      }
      const lasts = ids.map((id) => `${c.raft(id).status().lastIndex}@${c.raft(id).status().lastTerm}`);
      if (new Set(lasts).size > 1) divergedSomewhere = true;
      c.checkLogMatching();
      c.crash(minority![0]!);
      c.restart(minority![0]!);
    }
    expect(divergedSomewhere).toBe(true);
    c.heal();
    run(c, 30);
    const reference = logTerms(c.raft('a'));
    for (const id of ids) expect(logTerms(c.raft(id))).toEqual(reference);
    c.assertSafe();
  });

  test('a follower refuses entries whose predecessor does not match its log', () => {
    const c = new TestCluster(['a', 'b']);
    c.setDurable('b', { hardState: { term: 2, vote: null, commit: 0 }, snapshot: null, entries: entriesWithTerms([1, 2]) });
    const before = logTerms(c.raft('b'));
    c.raft('b').step({ type: 'append', from: 'a', to: 'b', term: 3, prevLogIndex: 2, prevLogTerm: 3, entries: entriesWithTerms([3], 3), commit: 0 });
    expect(logTerms(c.raft('b'))).toEqual(before);
    c.processReady();
    expect(c.queue).toEqual([expect.objectContaining({ type: 'appendResp', reject: true, index: 2 })]);
  });
});

describe('Leader Completeness: a committed entry is present in the logs of all later leaders', () => {
  /**
   * X is committed by a, b, c while d and e are cut off; a crashes. d and e, whose logs
   * lack X, try to become leader.
   */
  function laggingCandidates(bugs: PlantedBug[]): { c: TestCluster; xIndex: number } {
    const c = new TestCluster(['a', 'b', 'c', 'd', 'e'], { checkQuorum: false, testOnlyBugs: new Set(bugs) });
    c.elect('a');
    c.partition(['a', 'b', 'c'], ['d', 'e']);
    const xIndex = c.propose('a', 'X');
    c.stabilize();
    expect(c.raft('a').status().commitIndex).toBe(xIndex);
    c.crash('a');
    c.heal();
    c.campaign('d');
    c.stabilize();
    return { c, xIndex };
  }

  test('candidates missing a committed entry cannot win; the elected leader has it', () => {
    const { c, xIndex } = laggingCandidates([]);
    expect(c.raft('d').status().role).not.toBe('leader');
    c.campaign('e');
    c.stabilize();
    expect(c.raft('e').status().role).not.toBe('leader');
    const leader = c.runUntilLeader();
    expect(['b', 'c']).toContain(leader);
    expect(c.raft(leader).entryAt(xIndex)?.data).toEqual(enc('X'));
    run(c, 3);
    for (const id of ['b', 'c', 'd', 'e']) expect(c.node(id).machine).toEqual(['X']);
    c.assertSafe();
  });

  test('with voteWithoutLogCheck a candidate missing a committed entry wins (caught)', () => {
    const { c, xIndex } = laggingCandidates(['voteWithoutLogCheck']);
    expect(c.raft('d').status().role).toBe('leader');
    expect(c.raft('d').entryAt(xIndex)?.data).not.toEqual(enc('X'));
    expect(c.checker.violations.some((v) => v.startsWith(`Leader Completeness: entry ${xIndex}`))).toBe(true);
  });
});

describe('State Machine Safety: no two servers apply different entries at the same index', () => {
  test('through crashes, restarts, snapshots and leader changes every server applies the same sequence', () => {
    const ids = ['a', 'b', 'c'];
    const c = new TestCluster(ids, { retainedEntriesAfterSnapshot: 2, snapshotChunkBytes: 32 });
    c.elect('a');
    let n = 0;
    for (let phase = 0; phase < 6; phase++) {
      const leader = c.runUntilLeader();
      for (let i = 0; i < 5; i++) c.propose(leader, `cmd${n++}`);
      c.stabilize();
      const victim = ids[phase % 3]!;
      c.crash(victim);
      for (let i = 0; i < 5; i++) {
        const l = c.runUntilLeader();
        c.propose(l, `cmd${n++}`);
        c.stabilize();
      }
      c.snapshot(c.runUntilLeader());
      c.restart(victim);
      run(c, 3);
    }
    run(c, 5);
    const expected = Array.from({ length: n }, (_, i) => `cmd${i}`);
    for (const id of ids) expect(c.node(id).machine).toEqual(expected);
    // The applied entries of each incarnation agree index by index.
    for (const a of ids) for (const b of ids) {
      const byIndex = new Map(c.node(b).applied.map((e) => [e.index, `${e.term}:${Buffer.from(e.data).toString()}`]));
      for (const e of c.node(a).applied) {
        const other = byIndex.get(e.index);
        if (other !== undefined) expect(other).toBe(`${e.term}:${Buffer.from(e.data).toString()}`);
      }
    }
    c.assertSafe();
  });
});

describe('all five properties hold in randomized runs (partitions, crashes, lost/duplicated/reordered messages)', () => {
  const variants = [
    ['pre-vote and check-quorum', {}, true],
    ['no pre-vote', { preVote: false }, true],
    ['no check-quorum', { checkQuorum: false }, true],
    // Without either, a removed server that missed its removal disrupts elections forever
    // (dissertation 4.2.3), so that variant does no membership changes.
    ['neither', { preVote: false, checkQuorum: false }, false],
  ] as const;
  for (const [name, overrides, membership] of variants) {
    test(name, () => {
      let leaderChanges = 0;
      let crashes = 0;
      for (let seed = 1; seed <= 12; seed++) {
        const { cluster, ...stats } = chaos({ seed, steps: 1200, overrides, membership });
        leaderChanges += stats.leaderChanges;
        crashes += stats.crashes;
        expect(cluster.checker.violations, `seed ${seed}`).toEqual([]);
        // Liveness after healing: one leader, every member caught up with the same state.
        const leader = cluster.leader();
        expect(leader, `seed ${seed}`).not.toBeNull();
        const status = cluster.raft(leader!).status();
        for (const id of [...status.config.voters, ...status.config.learners]) {
          expect(cluster.raft(id).status().commitIndex, `seed ${seed} ${id}`).toBe(status.commitIndex);
          expect(cluster.node(id).machine, `seed ${seed} ${id}`).toEqual(cluster.node(leader!).machine);
        }
      }
      expect(leaderChanges).toBeGreaterThan(12 * 3);
      expect(crashes).toBeGreaterThan(12);
    });
  }
});

/**
 * Figure 8 of the paper, with five servers s1..s5. Leaders append a no-op when elected,
 * which is what puts the figure's entries in the log: 1@1 and 2@2 are s1's no-ops, 2@3
 * is s5's and 3@4 is s1's in term 4. appendEntriesMax=1 lets s1 send index 2 without 3.
 *
 *   (a) s1 leads term 2 and replicates 2@2 to s2 only.
 *   (b) s1 crashes; s5 is elected in term 3 by s3, s4 and itself, and appends 2@3.
 *   (c) s5 crashes; s1 restarts, is elected in term 4 and replicates 2@2 to s3. 2@2 is
 *       now on s1, s2, s3 - a majority - yet it must not be committed.
 * (The leader learns that s2 has index 2 only when s2 acknowledges 3@4, so s2 also holds
 * 3@4 here; the figure leaves s2 at [1, 2]. s5 then needs s3 and s4 rather than s2.)
 */
function figure8(bugs: PlantedBug[]): TestCluster {
  const c = new TestCluster(['s1', 's2', 's3', 's4', 's5'], {
    preVote: false,
    checkQuorum: false,
    appendEntriesMax: 1,
    testOnlyBugs: new Set(bugs),
  });
  c.elect('s1');
  expect(logTerms(c.raft('s3'))).toEqual(['1@1']);

  // (a)
  c.crash('s1');
  c.restart('s1');
  c.filter = (m) => !(m.from === 's1' && isAppend(m) && m.to !== 's2');
  c.campaign('s1');
  c.stabilize();
  expect(c.raft('s1').status()).toMatchObject({ role: 'leader', term: 2 });
  expect(logTerms(c.raft('s1'))).toEqual(['1@1', '2@2']);
  expect(logTerms(c.raft('s2'))).toEqual(['1@1', '2@2']);
  expect(logTerms(c.raft('s3'))).toEqual(['1@1']);

  // (b)
  c.crash('s1');
  c.filter = (m) => !(m.from === 's5' && isAppend(m));
  c.campaign('s5');
  c.stabilize();
  expect(c.raft('s5').status()).toMatchObject({ role: 'leader', term: 3 });
  expect(c.raft('s2').status().vote).toBeNull(); // s2's log was more up to date
  expect(logTerms(c.raft('s5'))).toEqual(['1@1', '2@3']);

  // (c)
  c.crash('s5');
  c.restart('s1');
  c.filter = (m) => {
    if (m.from !== 's1' || !isAppend(m)) return true;
    if (m.to === 's4') return false;
    // 3@4 reaches no one but s2 (s3 may see it only in appends it will reject).
    if (m.to === 's3' && m.type === 'append' && m.entries.some((e) => e.term === 4)) {
      return c.raft('s3').termAt(m.prevLogIndex) !== m.prevLogTerm;
    }
    return true;
  };
  c.campaign('s1');
  c.stabilize();
  expect(c.raft('s1').status()).toMatchObject({ role: 'candidate', term: 3 }); // s3, s4 voted for s5
  c.campaign('s1');
  c.stabilize();
  expect(c.raft('s1').status()).toMatchObject({ role: 'leader', term: 4 });
  expect(logTerms(c.raft('s1'))).toEqual(['1@1', '2@2', '3@4']);
  expect(logTerms(c.raft('s2'))).toEqual(['1@1', '2@2', '3@4']);
  expect(logTerms(c.raft('s3'))).toEqual(['1@1', '2@2']);
  expect(logTerms(c.raft('s4'))).toEqual(['1@1']);
  expect(logTerms(c.raft('s5'))).toEqual(['1@1', '2@3']);
  expect(c.raft('s1').status().progress.get('s3')?.match).toBe(2);
  return c;
}

/** (d) s1 crashes; s5 restarts, is elected in term 5 by s3 and s4, and replicates its log. */
function figure8d(c: TestCluster): void {
  c.crash('s1');
  c.restart('s5');
  c.filter = null;
  c.campaign('s5');
  c.stabilize();
  expect(c.raft('s5').status()).toMatchObject({ role: 'follower', term: 4 }); // everyone voted in term 4
  c.campaign('s5');
  c.stabilize();
  expect(c.raft('s5').status()).toMatchObject({ role: 'leader', term: 5 });
}

describe('Figure 8: a leader cannot determine commitment using log entries from older terms', () => {
  test('2@2 on a majority is not committed by counting, and is safely overwritten by s5', () => {
    const c = figure8([]);
    expect(c.raft('s1').status().commitIndex).toBe(1);
    figure8d(c);
    c.tick('s5');
    c.stabilize();
    for (const id of ['s2', 's3', 's4', 's5']) {
      expect(logTerms(c.raft(id))).toEqual(['1@1', '2@3', '3@5']);
      expect(c.raft(id).status().commitIndex).toBe(3);
    }
    c.assertSafe();
  });

  test('(e) once s1 replicates an entry of its own term on a majority, both commit and s5 cannot win', () => {
    const c = figure8([]);
    c.filter = (m) => !(m.from === 's1' && m.to === 's4'); // only s2 and s3 help
    c.tick('s1'); // a heartbeat round makes s1 resend 3@4 to s3
    c.stabilize();
    expect(c.raft('s1').status().commitIndex).toBe(3);
    c.tick('s1');
    c.stabilize(); // heartbeats carry the commit index
    expect(c.raft('s3').status().commitIndex).toBe(3);
    c.crash('s1');
    c.restart('s5');
    c.filter = null;
    for (let i = 0; i < 3; i++) {
      c.campaign('s5');
      c.stabilize();
      expect(c.raft('s5').status().role).not.toBe('leader');
    }
    const leader = c.runUntilLeader();
    expect(['s2', 's3']).toContain(leader);
    run(c, 3);
    for (const id of ['s2', 's3', 's4', 's5']) expect(logTerms(c.raft(id)).slice(0, 3)).toEqual(['1@1', '2@2', '3@4']);
    c.assertSafe();
  });

  test('with commitPreviousTermByCount s1 commits 2@2 by counting, then s5 overwrites it (caught)', () => {
    const c = figure8(['commitPreviousTermByCount']);
    expect(c.raft('s1').status().commitIndex).toBe(2);
    c.processReady();
    expect(c.node('s1').applied.map((e) => `${e.index}@${e.term}`)).toContain('2@2');
    figure8d(c);
    run(c, 2);
    expect(c.node('s3').applied.map((e) => `${e.index}@${e.term}`)).toContain('2@3');
    expect(c.checker.violations).toEqual(
      expect.arrayContaining([
        'Leader Completeness: entry 2 (term 2) committed in term 4 is term 3 in the log of s5, leader of term 5',
        expect.stringMatching(/^State Machine Safety: .*index 2/),
      ]),
    );
  });
});
