/** Log replication: batching, the pipelining window and fast back-tracking. */
import { describe, expect, test } from 'vitest';
import type { AppendMessage, Message, NodeId } from '../src/index.js';
import { TestCluster, entriesWithTerms } from './cluster.js';
import { enc, logTerms, run } from './helpers.js';

function appendsTo(c: TestCluster, to: NodeId): AppendMessage[] {
  return c.delivered.filter((m): m is AppendMessage => m.type === 'append' && m.to === to && m.entries.length > 0);
}

function bytesOf(m: AppendMessage): number {
  return m.entries.reduce((sum, e) => sum + e.data.byteLength, 0);
}

describe('batching', () => {
  test('appendEntriesMax caps the entries of one append', () => {
    const c = new TestCluster(['a', 'b', 'c'], { appendEntriesMax: 10 });
    c.elect('a');
    c.delivered = [];
    for (let i = 0; i < 25; i++) c.propose('a', `e${i}`);
    c.stabilize();
    const sizes = appendsTo(c, 'b').map((m) => m.entries.length);
    expect(sizes).toEqual([10, 10, 5]);
    // Consecutive batches, all sent in the same Ready (pipelined, not one per round trip).
    const firsts = appendsTo(c, 'b').map((m) => m.prevLogIndex);
    expect(firsts).toEqual([1, 11, 21]);
    run(c, 1);
    expect(c.node('b').machine).toHaveLength(25);
  });

  test('appendBytesMax caps the bytes of one append, yet an oversized entry is sent alone', () => {
    const c = new TestCluster(['a', 'b', 'c'], { appendBytesMax: 250 });
    c.elect('a');
    c.delivered = [];
    const sizes = [100, 100, 100, 100, 100, 1000, 100, 100];
    sizes.forEach((size, i) => c.propose('a', String(i).padEnd(size, '.')));
    c.stabilize();
    const batches = appendsTo(c, 'b');
    expect(batches.map((m) => m.entries.map((e) => e.data.byteLength))).toEqual([[100, 100], [100, 100], [100], [1000], [100, 100]]);
    for (const m of batches) if (m.entries.length > 1) expect(bytesOf(m)).toBeLessThanOrEqual(250);
    run(c, 1);
    expect(c.node('b').machine.map((s) => s.length)).toEqual(sizes);
  });

  test('proposals made between two Readys share one append per follower', () => {
    const c = new TestCluster(['a', 'b', 'c']);
    c.elect('a');
    for (const text of ['x', 'y', 'z']) c.propose('a', text);
    c.processReady();
    const appends = c.queue.filter((m): m is AppendMessage => m.type === 'append');
    expect(appends.map((m) => [m.to, m.entries.map((e) => e.index)])).toEqual([
      ['b', [2, 3, 4]],
      ['c', [2, 3, 4]],
    ]);
  });
});

