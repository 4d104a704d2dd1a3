import { MemoryKvStore, NodeStorage, NodeWalFs } from '@quorumq/storage';
import type { Entry, Message } from '@quorumq/raft';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';

import { BrokerError, Reason } from '../src/errors.js';
import { systemEnv } from '../src/node-env.js';
import { retriable } from '../src/proposal-router.js';
import { LEADER_INLINE_BYTES_MAX, RaftGroup, type GroupMachine } from '../src/raft-group.js';
import { Echo } from './echo-machine.js';

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

const turn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/** Applies entries as a list, and snapshots that list a step at a time (until `hold` is cleared). */
class SteppedList implements GroupMachine<string> {
  applied: string[] = [];
  snapshotsBegun: number[] = [];
  steps = 0;
  hold = true;
  apply(entry: Entry): string {
    const text = Buffer.from(entry.data).toString();
    if (text !== '') this.applied.push(text);
    return text;
  }
  snapshot(): Uint8Array {
    return Buffer.from(JSON.stringify(this.applied));
  }
  snapshotDue(): boolean {
    return this.applied.length >= 5 && this.snapshotsBegun.length === 0;
  }
  snapshotSteps(): { step(budget: number): Uint8Array | null } {
    this.snapshotsBegun.push(this.applied.length);
    const data = this.snapshot();
    return { step: () => (++this.steps, this.hold ? null : data) };
  }
  restore(data: Uint8Array): void {
    this.applied = JSON.parse(Buffer.from(data).toString()) as string[];
  }
}

/** The `send` of n1 whose peers vote for it and acknowledge every append (and do nothing else); `sent` records what went out. */
function votingPeers(group: () => RaftGroup<string> | null, sent: Message[] = []): (groupId: string, messages: readonly Message[]) => void {
  return (_groupId, messages) => {
    for (const m of messages) {
      sent.push(m);
      if (m.type === 'preVote' || m.type === 'vote') {
        const type = m.type === 'preVote' ? 'preVoteResp' : 'voteResp';
        setImmediate(() => group()?.receive({ type, from: m.to, to: m.from, term: m.term, reject: false }));
      }
      if (m.type === 'append') {
        const index = m.prevLogIndex + m.entries.length;
        setImmediate(() => group()?.receive({ type: 'appendResp', from: m.to, to: m.from, term: m.term, reject: false, index, hintIndex: 0, hintTerm: 0 }));
      }
    }
  };
}

/** What n1's peers do with what it sends (they see the group through `group`). */
type Peers = (group: () => RaftGroup<string> | null) => (groupId: string, messages: readonly Message[]) => void;

