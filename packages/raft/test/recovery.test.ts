/**
 * A replica that lost durable state (its storage found damage and dropped what it could not
 * trust) restarts with a RecoveryMark: it neither votes nor campaigns until its durable log
 * holds an entry of the mark's term, which only a leader elected without it can give it.
 *
 * The scenario: a and b commit x while c is cut off; b then loses its log. With a gone, c
 * (which lacks x) asks b for its vote. An intact b would refuse (its log is newer); the
 * damaged b cannot tell, so only the recovery rule keeps c from leading without x.
 */
import { describe, expect, test } from 'vitest';
import type { PlantedBug } from '../src/index.js';
import { TestCluster } from './cluster.js';

function damagedVoterScenario(bugs: PlantedBug[]): TestCluster {
  const c = new TestCluster(['a', 'b', 'c'], { preVote: false, checkQuorum: false, testOnlyBugs: new Set(bugs) });
  c.elect('a');
  c.partition(['a', 'b'], ['c']);
  const index = c.propose('a', 'x');
  c.stabilize();
  expect(c.raft('a').status().commitIndex).toBe(index);
  const term = c.raft('b').status().term;
  // b's storage is damaged: it keeps nothing but a term above any it acted in.
  c.crash('b');
  c.restartRepaired('b', { hardState: { term: term + 1, vote: null, commit: 0 }, snapshot: null, entries: [] }, { term: term + 1 });
  c.crash('a');
  c.partition(['a'], ['b', 'c']);
  for (let round = 0; round < 5 && c.raft('c').status().role !== 'leader'; round++) {
    c.campaign('c');
    c.stabilize();
  }
  return c;
}

describe('a replica recovering from damaged storage', () => {
  test('does not vote: a candidate missing a committed entry cannot win with its help', () => {
    const c = damagedVoterScenario([]);
    expect(c.raft('b').status().recoveringUntilTerm).not.toBeNull();
    expect(c.raft('c').status().role).not.toBe('leader');
    expect(c.checker.violations).toEqual([]);
  });

  test('does not campaign, even when its election timeout runs out', () => {
    const c = damagedVoterScenario([]);
    c.tick('b', 10 * c.electionTicks);
    c.stabilize();
    expect(c.raft('b').status().role).toBe('follower');
    expect(c.raft('b').campaignDue).toBe(false);
  });

  test('with the planted bug recoveringVotes it votes as if intact, and the lost entry is caught', () => {
    const c = damagedVoterScenario(['recoveringVotes']);
    expect(c.raft('c').status().role).toBe('leader');
    c.propose('c', 'y');
    c.stabilize();
    expect(c.checker.violations.join('\n')).toMatch(/Leader Completeness|State Machine Safety/);
  });

  test('returns to normal once its durable log holds an entry of a leader elected without it', () => {
    const c = damagedVoterScenario([]);
    c.restart('a');
    c.heal();
    const leader = c.runUntilLeader();
    expect(leader).toBe('a'); // c lacks x and b does not vote: only a can win
    c.propose('a', 'z');
    c.stabilize();
    c.tick('a'); // a heartbeat carries the commit of z
    c.stabilize();
    const b = c.raft('b').status();
    expect(b.recoveringUntilTerm).toBeNull();
    expect(c.node('b').machine).toEqual(['x', 'z']);
    expect(c.checker.violations).toEqual([]);
    // Intact again: b votes, and with a gone b and c elect a leader that has x.
    c.crash('a');
    const next = c.runUntilLeader();
    expect(['b', 'c']).toContain(next);
    expect(c.node(next).machine).toContain('x');
    expect(c.checker.violations).toEqual([]);
  });

  test('asks the others for a leader when it hears from none: a leader of an older term steps down', () => {
    const c = new TestCluster(['a', 'b', 'c'], { quiesce: true });
    c.elect('a');
    c.propose('a', 'x');
    c.stabilize();
    // Idle: the group goes quiet, and a quiet leader sends nothing.
    for (let i = 0; i < 5; i++) {
      c.tickAll();
      c.stabilize();
    }
    expect(c.raft('a').isQuiet).toBe(true);
    const term = c.raft('a').status().term;
    c.crash('b');
    c.restartRepaired('b', { hardState: { term: term + 1, vote: null, commit: 0 }, snapshot: null, entries: [] }, { term: term + 1 });
    for (let i = 0; i < 20 * c.electionTicks && c.raft('b').recovering; i++) {
      c.tickAll();
      c.stabilize();
    }
    expect(c.raft('b').recovering).toBe(false);
    const leader = c.leader();
    expect(leader === 'a' || leader === 'c').toBe(true);
    expect(c.raft(leader!).status().term).toBeGreaterThan(term);
    expect(c.node('b').durable.entries.map((e) => e.term).at(-1)).toBeGreaterThan(term);
    expect(c.checker.violations).toEqual([]);
  });

  test('a restart while recovering keeps recovering (the storage keeps the mark)', () => {
    const c = damagedVoterScenario([]);
    const durable = c.node('b').durable;
    c.crash('b');
    c.restartRepaired('b', durable, { term: durable.hardState.term });
    expect(c.raft('b').recovering).toBe(true);
  });
});
