/** Local snapshots and compaction, and InstallSnapshot in chunks. */
import { describe, expect, test } from 'vitest';
import type { Message, SnapshotChunkMessage } from '../src/index.js';
import { TestCluster, encodeMachine, entriesWithTerms } from './cluster.js';
import { run } from './helpers.js';

const isChunk = (m: Message): m is SnapshotChunkMessage => m.type === 'snapshot';

describe('snapshots and compaction', () => {
  test('compaction keeps retainedEntriesAfterSnapshot entries: a slightly lagging follower gets entries, a far-behind one a snapshot', () => {
    const c = new TestCluster(['a', 'b', 'c', 'd', 'e'], { retainedEntriesAfterSnapshot: 5 });
    c.elect('a');
    c.isolate('e');
    for (let i = 0; i < 10; i++) c.propose('a', `v${i}`); // 2..11
    c.stabilize();
    c.partition(['a', 'b', 'c'], ['d'], ['e']);
    for (let i = 10; i < 13; i++) c.propose('a', `v${i}`); // 12..14
    c.stabilize();
    run(c, 1);
    const snapshot = c.snapshot('a');
    expect(snapshot.meta).toEqual({ index: 14, term: 1, config: { voters: ['a', 'b', 'c', 'd', 'e'], learners: [] } });
    expect(c.raft('a').status()).toMatchObject({ firstIndex: 10, lastIndex: 14 });
    expect(c.raft('a').entryAt(9)).toBeUndefined();
    expect(c.raft('a').entryAt(10)).toBeDefined();
    expect(c.raft('d').status().lastIndex).toBe(11);
    expect(c.raft('e').status().lastIndex).toBe(1);

    c.heal();
    c.delivered = [];
    run(c, 3);
    const chunkTargets = new Set(c.delivered.filter(isChunk).map((m) => m.to));
    expect(chunkTargets).toEqual(new Set(['e']));
    const expected = Array.from({ length: 13 }, (_, i) => `v${i}`);
    for (const id of ['b', 'c', 'd', 'e']) expect(c.node(id).machine).toEqual(expected);
    expect(c.node('e').durable.snapshot?.meta.index).toBe(14);
    expect(c.node('d').durable.snapshot).toBeNull();
    c.assertSafe();
  });

  test('compaction keeps no more than retainedBytesAfterSnapshot bytes of entries, whatever the count allows', () => {
    const c = new TestCluster(['a', 'b', 'c'], { retainedEntriesAfterSnapshot: 100, retainedBytesAfterSnapshot: 3 * 64 });
    c.elect('a');
    for (let i = 0; i < 10; i++) c.propose('a', 'x'.repeat(64)); // 2..11, 64 bytes of data each
    c.stabilize();
    run(c, 1);
    c.snapshot('a');
    // Three of the 64-byte entries fit the budget; the count alone would have kept them all.
    expect(c.raft('a').status()).toMatchObject({ firstIndex: 9, lastIndex: 11 });
    c.assertSafe();
  });

  test('a node restarts from its snapshot plus the entries after it', () => {
    const c = new TestCluster(['a', 'b', 'c'], { retainedEntriesAfterSnapshot: 1 });
    c.elect('a');
    for (let i = 0; i < 6; i++) c.propose('a', `v${i}`);
    c.stabilize();
    run(c, 1);
    c.snapshot('b');
    expect(c.node('b').durable.entries).toEqual([]);
    c.propose('a', 'after');
    c.stabilize();
    run(c, 1);
    c.crash('b');
    c.restart('b');
    const status = c.raft('b').status();
    expect(status).toMatchObject({ firstIndex: 8, lastIndex: 8, commitIndex: 8, appliedIndex: 7 });
    c.processReady();
    expect(c.node('b').machine).toEqual(['v0', 'v1', 'v2', 'v3', 'v4', 'v5', 'after']);
    c.assertSafe();
  });

  test('followers compact on their own and keep replicating', () => {
    const c = new TestCluster(['a', 'b', 'c'], { retainedEntriesAfterSnapshot: 0 });
    c.elect('a');
    for (let round = 0; round < 5; round++) {
      for (let i = 0; i < 3; i++) c.propose('a', `r${round}-${i}`);
      c.stabilize();
      run(c, 1);
      for (const id of ['a', 'b', 'c']) c.snapshot(id);
    }
    expect(c.raft('b').status().firstIndex).toBe(c.raft('b').status().lastIndex + 1);
    c.crash('c');
    c.restart('c');
    run(c, 2);
    for (const id of ['b', 'c']) expect(c.node(id).machine).toEqual(c.node('a').machine);
    expect(c.node('a').machine).toHaveLength(15);
    c.assertSafe();
  });
});

