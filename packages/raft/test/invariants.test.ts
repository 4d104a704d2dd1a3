/**
 * Assertions that stay on (RaftInvariantError), and self-tests of the safety checker:
 * each check of safety.ts must report a violation when shown one.
 */
import { describe, expect, test } from 'vitest';
import { RaftInvariantError, RaftNode, createRandom } from '../src/index.js';
import type { Entry, RaftStatus, RestoredState } from '../src/index.js';
import { TestCluster, entriesWithTerms } from './cluster.js';
import { SafetyChecker } from './safety.js';
import type { Observable } from './safety.js';

function node(restored: Partial<RestoredState> = {}, options = {}): RaftNode {
  return new RaftNode(
    { id: 'a', random: createRandom(1), initialConfig: { voters: ['a', 'b', 'c'], learners: [] }, ...options },
    { hardState: { term: 0, vote: null, commit: 0 }, snapshot: null, entries: [], ...restored },
  );
}

function expectInvariant(fn: () => unknown, message: RegExp): void {
  let thrown: unknown;
  try {
    fn();
  } catch (error) {
    thrown = error;
  }
  expect(thrown).toBeInstanceOf(RaftInvariantError);
  expect((thrown as RaftInvariantError).code).toBe('RAFT_INVARIANT');
  expect((thrown as Error).message).toMatch(message);
}

describe('invariant assertions fire', () => {
  test('stepping a message addressed to another node', () => {
    const c = new TestCluster(['a', 'b', 'c']);
    expectInvariant(
      () => c.raft('a').step({ type: 'heartbeat', from: 'b', to: 'c', term: 1, commit: 0, readSeq: 0, quiesce: false }),
      /message for c stepped into a/,
    );
  });

  test('ready() twice without advance(), and advance() without ready()', () => {
    const c = new TestCluster(['a', 'b', 'c']);
    c.campaign('a');
    c.tick('a', 30);
    c.raft('a').ready();
    expect(c.raft('a').hasReady()).toBe(false); // nothing new is handed out meanwhile
    expectInvariant(() => c.raft('a').ready(), /ready\(\) called again before advance\(\)/);
    c.raft('a').advance();
    expectInvariant(() => c.raft('a').advance(), /advance\(\) without an outstanding ready\(\)/);
  });

  test('compacting beyond the applied index', () => {
    const c = new TestCluster(['a', 'b', 'c']);
    c.elect('a');
    c.propose('a', 'x');
    expectInvariant(() => c.raft('a').compact(2, new Uint8Array()), /cannot snapshot at 2: applied is 1/);
  });

  test('a leader receiving an append from another leader of its own term', () => {
    const c = new TestCluster(['a', 'b', 'c']);
    c.elect('a');
    expectInvariant(
      () => c.raft('a').step({ type: 'append', from: 'b', to: 'a', term: 1, prevLogIndex: 0, prevLogTerm: 0, entries: [], commit: 0 }),
      /two leaders in term 1: a and b/,
    );
  });

  test('a corrupt durable state is refused at restart', () => {
    const gap: Entry[] = [...entriesWithTerms([1]), ...entriesWithTerms([1], 3)];
    expectInvariant(() => node({ entries: gap }), /not contiguous at 3/);
    expectInvariant(() => node({ entries: entriesWithTerms([2, 1]) }), /lower term than its predecessor/);
    expectInvariant(() => node({ hardState: { term: 1, vote: null, commit: 5 }, entries: entriesWithTerms([1, 1]) }), /restored commit 5 beyond last index 2/);
  });

  test('a heartbeat interval not below the election timeout', () => {
    expectInvariant(() => node({}, { electionTicks: 3, heartbeatTicks: 3 }), /heartbeatTicks must be below electionTicks/);
  });
});

