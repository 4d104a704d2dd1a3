/**
 * RaftOptions.holdReceivedSnapshots: a follower holds a snapshot it received in full until
 * its driver prepared what the snapshot needs on that node (a queue's message bytes,
 * fetched from the sender), then installs it with the data the driver gives, or drops it.
 */
import { describe, expect, test } from 'vitest';
import type { Message, SnapshotChunkMessage } from '../src/index.js';
import { TestCluster, decodeMachine } from './cluster.js';
import { run } from './helpers.js';

const isChunk = (m: Message): m is SnapshotChunkMessage => m.type === 'snapshot';
const encoder = new TextEncoder();
const values = (from: number, to: number): string[] => Array.from({ length: to - from }, (_, i) => `value-${String(from + i).padStart(2, '0')}`);

/** c is cut off while a commits 30 commands, then a snapshots; every node holds received snapshots (unless `hold` is false). */
function laggingFollower(hold = true): TestCluster {
  const c = new TestCluster(['a', 'b', 'c'], { snapshotChunkBytes: 16, retainedEntriesAfterSnapshot: 1, holdReceivedSnapshots: hold });
  c.elect('a');
  c.isolate('c');
  for (const value of values(0, 30)) c.propose('a', value);
  c.stabilize();
  run(c, 1);
  c.snapshot('a');
  c.heal();
  return c;
}

/** The same machine as `data`, encoded otherwise (indented JSON: other bytes). */
function reencoded(data: Uint8Array): Uint8Array {
  return encoder.encode(JSON.stringify(decodeMachine(data), null, 2));
}

describe('holdReceivedSnapshots', () => {
  test('the follower holds the complete snapshot, installs nothing, and ignores chunks sent again meanwhile', () => {
    const c = laggingFollower();
    run(c, 3);
    const held = c.raft('c').receivedSnapshot;
    const sent = c.raft('a').currentSnapshot()!;
    expect(held?.meta).toEqual(sent.meta);
    expect(Buffer.from(held!.data)).toEqual(Buffer.from(sent.data));
    expect(c.node('c').durable.snapshot).toBeNull();
    expect(c.node('c').machine).toEqual([]);
    expect(c.raft('a').status().progress.get('c')?.state).toBe('snapshot');
    // The leader's transfer stalls and it sends again: c answers nothing while it holds one.
    c.delivered = [];
    run(c, 25);
    const resent = c.delivered.filter(isChunk);
    expect(resent.length).toBeGreaterThan(0);
    expect(c.delivered.filter((m) => m.from === 'c' && (m.type === 'snapshotResp' || m.type === 'appendResp'))).toEqual([]);
    expect(c.raft('c').receivedSnapshot).toBe(held);
    c.assertSafe();
  });

  test('installReceivedSnapshot installs the data the driver gives and the follower catches up', () => {
    const c = laggingFollower();
    run(c, 3);
    const held = c.raft('c').receivedSnapshot!;
    const prepared = reencoded(held.data);
    expect(c.raft('c').installReceivedSnapshot(held.meta.index - 1, prepared)).toBe(false);
    expect(c.raft('c').receivedSnapshot).toBe(held);
    expect(c.raft('c').installReceivedSnapshot(held.meta.index, prepared)).toBe(true);
    expect(c.raft('c').receivedSnapshot).toBeNull();
    c.propose('a', 'after');
    run(c, 3);
    expect(Buffer.from(c.node('c').durable.snapshot!.data)).toEqual(Buffer.from(prepared));
    expect(c.node('c').machine).toEqual([...values(0, 30), 'after']);
    expect(c.raft('a').status().progress.get('c')).toMatchObject({ state: 'replicate' });
    c.assertSafe();
  });

  test('a held snapshot is not installed once another leader was elected; the new one sends its own', () => {
    const c = laggingFollower();
    run(c, 3);
    const held = c.raft('c').receivedSnapshot!;
    expect(c.raft('a').transferLeadership('b').ok).toBe(true);
    c.stabilize();
    expect(c.leader()).toBe('b');
    expect(c.raft('c').installReceivedSnapshot(held.meta.index, held.data)).toBe(false);
    expect(c.raft('c').receivedSnapshot).toBeNull();
    expect(c.node('c').durable.snapshot).toBeNull();
    // b has every entry (a compacted only its own log): it brings c up by entries or a snapshot.
    run(c, 3);
    const next = c.raft('c').receivedSnapshot;
    if (next !== null) expect(c.raft('c').installReceivedSnapshot(next.meta.index, next.data)).toBe(true);
    c.propose('b', 'after');
    run(c, 3);
    expect(c.node('c').machine).toEqual([...values(0, 30), 'after']);
    c.assertSafe();
  });

  test('a dropped snapshot is sent again, and the transfer starts over with the newest snapshot the leader took', () => {
    const c = laggingFollower();
    run(c, 3);
    const first = c.raft('c').receivedSnapshot!;
    // The leader goes on and snapshots again meanwhile.
    for (const value of values(30, 40)) c.propose('a', value);
    c.stabilize();
    c.snapshot('a');
    const newest = c.raft('a').currentSnapshot()!;
    expect(newest.meta.index).toBeGreaterThan(first.meta.index);
    c.raft('c').dropReceivedSnapshot(first.meta.index);
    expect(c.raft('c').receivedSnapshot).toBeNull();
    run(c, 30);
    const again = c.raft('c').receivedSnapshot!;
    expect(again.meta.index).toBe(newest.meta.index);
    expect(c.raft('c').installReceivedSnapshot(again.meta.index, again.data)).toBe(true);
    run(c, 3);
    expect(c.node('c').machine).toEqual(values(0, 40));
    c.assertSafe();
  });

  test('without the option a follower installs the snapshot as soon as its last chunk arrives', () => {
    const c = laggingFollower(false);
    run(c, 3);
    expect(c.raft('c').receivedSnapshot).toBeNull();
    expect(c.node('c').machine).toEqual(values(0, 30));
    c.assertSafe();
  });
});