/** n1 of a three-voter group on `storage`, elected by `peers` (by default they vote for it and acknowledge every append). */
async function electedLeader(storage: NodeStorage, peers: Peers = (group) => votingPeers(group), knownMember?: (from: string) => boolean): Promise<RaftGroup<string>> {
  let group: RaftGroup<string> | null = null;
  const elected = new RaftGroup<string>({
    groupId: 'g',
    env: systemEnv,
    nodeId: 'n1',
    storage,
    machine: new Echo(),
    initialVoters: ['n1', 'n2', 'n3'],
    send: peers(() => group),
    onFatal: (error) => {
      throw error;
    },
    electionTicks: 10,
    heartbeatTicks: 1,
    ...(knownMember === undefined ? {} : { knownMember }),
  });
  group = elected;
  for (let i = 0; i < 200 && !elected.isLeader; i++) {
    elected.tick();
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  expect(elected.isLeader).toBe(true);
  return elected;
}

/** n1 of a three-voter group whose peers vote for it and then never answer an append. */
async function leaderWithoutQuorum(knownMember?: (from: string) => boolean): Promise<RaftGroup<string>> {
  const dir = mkdtempSync(join(tmpdir(), 'quorumq-group-'));
  dirs.push(dir);
  const storage = await NodeStorage.open({ dir, fs: new NodeWalFs(), kv: new MemoryKvStore() });
  const votesOnly: Peers = (group) => (_groupId, messages) => {
    for (const m of messages) {
      if (m.type === 'preVote' || m.type === 'vote') {
        const type = m.type === 'preVote' ? 'preVoteResp' : 'voteResp';
        setImmediate(() => group()?.receive({ type, from: m.to, to: m.from, term: m.term, reject: false }));
      }
    }
  };
  return electedLeader(storage, votesOnly, knownMember);
}

describe('a proposal with a deadline', () => {
  it('keeps applying while a snapshot is taken a step at a time, then saves the snapshot of the index it began at', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'quorumq-group-'));
    dirs.push(dir);
    const storage = await NodeStorage.open({ dir, fs: new NodeWalFs(), kv: new MemoryKvStore() });
    const machine = new SteppedList();
    const group = new RaftGroup<string>({
      groupId: 'g',
      env: systemEnv,
      nodeId: 'n1',
      storage,
      machine,
      initialVoters: ['n1'],
      send: () => undefined,
      onFatal: (error) => {
        throw error;
      },
      electionTicks: 10,
      heartbeatTicks: 1,
    });
    for (let i = 0; i < 200 && !group.isLeader; i++) {
      group.tick();
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    expect(group.isLeader).toBe(true);
    for (let i = 0; i < 5; i++) expect(await group.propose(Buffer.from(`m${i}`))).toBe(`m${i}`);
    await turn();
    expect(machine.snapshotsBegun).toEqual([5]);
    const began = group.appliedIndex;
    // Proposals are applied while the snapshot is being built, a step a turn.
    for (let i = 5; i < 20; i++) expect(await group.propose(Buffer.from(`m${i}`))).toBe(`m${i}`);
    expect(group.raft.currentSnapshot()).toBeNull();
    expect(machine.steps).toBeGreaterThan(10);
    machine.hold = false;
    for (let i = 0; i < 100 && group.raft.currentSnapshot() === null; i++) await turn();
    const taken = group.raft.currentSnapshot();
    expect(taken?.meta.index).toBe(began);
    expect(JSON.parse(Buffer.from(taken!.data).toString())).toEqual(['m0', 'm1', 'm2', 'm3', 'm4']);
    for (let i = 0; i < 500 && storage.restoreGroup('g').snapshot === null; i++) await new Promise((resolve) => setTimeout(resolve, 10));
    expect(storage.restoreGroup('g').snapshot?.meta.index).toBe(began);
    group.stop('test over');
    await storage.close();
  });

  it('fails a proposal in the log as OUTCOME_UNKNOWN when the group stops (the other members may still commit it), not as retriable', async () => {
    const group = await leaderWithoutQuorum();
    const outcome = group.propose(Buffer.from('ack')).then(
      () => null,
      (error: unknown) => error,
    );
    for (let i = 0; i < 20 && group.status().lastIndex < 2; i++) await turn();
    expect(group.status().lastIndex).toBe(2);
    group.stop('the replica was removed from this node');
    const error = await outcome;
    expect(error).toBeInstanceOf(BrokerError);
    expect((error as BrokerError).reason).toBe(Reason.OUTCOME_UNKNOWN);
    expect((error as BrokerError).message).toMatch(/the replica was removed from this node.*the outcome is unknown/);
    expect(retriable(error)).toBe(false);
    // A proposal made after it stopped never reached any log: that one may be made again.
    const later = await group.propose(Buffer.from('x')).catch((e: unknown) => e);
    expect((later as BrokerError).reason).toBe(Reason.GROUP_STOPPED);
    expect(retriable(later)).toBe(true);
  });

  it('fails a proposal as overwritten when a later proposal of this node takes its index', async () => {
    const group = await leaderWithoutQuorum();
    const term = group.status().term;
    const first = group.status().lastIndex + 1;
    const outcomes = ['a', 'b', 'c'].map((text) =>
      group.propose(Buffer.from(text)).then(
        () => 'committed',
        (error: unknown) => (error instanceof BrokerError ? error.reason : String(error)),
      ),
    );
    for (let i = 0; i < 5; i++) await turn();
    // A leader of the next term replaces them with one entry of its own: the log ends at `first`.
    group.receive({
      type: 'append',
      from: 'n2',
      to: 'n1',
      term: term + 1,
      prevLogIndex: first - 1,
      prevLogTerm: term,
      entries: [{ index: first, term: term + 1, type: 'normal', data: new Uint8Array(0) }],
      commit: 0,
    });
    for (let i = 0; i < 200 && group.isLeader; i++) await new Promise((resolve) => setTimeout(resolve, 5));
    expect(group.isLeader).toBe(false);
    // This node is elected again (its peers vote for it): its no-op lands at first + 1, the next
    // proposal at first + 2, where "c" was.
    for (let i = 0; i < 200 && !group.isLeader; i++) {
      group.tick();
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    expect(group.isLeader).toBe(true);
    expect(group.status().lastIndex).toBe(first + 1);
    void group.propose(Buffer.from('d')).catch(() => undefined);
    for (let i = 0; i < 5; i++) await turn();
    // "c" can never commit: it fails at once instead of waiting forever.
    const settled = await Promise.race([outcomes[2], new Promise((resolve) => setTimeout(() => resolve('pending'), 200))]);
    expect(settled).toBe(Reason.NOT_COMMITTED);
    group.stop('test over');
  });

  it('a leader whose disk is slow keeps sending heartbeats and appends while its Ready loop waits on a write', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'quorumq-group-'));
    dirs.push(dir);
    const real = await NodeStorage.open({ dir, fs: new NodeWalFs(), kv: new MemoryKvStore() });
    // Persists wait for `release` once `slow` is set.
    let slow = false;
    let release: () => void = () => undefined;
    const storage = Object.create(real) as NodeStorage;
    storage.persist = async (...args: Parameters<NodeStorage['persist']>) => {
      if (slow) await new Promise<void>((resolve) => (release = resolve));
      return real.persist(...args);
    };
    const sent: Message[] = [];
    const group = await electedLeader(storage, (g) => votingPeers(g, sent));
    slow = true;
    void group.propose(Buffer.from('first')).catch(() => undefined);
    for (let i = 0; i < 5; i++) await turn();
    sent.length = 0;
    // The write of "first" hangs. Ticks, and a proposal made meanwhile, still go out.
    void group.propose(Buffer.from('second')).catch(() => undefined);
    for (let i = 0; i < 5; i++) {
      group.tick();
      await turn();
    }
    expect(sent.filter((m) => m.type === 'heartbeat').length).toBeGreaterThanOrEqual(2 * 4);
    const appended = sent.flatMap((m) => (m.type === 'append' ? m.entries.map((e) => Buffer.from(e.data).toString()) : []));
    expect(appended).toContain('second');
    slow = false;
    release();
    group.stop('test over');
  });

  it('fails as OUTCOME_UNKNOWN on the first tick after its deadline, and not before', async () => {
    const group = await leaderWithoutQuorum();
    const now = Date.now();
    const outcome = group.propose(Buffer.from('x'), now + 1000, 'queue "q"').then(
      () => 'committed',
      (error: unknown) => error,
    );
    const noDeadline = group.propose(Buffer.from('y')).then(
      () => 'committed',
      () => 'failed',
    );
    group.tick(now + 999);
    await turn();
    let settled: unknown = null;
    void outcome.then((value) => (settled = value));
    await turn();
    expect(settled).toBeNull();
    group.tick(now + 1000);
    const error = await outcome;
    expect(error).toBeInstanceOf(BrokerError);
    expect((error as BrokerError).reason).toBe('OUTCOME_UNKNOWN');
    expect((error as BrokerError).message).toMatch(/queue "q" did not commit within the request timeout/);
    // Without a deadline it still waits (for a quorum, or for the group to stop).
    group.tick(now + 10 * 60_000);
    group.stop('test over');
    expect(await noDeadline).toBe('failed');
  });
});