describe('pipelining', () => {
  /** Holds b's acknowledgements back and tracks what is unacknowledged at every send. */
  function windowed(inflightAppendsMax: number): {
    c: TestCluster;
    held: Message[];
    release: (m: Message) => void;
    maxUnacked: () => number;
    unacked: () => number;
  } {
    const c = new TestCluster(['a', 'b', 'c'], { inflightAppendsMax, appendEntriesMax: 1 });
    c.elect('a');
    const held: Message[] = [];
    let releasing = false;
    c.filter = (m) => {
      if (m.from === 'b' && m.type === 'appendResp' && !releasing) {
        held.push(m);
        return false;
      }
      return true;
    };
    const sentLast: number[] = [];
    let acked = 0;
    let max = 0;
    const unacked = (): number => sentLast.filter((last) => last > acked).length;
    c.onReady = (id, ready) => {
      if (id !== 'a') return;
      for (const m of ready.messages) if (m.type === 'append' && m.to === 'b' && m.entries.length > 0) sentLast.push(m.entries.at(-1)!.index);
      max = Math.max(max, unacked());
    };
    c.onDeliver = (m, dropped) => {
      if (!dropped && m.type === 'appendResp' && m.from === 'b' && !m.reject) acked = Math.max(acked, m.index);
    };
    const release = (m: Message): void => {
      releasing = true;
      c.deliver(m);
      releasing = false;
    };
    return { c, held, release, maxUnacked: () => max, unacked };
  }

  test('never more than inflightAppendsMax unacknowledged appends to one follower; an ack reopens the window', () => {
    const { c, held, release, maxUnacked, unacked } = windowed(3);
    for (let i = 0; i < 10; i++) {
      c.propose('a', `e${i}`);
      c.stabilize();
    }
    expect(unacked()).toBe(3);
    expect(c.raft('a').status().progress.get('b')).toMatchObject({ state: 'replicate', inflight: 3 });
    expect(c.raft('c').status().lastIndex).toBe(11); // the other follower is not held back
    expect(c.raft('b').status().lastIndex).toBe(4);

    // Releasing one ack sends exactly one more append.
    expect(held.map((m) => m.type === 'appendResp' && m.index)).toEqual([2, 3, 4]);
    release(held.shift()!);
    c.processReady();
    expect(c.queue.filter((m) => m.type === 'append' && m.to === 'b')).toHaveLength(1);
    c.stabilize();
    expect(c.raft('b').status().lastIndex).toBe(5);
    expect(unacked()).toBe(3);

    // Heartbeats while the window is full do not add entries to it.
    run(c, 5);
    expect(maxUnacked()).toBe(3);

    c.filter = null;
    for (const m of held.splice(0)) c.queue.push(m);
    run(c, 3);
    expect(maxUnacked()).toBe(3);
    expect(c.node('b').machine).toHaveLength(10);
    expect(c.raft('a').status().progress.get('b')).toMatchObject({ match: 11, inflight: 0 });
  });

  test('a window filled with lost appends reopens once the follower answers a heartbeat (regression)', () => {
    const c = new TestCluster(['a', 'b', 'c'], { inflightAppendsMax: 4 });
    c.elect('a');
    c.isolate('c');
    for (let i = 0; i < 10; i++) {
      c.propose('a', `e${i}`);
      c.stabilize();
    }
    expect(c.raft('a').status().progress.get('c')).toMatchObject({ state: 'replicate', inflight: 4 });
    c.heal();
    run(c, 3);
    expect(c.node('c').machine).toHaveLength(10);
    c.assertSafe();
  });

  test('... and falls back to a snapshot when the lost entries were compacted meanwhile (regression)', () => {
    const c = new TestCluster(['a', 'b', 'c'], { inflightAppendsMax: 4, retainedEntriesAfterSnapshot: 1 });
    c.elect('a');
    c.isolate('c');
    for (let i = 0; i < 10; i++) {
      c.propose('a', `e${i}`);
      c.stabilize();
    }
    c.snapshot('a');
    expect(c.raft('a').status().firstIndex).toBe(11);
    c.heal();
    run(c, 3);
    expect(c.node('c').machine).toHaveLength(10);
    expect(c.node('c').durable.snapshot?.meta.index).toBe(11);
    c.assertSafe();
  });
});