/** A scripted stand-in for a node, to feed the checker states a correct core never reaches. */
class Stub implements Observable {
  constructor(
    public id: string,
    public terms: number[],
    public term = 1,
    public role: RaftStatus['role'] = 'follower',
    public commitIndex = 0,
    public firstIndex = 1,
  ) {}
  status(): RaftStatus {
    return {
      id: this.id,
      term: this.term,
      vote: null,
      role: this.role,
      leaderId: null,
      commitIndex: this.commitIndex,
      appliedIndex: 0,
      stableIndex: this.terms.length,
      firstIndex: this.firstIndex,
      lastIndex: this.terms.length,
      lastTerm: this.terms.at(-1) ?? 0,
      config: { voters: [], learners: [] },
      leadTransferee: null,
      progress: new Map(),
      recoveringUntilTerm: null,
    };
  }
  termAt(index: number): number | undefined {
    return index === 0 ? 0 : this.terms[index - 1];
  }
  entryAt(index: number): Entry | undefined {
    const term = this.terms[index - 1];
    return term === undefined ? undefined : { index, term, type: 'normal', data: new TextEncoder().encode(`${this.id}${index}`) };
  }
}

describe('the safety checker reports what it is shown', () => {
  test('Election Safety', () => {
    const checker = new SafetyChecker();
    checker.observe(new Stub('a', [1], 1, 'leader'));
    checker.observe(new Stub('b', [1], 2, 'leader'));
    expect(checker.violations).toEqual([]);
    checker.observe(new Stub('c', [1], 2, 'leader'));
    expect(checker.violations).toEqual(['Election Safety: term 2 has leaders b, c']);
  });

  test('Leader Append-Only', () => {
    const checker = new SafetyChecker();
    const leader = new Stub('a', [1, 1, 1], 1, 'leader');
    checker.observe(leader);
    leader.terms = [1, 1, 1, 1];
    checker.observe(leader);
    expect(checker.violations).toEqual([]);
    leader.terms = [1, 1];
    checker.observe(leader);
    leader.terms = [1, 1, 2, 2, 2];
    checker.observe(leader);
    expect(checker.violations).toEqual([
      'Leader Append-Only: a (leader of term 1) shrank its log from 4 to 2',
      'Leader Append-Only: a (leader of term 1) changed entry 3 from term 1 to 2',
      'Leader Append-Only: a (leader of term 1) changed entry 4 from term 1 to 2',
    ]);
  });

  test('Log Matching', () => {
    const checker = new SafetyChecker();
    checker.checkLogMatching([new Stub('a', [1, 1]), new Stub('a', [1, 1, 2])]); // same data where terms agree
    expect(checker.violations).toEqual([]);
    checker.checkLogMatching([new Stub('a', [1, 1, 2]), new Stub('b', [1, 1, 2])]); // different data
    expect(checker.violations).toEqual(['Log Matching: a and b agree on entry 3 but differ at 3']);
  });

  test('Leader Completeness', () => {
    const checker = new SafetyChecker();
    checker.observe(new Stub('a', [1, 1], 1, 'leader', 2));
    checker.observe(new Stub('b', [1, 2, 2], 2, 'leader'));
    checker.observe(new Stub('c', [1], 3, 'leader', 0, 3)); // compacted: covered by a snapshot
    expect(checker.violations).toEqual(['Leader Completeness: entry 2 (term 1) committed in term 1 is term 2 in the log of b, leader of term 2']);
  });

  test('State Machine Safety', () => {
    const checker = new SafetyChecker();
    checker.observe(new Stub('a', [1, 1], 1, 'follower', 2));
    checker.observe(new Stub('b', [1, 2], 2, 'follower', 2));
    const entry = (term: number, text: string): Entry => ({ index: 1, term, type: 'normal', data: new TextEncoder().encode(text) });
    checker.onApply('a', entry(1, 'x'));
    checker.onApply('b', entry(1, 'x'));
    checker.onApply('c', entry(1, 'y'));
    expect(checker.violations).toEqual([
      'State Machine Safety: entry 2 committed with term 1 on a but term 2 on b',
      'State Machine Safety: a applied 1/normal/78 at index 1 but c applied 1/normal/79',
    ]);
  });
});