describe('elections and leaders, counted for /metrics', () => {
  it('counts each campaign once (pre-vote and vote together) and each leader once per term, won here or learnt from another member', async () => {
    const group = await leaderWithoutQuorum();
    // Pre-vote, vote, won: one election; this node is the first leader it knows.
    expect(group.elections).toEqual({ started: 1, leaders: 1 });
    const { term, lastIndex } = group.status();
    const append = (appendTerm: number, prevLogIndex: number, prevLogTerm: number): boolean =>
      group.receive({
        type: 'append',
        from: 'n2',
        to: 'n1',
        term: appendTerm,
        prevLogIndex,
        prevLogTerm,
        entries: [{ index: prevLogIndex + 1, term: appendTerm, type: 'normal', data: new Uint8Array(0) }],
        commit: 0,
      });
    append(term + 1, lastIndex, term);
    for (let i = 0; i < 200 && group.leaderId !== 'n2'; i++) await new Promise((resolve) => setTimeout(resolve, 5));
    expect(group.leaderId).toBe('n2');
    expect(group.elections).toEqual({ started: 1, leaders: 2 });
    // More of the same leader in the same term is no new leader.
    append(term + 1, lastIndex + 1, term + 1);
    for (let i = 0; i < 5; i++) await turn();
    expect(group.elections).toEqual({ started: 1, leaders: 2 });
    // n2 goes silent: this node campaigns again and wins.
    for (let i = 0; i < 200 && !group.isLeader; i++) {
      group.tick();
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    expect(group.isLeader).toBe(true);
    expect(group.elections).toEqual({ started: 2, leaders: 3 });
    group.stop('test over');
  });
});

describe('a linearizable read (ReadIndex)', () => {
  it('is not served by a leader before an entry of its own term commits, and fails at its deadline', async () => {
    // Queue status reads with it: a leader just elected may not have applied what its
    // predecessor committed (a status read there counted 199 of 200 confirmed publishes).
    const group = await leaderWithoutQuorum();
    const now = Date.now();
    let served = false;
    const read = group.readIndex(now + 1000).then(
      () => (served = true),
      (error: unknown) => error,
    );
    group.tick(now + 999);
    await turn();
    await turn();
    expect(served).toBe(false);
    group.tick(now + 1000);
    const error = await read;
    expect(error).toBeInstanceOf(BrokerError);
    expect((error as BrokerError).reason).toBe('NO_QUORUM');
  });

  it('is refused at once by a replica that does not lead, and failed when its leader steps down', async () => {
    const group = await leaderWithoutQuorum();
    const pending = group.readIndex().then(
      () => 'served',
      (error: unknown) => (error as BrokerError).reason,
    );
    const term = group.raft.currentTerm;
    expect(group.receive({ type: 'heartbeat', from: 'n2', to: 'n1', term: term + 1, commit: 0, readSeq: 0, quiesce: false })).toBe(true);
    expect(await pending).toBe('NOT_LEADER');
    await expect(group.readIndex()).rejects.toMatchObject({ reason: 'NOT_LEADER' });
  });
});

describe('messages from outside the group', () => {
  it('a message whose sender is no member of the group is dropped: the term does not move', async () => {
    const group = await leaderWithoutQuorum();
    const term = group.raft.currentTerm;
    // n4 is no replica of this group (a peer of the node that replicates other groups).
    const forged: Message = { type: 'heartbeat', from: 'n4', to: 'n1', term: 1e12, commit: 0, readSeq: 0, quiesce: false };
    expect(group.receive(forged)).toBe(false);
    expect(group.receive({ ...forged, type: 'vote', lastLogIndex: 1e9, lastLogTerm: 1e9, leaderTransfer: true } as Message)).toBe(false);
    await turn();
    expect(group.raft.currentTerm).toBe(term);
    expect(group.isLeader).toBe(true);
    // A member's message of a higher term is stepped as ever.
    expect(group.receive({ ...forged, from: 'n2', term: term + 1 })).toBe(true);
    expect(group.raft.currentTerm).toBe(term + 1);
  });

  it('a member the directory names (the metadata) is heard though no configuration of the log names it yet', async () => {
    // A replica lagging behind a membership change: n4 was added and leads in a later term.
    const group = await leaderWithoutQuorum((from) => from === 'n4');
    const term = group.raft.currentTerm;
    const fromNewLeader: Message = { type: 'heartbeat', from: 'n4', to: 'n1', term: term + 1, commit: 0, readSeq: 0, quiesce: false };
    expect(group.receive(fromNewLeader)).toBe(true);
    expect(group.raft.currentTerm).toBe(term + 1);
    // Waiting 50 event-loop turns failed once in a loaded run of the suite (the leader was
    // still n1): wait on the clock instead.
    const deadline = Date.now() + 10_000;
    while (group.leaderId !== 'n4' && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 5));
    expect(group.leaderId).toBe('n4');
    // Still nobody else, and never a message in this node's own name.
    expect(group.receive({ ...fromNewLeader, from: 'n5', term: term + 5 })).toBe(false);
    expect(group.receive({ ...fromNewLeader, from: 'n1', term: term + 5 })).toBe(false);
    expect(group.raft.currentTerm).toBe(term + 1);
  });
});