describe('InstallSnapshot in chunks', () => {
  /** c is cut off while a commits 30 commands, then a snapshots: c needs the snapshot. */
  function laggingFollower(overrides = {}): TestCluster {
    const c = new TestCluster(['a', 'b', 'c'], { snapshotChunkBytes: 16, retainedEntriesAfterSnapshot: 1, ...overrides });
    c.elect('a');
    c.isolate('c');
    for (let i = 0; i < 30; i++) c.propose('a', `value-${String(i).padStart(2, '0')}`);
    c.stabilize();
    run(c, 1);
    c.snapshot('a');
    return c;
  }

  const expectedMachine = Array.from({ length: 30 }, (_, i) => `value-${String(i).padStart(2, '0')}`);

  test('a snapshot at or below the commit index is acknowledged, never installed over the log', () => {
    const c = new TestCluster(['a', 'b', 'c']);
    c.setDurable('b', { hardState: { term: 2, vote: null, commit: 3 }, snapshot: null, entries: entriesWithTerms([1, 1, 2]) });
    const meta = { index: 2, term: 1, config: { voters: ['a', 'b', 'c'], learners: [] } };
    c.raft('b').step({ type: 'snapshot', from: 'a', to: 'b', term: 2, meta, offset: 0, totalBytes: 0, chunk: new Uint8Array(), done: true });
    expect(c.raft('b').status()).toMatchObject({ firstIndex: 1, commitIndex: 3, lastIndex: 3 });
    c.processReady();
    expect(c.node('b').durable.snapshot).toBeNull();
    expect(c.queue).toEqual([expect.objectContaining({ type: 'appendResp', reject: false, index: 3 })]);
  });

  test('the snapshot travels one chunk at a time and is installed only once complete', () => {
    const c = laggingFollower();
    const snapshot = c.node('a').durable.snapshot!;
    expect(snapshot.data.byteLength).toBeGreaterThan(16 * 10);
    c.heal();
    const trace: string[] = [];
    c.onDeliver = (m, dropped) => {
      if (dropped) return;
      if (isChunk(m)) {
        trace.push(`chunk ${m.offset}`);
        if (!m.done) expect(c.raft('c').status().lastIndex).toBe(1); // nothing installed yet
      }
      if (m.type === 'snapshotResp') trace.push(`ack ${m.nextOffset}`);
    };
    run(c, 2);
    const chunks = c.delivered.filter(isChunk);
    expect(chunks.length).toBe(Math.ceil(snapshot.data.byteLength / 16));
    chunks.forEach((m, i) => {
      expect(m.offset).toBe(i * 16);
      expect(m.chunk.byteLength).toBeLessThanOrEqual(16);
      expect(m.totalBytes).toBe(snapshot.data.byteLength);
      expect(m.done).toBe(i === chunks.length - 1);
    });
    // Strictly alternating: the next chunk leaves only after the previous one was acknowledged.
    const expectedTrace = chunks.flatMap((m, i) => (i < chunks.length - 1 ? [`chunk ${m.offset}`, `ack ${m.offset + 16}`] : [`chunk ${m.offset}`]));
    expect(trace).toEqual(expectedTrace);
    expect(c.node('c').durable.snapshot).toEqual(snapshot);
    expect(c.node('c').machine).toEqual(expectedMachine);
    expect(c.raft('a').status().progress.get('c')).toMatchObject({ state: 'replicate', match: 31 });
    c.assertSafe();
  });

  test('duplicated chunks are harmless and cause no extra sends', () => {
    const c = laggingFollower();
    const size = c.node('a').durable.snapshot!.data.byteLength;
    c.heal();
    const duplicated = new Set<Message>();
    c.filter = (m) => {
      if (isChunk(m) && !duplicated.has(m)) {
        duplicated.add(m);
        c.queue.push(m); // delivered once more, after everything else in flight
      }
      return true;
    };
    run(c, 5);
    expect(c.node('c').machine).toEqual(expectedMachine);
    expect(c.node('c').durable.snapshot?.data).toEqual(c.node('a').durable.snapshot?.data);
    // Every chunk arrived twice, was acknowledged twice, yet was sent once.
    expect(duplicated.size).toBe(Math.ceil(size / 16));
    expect(c.delivered.filter((m) => m.type === 'snapshotResp').length).toBe(2 * (duplicated.size - 1));
    c.assertSafe();
  });

  test('lost chunks are re-sent after a stall, stale and out-of-order chunks are ignored or rewound', () => {
    const c = laggingFollower();
    c.heal();
    const late: SnapshotChunkMessage[] = [];
    let lostOnce = false;
    c.filter = (m) => {
      if (!isChunk(m)) return true;
      if (m.offset === 32 && !lostOnce) {
        lostOnce = true;
        late.push(m); // lost now, turns up later
        return false;
      }
      if (m.offset === 80 && late.length === 1) late.push(m); // a copy that arrives out of order
      return true;
    };
    c.tick('a');
    c.stabilize();
    // The transfer stalls at offset 32 until the leader re-sends it an election timeout later.
    expect(c.raft('a').status().progress.get('c')?.state).toBe('snapshot');
    const stalledAt = c.delivered.filter(isChunk).length;
    expect(stalledAt).toBe(2);
    c.tick('a', c.electionTicks - 1);
    c.stabilize();
    expect(c.delivered.filter(isChunk).length).toBe(stalledAt);
    c.tick('a');
    c.stabilize();
    expect(c.node('c').machine).toEqual(expectedMachine);
    expect(late.map((m) => m.offset)).toEqual([32, 80]);

    // The late copies arrive after the installation: the snapshot is at or below c's
    // commit index, so they are answered as plain acknowledgements.
    for (const m of late) c.deliver(m);
    c.processReady();
    expect(c.queue.filter((m) => m.from === 'c').map((m) => m.type === 'appendResp' && m.index)).toEqual([31, 31]);
    c.assertSafe();
  });

  test('a chunk beyond what the follower holds is rejected and the leader rewinds to that offset', () => {
    const c = laggingFollower();
    c.heal();
    let chunks = 0;
    c.filter = (m) => !(isChunk(m) && ++chunks > 3); // three chunks arrive, then c crashes
    c.tick('a');
    c.stabilize();
    expect(c.raft('a').status().progress.get('c')?.state).toBe('snapshot');
    c.crash('c');
    c.restart('c'); // the partial snapshot was only in memory
    c.filter = null;
    c.tick('a', c.electionTicks); // the stalled chunk is re-sent at offset 48
    c.processReady();
    const resent = c.queue.find(isChunk);
    expect(resent?.offset).toBe(48);
    c.delivered = [];
    c.stabilize();
    const rejection = c.delivered.find((m) => m.type === 'snapshotResp');
    expect(rejection).toMatchObject({ reject: true, nextOffset: 0 });
    expect(c.delivered.filter(isChunk).map((m) => m.offset).slice(0, 3)).toEqual([48, 0, 16]);
    run(c, 1);
    expect(c.node('c').machine).toEqual(expectedMachine);
    c.assertSafe();
  });

  test('a leader change mid-transfer: the new leader starts its own snapshot, the old chunks are refused', () => {
    const c = laggingFollower();
    c.snapshot('b');
    const bSnapshot = c.node('b').durable.snapshot!;
    expect(bSnapshot.meta.index).toBe(31);
    c.heal();
    const held: SnapshotChunkMessage[] = [];
    let fromA = 0;
    c.filter = (m) => {
      if (isChunk(m) && m.from === 'a' && ++fromA > 4) {
        held.push(m);
        return false;
      }
      return true;
    };
    c.tick('a');
    c.stabilize();
    expect(fromA).toBe(5);
    c.crash('a');
    c.filter = null;
    const leader = c.runUntilLeader();
    expect(leader).toBe('b'); // c's log is too short to win
    run(c, 3);
    const fromB = c.delivered.filter((m): m is SnapshotChunkMessage => isChunk(m) && m.from === 'b');
    expect(fromB[0]).toMatchObject({ offset: 0, term: c.raft('b').status().term });
    expect(c.node('c').durable.snapshot?.meta).toEqual(bSnapshot.meta);
    expect(c.node('c').machine).toEqual(expectedMachine);

    // The old leader restarts and its old chunk (term 1) arrives: refused with the new term.
    c.restart('a');
    c.processReady();
    c.deliver(held[0]!);
    c.processReady();
    expect(c.queue).toEqual([expect.objectContaining({ type: 'appendResp', to: 'a', reject: true, term: c.raft('c').status().term })]);
    expect(c.node('c').durable.snapshot?.meta).toEqual(bSnapshot.meta);
    c.assertSafe();
  });

  test('a follower that installs a snapshot the leader has compacted past meanwhile gets the newer one (regression)', () => {
    const c = laggingFollower();
    c.heal();
    const held: SnapshotChunkMessage[] = [];
    c.filter = (m) => {
      if (isChunk(m) && m.done && held.length === 0) {
        held.push(m);
        return false;
      }
      return true;
    };
    c.tick('a');
    c.stabilize();
    expect(held).toHaveLength(1);
    for (let i = 0; i < 4; i++) c.propose('a', `late-${i}`);
    c.stabilize();
    c.snapshot('a');
    expect(c.raft('a').status().firstIndex).toBe(35);
    c.filter = null;
    c.deliver(held[0]!); // c installs the snapshot at 31: still behind the leader's log
    run(c, 30);
    expect(c.node('c').durable.snapshot?.meta.index).toBe(35);
    expect(c.node('c').machine).toEqual([...expectedMachine, 'late-0', 'late-1', 'late-2', 'late-3']);
    c.assertSafe();
  });

  test('the installed snapshot carries the membership', () => {
    const c = laggingFollower({ promoteLearners: false });
    c.isolate('c');
    c.addNode('d');
    c.isolate('d');
    expect(c.raft('a').proposeConfChange({ type: 'addLearner', nodeId: 'd' }).ok).toBe(true);
    c.stabilize();
    run(c, 1);
    c.snapshot('a');
    c.heal();
    run(c, 4);
    for (const id of ['c', 'd']) {
      expect(c.node(id).durable.snapshot?.meta.config).toEqual({ voters: ['a', 'b', 'c'], learners: ['d'] });
      expect(c.raft(id).status().config).toEqual({ voters: ['a', 'b', 'c'], learners: ['d'] });
      expect(c.node(id).machine).toEqual(expectedMachine);
    }
    expect(encodeMachine(c.node('d').machine)).toEqual(c.node('a').durable.snapshot?.data);
    c.assertSafe();
  });
});