describe('fast back-tracking', () => {
  /**
   * Leader `l` and `m` share one log, follower `f` another; `l` is elected and brings `f`
   * in line. Returns the number of rejected appends from f.
   */
  function sync(leaderTerms: number[], followerTerms: number[]): { rejections: number; c: TestCluster } {
    const c = new TestCluster(['l', 'm', 'f']);
    const term = Math.max(...leaderTerms, ...followerTerms);
    c.setDurable('l', { hardState: { term, vote: null, commit: 0 }, snapshot: null, entries: entriesWithTerms(leaderTerms) });
    c.setDurable('m', { hardState: { term, vote: null, commit: 0 }, snapshot: null, entries: entriesWithTerms(leaderTerms) });
    c.setDurable('f', { hardState: { term, vote: null, commit: 0 }, snapshot: null, entries: entriesWithTerms(followerTerms) });
    c.elect('l');
    run(c, 2);
    expect(logTerms(c.raft('f'))).toEqual(logTerms(c.raft('l')));
    expect(c.raft('f').entryAt(leaderTerms.length)?.data).toEqual(enc(`e${leaderTerms.length}@${leaderTerms.at(-1)}`));
    c.assertSafe();
    const rejections = c.delivered.filter((m) => m.type === 'appendResp' && m.from === 'f' && m.reject).length;
    return { rejections, c };
  }

  const times = (term: number, n: number): number[] => Array<number>(n).fill(term);

  test('a follower with a long divergent log converges in a few round trips', () => {
    const cases: Array<[string, number[], number[]]> = [
      ['follower has 900 extra entries of older terms', [...times(1, 3), ...times(4, 100), ...times(6, 100)], [...times(1, 3), ...times(2, 300), ...times(3, 300), ...times(5, 300)]],
      ['follower is 1000 entries behind', [...times(1, 3), ...times(2, 1000)], times(1, 3)],
      ['follower has a long tail of a term the leader never saw', [...times(1, 3), ...times(4, 50), ...times(6, 50)], [...times(1, 3), ...times(5, 400)]],
      ['follower diverges right after the first entry, over many terms', [1, ...times(7, 200)], [1, ...[2, 3, 4, 5, 6].flatMap((t) => times(t, 60))]],
    ];
    for (const [name, leader, follower] of cases) {
      const { rejections } = sync(leader, follower);
      // Without hints the leader would step back one entry per rejection: hundreds.
      expect(rejections, name).toBeLessThanOrEqual(3);
    }
  });

  test('hints carry the conflicting term so the leader skips a whole term per round trip', () => {
    const { c } = sync([...times(1, 3), ...times(4, 50), ...times(6, 50)], [...times(1, 3), ...times(5, 400)]);
    const rejections = c.delivered.filter((m) => m.type === 'appendResp' && m.from === 'f' && m.reject);
    expect(rejections.map((m) => m.type === 'appendResp' && [m.index, m.hintIndex, m.hintTerm])).toEqual([
      [103, 103, 5], // "my entry at 103 is of term 5": the leader jumps to its last entry of term <= 5 (53)
      [53, 3, 1], // "at 53 I have term 5 too; my last entry of term <= 4 is 3@1"
    ]);
  });
});

describe('replication', () => {
  test('a follower that restarts with an unpersisted tail gets it again', () => {
    const c = new TestCluster(['a', 'b', 'c']);
    c.elect('a');
    c.propose('a', 'x');
    c.processReady(); // a persists and sends
    c.deliverRound(); // b and c receive x but have not persisted it
    expect(c.raft('b').status()).toMatchObject({ lastIndex: 2, stableIndex: 1 });
    c.crash('b');
    c.restart('b');
    expect(c.raft('b').status().lastIndex).toBe(1);
    run(c, 3);
    expect(c.node('b').machine).toEqual(['x']);
    c.assertSafe();
  });

  test("the leader's own entries count toward commit only once durable", () => {
    const c = new TestCluster(['a', 'b', 'c']);
    c.elect('a');
    c.propose('a', 'x');
    // b persists and acknowledges x before the leader has persisted it.
    const ready = c.raft('a').ready();
    expect(ready.entries.map((e) => e.index)).toEqual([2]);
    for (const m of ready.messages) c.deliver(m);
    c.processNode(c.node('b'));
    for (const m of c.queue.splice(0)) c.deliver(m);
    expect(c.raft('a').status().progress.get('b')?.match).toBe(2);
    expect(c.raft('a').status().commitIndex).toBe(1);
    c.raft('a').advance(); // x is now durable on a
    expect(c.raft('a').status().commitIndex).toBe(2);
  });
});
