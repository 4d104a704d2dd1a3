/**
 * RaftNode.currentSnapshot() and replaceSnapshotData(): a state machine that snapshots
 * references to bytes kept elsewhere swaps the newest snapshot's data for another encoding of
 * the same state (the one a follower can install) before or while it is sent.
 */
import { describe, expect, test } from 'vitest';
import type { Message, SnapshotChunkMessage } from '../src/index.js';
import { TestCluster, decodeMachine } from './cluster.js';
import { run } from './helpers.js';

const isChunk = (m: Message): m is SnapshotChunkMessage => m.type === 'snapshot';
const encoder = new TextEncoder();

const expectedMachine = Array.from({ length: 30 }, (_, i) => `value-${String(i).padStart(2, '0')}`);

/** c is cut off while a commits 30 commands, then a snapshots (the test cluster's JSON encoding). */
function laggingFollower(): TestCluster {
  const c = new TestCluster(['a', 'b', 'c'], { snapshotChunkBytes: 16, retainedEntriesAfterSnapshot: 1 });
  c.elect('a');
  c.isolate('c');
  for (let i = 0; i < 30; i++) c.propose('a', `value-${String(i).padStart(2, '0')}`);
  c.stabilize();
  run(c, 1);
  c.snapshot('a');
  return c;
}

/** The same machine as `data`, encoded otherwise (indented JSON: longer, other bytes). */
function reencoded(data: Uint8Array): Uint8Array {
  return encoder.encode(JSON.stringify(decodeMachine(data), null, 2));
}

describe('replaceSnapshotData', () => {
  test('currentSnapshot() is the newest snapshot taken, or null before any', () => {
    const c = laggingFollower();
    expect(c.raft('c').currentSnapshot()).toBeNull();
    const current = c.raft('a').currentSnapshot();
    expect(current).toEqual(c.node('a').durable.snapshot);
    expect(current?.meta.index).toBe(31);
  });

  test('replaces only the newest snapshot, at its index', () => {
    const c = laggingFollower();
    const leader = c.raft('a');
    const original = leader.currentSnapshot()!;
    const other = reencoded(original.data);
    expect(leader.replaceSnapshotData(original.meta.index - 1, other)).toBe(false);
    expect(leader.replaceSnapshotData(original.meta.index + 1, other)).toBe(false);
    expect(leader.currentSnapshot()).toEqual(original);
    expect(c.raft('c').replaceSnapshotData(original.meta.index, other)).toBe(false); // c has none
    expect(c.raft('c').currentSnapshot()).toBeNull();
    expect(leader.replaceSnapshotData(original.meta.index, other)).toBe(true);
    expect(leader.currentSnapshot()).toEqual({ meta: original.meta, data: other });
  });

  test('a follower needing the snapshot installs the replaced data, its transfer restarted from the first chunk', () => {
    const c = laggingFollower();
    const original = c.raft('a').currentSnapshot()!;
    c.heal();
    // The snapshot's chunks do not leave until its data is replaced (as a queue group's driver does).
    c.filter = (m) => !isChunk(m);
    c.tick('a');
    c.stabilize();
    expect(c.raft('a').status().progress.get('c')?.state).toBe('snapshot');
    expect(c.delivered.filter(isChunk)).toEqual([]);

    const replaced = reencoded(original.data);
    expect(replaced.byteLength).toBeGreaterThan(original.data.byteLength);
    c.filter = null;
    c.delivered = [];
    expect(c.raft('a').replaceSnapshotData(original.meta.index, replaced)).toBe(true);
    run(c, 3);
    const chunks = c.delivered.filter(isChunk);
    expect(chunks[0]).toMatchObject({ offset: 0, totalBytes: replaced.byteLength });
    expect(chunks.every((m) => m.totalBytes === replaced.byteLength)).toBe(true);
    expect(chunks.length).toBe(Math.ceil(replaced.byteLength / 16));
    const installed = c.node('c').durable.snapshot;
    expect(installed?.meta).toEqual(original.meta);
    expect(Buffer.from(installed!.data)).toEqual(Buffer.from(replaced));
    expect(c.node('c').machine).toEqual(expectedMachine);
    expect(c.raft('a').status().progress.get('c')).toMatchObject({ state: 'replicate', match: 31 });
    c.assertSafe();
  });

  test('a transfer under way when the data is replaced delivers the replaced data, not a mix of the two', () => {
    const c = laggingFollower();
    const original = c.raft('a').currentSnapshot()!;
    c.heal();
    // Three chunks of the original data reach c, then the leader replaces it.
    let chunks = 0;
    c.filter = (m) => !(isChunk(m) && ++chunks > 3);
    c.tick('a');
    c.stabilize();
    expect(c.raft('a').status().progress.get('c')?.state).toBe('snapshot');
    expect(c.delivered.filter(isChunk).map((m) => m.offset)).toEqual([0, 16, 32]);

    const replaced = reencoded(original.data);
    c.filter = null;
    expect(c.raft('a').replaceSnapshotData(original.meta.index, replaced)).toBe(true);
    run(c, 5);
    const installed = c.node('c').durable.snapshot;
    expect(installed?.meta.index).toBe(original.meta.index);
    expect(Buffer.from(installed!.data).toString()).toBe(Buffer.from(replaced).toString());
    expect(c.node('c').machine).toEqual(expectedMachine);
    c.assertSafe();
  });

  test('a stalled transfer starts over with the newest snapshot, not the one it began with', () => {
    const c = laggingFollower();
    const first = c.raft('a').currentSnapshot()!;
    c.heal();
    // Nothing reaches c: its transfer of the first snapshot stalls.
    c.filter = (m) => !isChunk(m);
    c.tick('a');
    c.stabilize();
    expect(c.raft('a').status().progress.get('c')?.state).toBe('snapshot');
    for (let i = 30; i < 40; i++) c.propose('a', `value-${i}`);
    c.stabilize();
    c.snapshot('a');
    const newest = c.raft('a').currentSnapshot()!;
    expect(newest.meta.index).toBeGreaterThan(first.meta.index);
    // A driver may refuse to send an older snapshot's data (a queue's local form): the
    // re-sent transfer must be of the newest one.
    c.delivered = [];
    c.filter = (m) => !(isChunk(m) && m.meta.index !== newest.meta.index);
    run(c, 30);
    expect(c.delivered.filter(isChunk).length).toBeGreaterThan(0);
    expect(c.node('c').durable.snapshot?.meta.index).toBe(newest.meta.index);
    expect(c.raft('a').status().progress.get('c')?.state).toBe('replicate');
    c.assertSafe();
  });
});