describe('a hand-over of leadership', () => {
  it('a proposal made while the leader hands over waits, and commits when the hand-over fails (it was refused before)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'quorumq-group-'));
    dirs.push(dir);
    const storage = await NodeStorage.open({ dir, fs: new NodeWalFs(), kv: new MemoryKvStore() });
    // Peers that vote for n1 and acknowledge its appends, but never take over (TimeoutNow is lost).
    const group = await electedLeader(storage);
    expect(await group.propose(Buffer.from('before'))).toBe('before');
    expect(group.transferLeadership('n2')).toBe(true);
    expect(group.status().leadTransferee).toBe('n2');
    const during = group.propose(Buffer.from('during'), Date.now() + 10_000);
    let outcome: string | null = null;
    during.then(
      (reply) => (outcome = reply),
      (error: unknown) => (outcome = `failed: ${error instanceof Error ? error.message : String(error)}`),
    );
    await turn();
    // Not refused while the hand-over is under way.
    expect(outcome).toBeNull();
    // An election timeout later the hand-over is given up: the proposal goes in.
    for (let i = 0; i < 30 && outcome === null; i++) {
      group.tick();
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    expect(group.status().leadTransferee).toBeNull();
    expect(outcome).toBe('during');
    group.stop('test over');
    await storage.close();
  });
});