describe('compact() when there is nothing to compact', () => {
  test('returns null at or below the newest snapshot, and while a leader\'s snapshot is being installed', () => {
    const c = new TestCluster(['a', 'b', 'c'], { retainedEntriesAfterSnapshot: 0 });
    c.elect('a');
    c.isolate('c');
    for (let i = 0; i < 6; i++) c.propose('a', `v${i}`);
    c.stabilize();
    run(c, 1);
    const snapshot = c.snapshot('a');
    expect(c.raft('a').compact(snapshot.meta.index, encodeMachine([]))).toBeNull();
    expect(c.raft('a').compact(snapshot.meta.index - 1, encodeMachine([]))).toBeNull();

    // c is behind the leader's first index: it receives the snapshot. Step the chunks in
    // by hand and stop before c's driver takes its Ready: the core already applied the
    // snapshot's index, but the driver's machine is still at its old index.
    c.heal();
    const machineIndex = c.raft('c').status().appliedIndex;
    for (let round = 0; round < 10 && c.raft('c').status().appliedIndex < snapshot.meta.index; round++) {
      c.tick('a');
      c.processReady();
      const batch = c.queue;
      c.queue = [];
      for (const message of batch) {
        if (message.to === 'c') c.raft('c').step(message);
        else c.deliver(message);
      }
    }
    expect(c.raft('c').status().appliedIndex).toBe(snapshot.meta.index);
    expect(machineIndex).toBeLessThan(snapshot.meta.index);
    // A driver snapshotting what its machine applied must not get a snapshot of the wrong index.
    expect(c.raft('c').compact(Math.max(machineIndex, 1), encodeMachine([]))).toBeNull();
    c.stabilize();
    expect(c.node('c').durable.snapshot?.meta.index).toBe(snapshot.meta.index);
    expect(c.node('c').machine).toEqual(['v0', 'v1', 'v2', 'v3', 'v4', 'v5']);
  });
});