describe("a leader's own write", () => {
  it('goes on its loop after its appends left when small, on a pool thread when large', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'quorumq-group-'));
    dirs.push(dir);
    const real = await NodeStorage.open({ dir, fs: new NodeWalFs(), kv: new MemoryKvStore() });
    const events: string[] = [];
    const storage = Object.create(real) as NodeStorage;
    storage.persist = (...args: Parameters<NodeStorage['persist']>) => {
      const [, update, mode] = args;
      if (update.entries.length > 0) events.push(`persist ${mode} ${update.entries.map((e) => e.data.byteLength).join(',')}`);
      return real.persist(...args);
    };
    const group = await electedLeader(storage, (g) => {
      const acks = votingPeers(g);
      return (groupId, messages) => {
        if (messages.some((m) => m.type === 'append' && m.entries.some((e) => e.data.byteLength > 0))) events.push('append sent');
        acks(groupId, messages);
      };
    });
    events.length = 0;
    expect(await group.propose(Buffer.alloc(1024, 1))).toHaveLength(1024);
    expect(events.slice(0, 2)).toEqual(['append sent', 'persist inline 1024']);
    events.length = 0;
    const large = LEADER_INLINE_BYTES_MAX + 1;
    expect(await group.propose(Buffer.alloc(large, 2))).toHaveLength(large);
    expect(events.slice(0, 2)).toEqual(['append sent', `persist pooled ${large}`]);
    group.stop('test over');
    await real.close();
  });
});
