/**
 * Membership in the metadata machine (cluster-nodes.ts, queue-membership.ts): nodes added and
 * removed, queues grown, shrunk, moved to a replacement, their preferred leaders rebalanced;
 * applied the same on every replica, checked like any metadata command, carried by
 * snapshots. And the leader's next configuration step (member-changes.ts).
 */
import type { Entry, RaftStatus } from '@quorumq/raft';
import { describe, expect, it } from 'vitest';

import { ClusterDirectory, INTRODUCED_MAX } from '../src/cluster-directory.js';
import { removalTold } from '../src/cluster-nodes.js';
import { encodeJson } from '../src/json-codec.js';
import { losesMajorityWithout } from '../src/membership-admin.js';
import { nextConfigStep } from '../src/member-changes.js';
import { decodeMetaCommand } from '../src/meta-command.js';
import { MetaMachine, type MetaCommand } from '../src/meta-machine.js';

const SEED = [
  { id: 'n1', peerAddress: 'h1:8001' },
  { id: 'n2', peerAddress: 'h2:8001' },
  { id: 'n3', peerAddress: 'h3:8001' },
];

function machine(): { meta: MetaMachine; apply: (command: MetaCommand) => ReturnType<MetaMachine['apply']>; changed: Array<string | null>; nodeChanges: () => number } {
  const changed: Array<string | null> = [];
  let nodeChanges = 0;
  const meta = new MetaMachine(
    (name) => changed.push(name),
    () => nodeChanges++,
  );
  let index = 0;
  const apply = (command: MetaCommand) => meta.apply({ index: ++index, term: 1, type: 'normal', data: encodeJson(command) } satisfies Entry);
  return { meta, apply, changed, nodeChanges: () => nodeChanges };
}

function withQueues(): ReturnType<typeof machine> {
  const m = machine();
  m.apply({ type: 'declareQueue', name: 'a', args: {}, passive: false, members: ['n1', 'n2', 'n3'] });
  m.apply({ type: 'declareQueue', name: 'b', args: {}, passive: false, members: ['n2', 'n3'] });
  m.apply({ type: 'declareQueue', name: 'solo', args: {}, passive: false, members: ['n1'] });
  return m;
}

describe('nodes', () => {
  it('the first command seeds the registry from the proposer; a node is added once; a removed id never comes back', () => {
    const m = withQueues();
    expect(m.meta.nodes.managed).toBe(false);
    expect(m.apply({ type: 'addNode', id: 'n4', peerAddress: 'h4:8001', seed: SEED })).toMatchObject({ ok: true, changed: true });
    expect(m.meta.nodes.managed).toBe(true);
    expect([...m.meta.nodes.all()].map((n) => `${n.id}:${n.state}`)).toEqual(['n1:active', 'n2:active', 'n3:active', 'n4:active']);
    expect(m.apply({ type: 'addNode', id: 'n4', peerAddress: 'h4:8001' })).toMatchObject({ ok: true, changed: false });
    expect(m.apply({ type: 'addNode', id: 'n4', peerAddress: 'other:8001' })).toMatchObject({ ok: false, code: 'FAILED_PRECONDITION' });
    // A later seed changes nothing.
    m.apply({ type: 'addNode', id: 'n5', peerAddress: 'h5:8001', seed: [{ id: 'x', peerAddress: 'x:1' }] });
    expect(m.meta.nodes.get('x')).toBeUndefined();
    m.apply({ type: 'removeNode', id: 'n5' });
    m.apply({ type: 'nodeRemoved', id: 'n5' });
    expect(m.meta.nodes.get('n5')?.state).toBe('removed');
    expect(m.apply({ type: 'addNode', id: 'n5', peerAddress: 'h5:8001' })).toMatchObject({ ok: false, code: 'FAILED_PRECONDITION' });
    expect(m.nodeChanges()).toBeGreaterThanOrEqual(3);
  });

  it('removing a node moves each replica to the replacement at the same place, or shrinks it away; the last replica is refused', () => {
    const m = withQueues();
    m.apply({ type: 'addNode', id: 'n4', peerAddress: 'h4:8001', seed: SEED });
    expect(m.apply({ type: 'removeNode', id: 'n1' })).toMatchObject({ ok: false, code: 'FAILED_PRECONDITION', reason: 'MEMBERSHIP_REFUSED' });
    expect(m.meta.nodes.get('n1')?.state).toBe('active');
    expect(m.meta.queues.get('a')?.members).toEqual(['n1', 'n2', 'n3']);
    expect(m.apply({ type: 'removeNode', id: 'n1', replacement: 'n1' })).toMatchObject({ ok: false, code: 'INVALID_ARGUMENT' });
    expect(m.apply({ type: 'removeNode', id: 'n1', replacement: 'n9' })).toMatchObject({ ok: false, code: 'FAILED_PRECONDITION' });
    expect(m.apply({ type: 'removeNode', id: 'n1', replacement: 'n4' })).toMatchObject({ ok: true, changed: true });
    expect(m.meta.queues.get('a')).toMatchObject({ members: ['n4', 'n2', 'n3'], retiring: ['n1'], initialMembers: ['n1', 'n2', 'n3'] });
    expect(m.meta.queues.get('solo')).toMatchObject({ members: ['n4'], retiring: ['n1'] });
    expect(m.meta.queues.get('b')?.retiring).toBeUndefined();
    expect(m.meta.nodes.get('n1')?.state).toBe('removing');
    // Without a replacement: shrinks.
    expect(m.apply({ type: 'removeNode', id: 'n3' })).toMatchObject({ ok: true });
    expect(m.meta.queues.get('b')).toMatchObject({ members: ['n2'], retiring: ['n3'] });
    // New queues never go to a node being removed.
    m.apply({ type: 'declareQueue', name: 'c', args: {}, passive: false, members: ['n1', 'n2', 'n3'] });
    expect(m.meta.queues.get('c')?.members).toEqual(['n2']);
    expect(m.apply({ type: 'removeNode', id: 'n9' })).toMatchObject({ ok: false, code: 'NOT_FOUND', reason: 'NODE_NOT_FOUND' });
  });

  it('the directory follows the registry: removed nodes go, the configured addresses win', () => {
    const m = withQueues();
    const directory = new ClusterDirectory('n1', new Map([['n1', 'local1:8001'], ['n2', 'local2:8001'], ['n3', 'local3:8001']]));
    const seen: string[] = [];
    directory.onChange((added, removed) => seen.push(`+${added.join(',')} -${removed.join(',')}`));
    expect(directory.seed()).toHaveLength(3);
    // A joining node proposing (its metadata replica no member yet) leaves itself out of the seed.
    expect(directory.seed(false)?.map((node) => node.id)).toEqual(['n2', 'n3']);
    m.apply({ type: 'addNode', id: 'n4', peerAddress: 'h4:8001', seed: SEED });
    directory.refresh(m.meta.nodes);
    expect(directory.ids()).toEqual(['n1', 'n2', 'n3', 'n4']);
    expect(directory.peerAddress('n2')).toBe('local2:8001');
    expect(directory.peerAddress('n4')).toBe('h4:8001');
    expect(directory.seed()).toBeUndefined();
    m.apply({ type: 'removeNode', id: 'n3', replacement: 'n4' });
    directory.refresh(m.meta.nodes);
    expect(directory.has('n3')).toBe(true);
    expect(directory.activeIds()).toEqual(['n1', 'n2', 'n4']);
    m.apply({ type: 'nodeRemoved', id: 'n3' });
    directory.refresh(m.meta.nodes);
    expect(directory.has('n3')).toBe(false);
    expect(seen).toEqual(['+n4 -', '+ -n3']);
  });

  it('a node the registry here does not name may introduce itself until the registry names it; a removed one may not', () => {
    // This node was away (or repaired its metadata log) while n4 joined and n2 left: its
    // registry names n1, n2, n3 only, and n4 may lead the metadata now.
    const m = withQueues();
    const directory = new ClusterDirectory('n3', new Map([['n1', 'h1:8001'], ['n2', 'h2:8001'], ['n3', 'h3:8001']]));
    const seen: string[] = [];
    directory.onChange((added, removed) => seen.push(`+${added.join(',')} -${removed.join(',')}`));
    expect(directory.introduce('n3', 'h3:9999')).toBe(false);
    expect(directory.introduce('n1', 'elsewhere:1')).toBe(true);
    expect(directory.peerAddress('n1')).toBe('h1:8001');
    expect(directory.introduce('n4', 'h4:8001')).toBe(true);
    expect(directory.has('n4')).toBe(true);
    expect(directory.isIntroduced('n4')).toBe(true);
    expect(directory.names('n4')).toBe(false);
    expect(directory.names('n1')).toBe(true);
    expect(directory.peerAddress('n4')).toBe('h4:8001');
    // Reachable, but no place for replicas and no seed of a membership command.
    expect(directory.activeIds()).toEqual(['n1', 'n2', 'n3']);
    expect(directory.seed()?.map((node) => node.id)).toEqual(['n1', 'n2', 'n3']);
    // A registry that does not name it yet keeps it.
    m.apply({ type: 'addNode', id: 'n5', peerAddress: 'h5:8001', seed: SEED });
    directory.refresh(m.meta.nodes);
    expect(directory.ids()).toEqual(['n1', 'n2', 'n3', 'n4', 'n5']);
    expect(directory.isIntroduced('n4')).toBe(true);
    // Once the registry names it, the registry's record holds.
    m.apply({ type: 'addNode', id: 'n4', peerAddress: 'h4:8001' });
    directory.refresh(m.meta.nodes);
    expect(directory.isIntroduced('n4')).toBe(false);
    expect(directory.names('n4')).toBe(true);
    expect(directory.activeIds()).toEqual(['n1', 'n2', 'n3', 'n4', 'n5']);
    // A node the registry removed cannot come back by introducing itself.
    m.apply({ type: 'removeNode', id: 'n2', replacement: 'n4' });
    m.apply({ type: 'nodeRemoved', id: 'n2' });
    directory.refresh(m.meta.nodes);
    expect(directory.has('n2')).toBe(false);
    expect(directory.introduce('n2', 'h2:8001')).toBe(false);
    expect(directory.has('n2')).toBe(false);
    // An introduced node the registry then removes goes.
    expect(directory.introduce('n6', 'h6:8001')).toBe(true);
    m.apply({ type: 'addNode', id: 'n6', peerAddress: 'h6:8001' });
    m.apply({ type: 'removeNode', id: 'n6' });
    m.apply({ type: 'nodeRemoved', id: 'n6' });
    directory.refresh(m.meta.nodes);
    expect(directory.has('n6')).toBe(false);
    expect(seen).toEqual(['+n4 -', '+n5 -', '+ -n2', '+n6 -', '+ -n6']);
    // At most INTRODUCED_MAX at a time.
    for (let i = 0; i < INTRODUCED_MAX; i++) expect(directory.introduce(`x${i}`, `hx${i}:1`)).toBe(true);
    expect(directory.introduce('x-one-too-many', 'hx:1')).toBe(false);
    expect(directory.has('x-one-too-many')).toBe(false);
  });
});

describe("a removed node's peers tell it (removalTold)", () => {
  it('one peer is enough when its own metadata says it is being removed; a majority of its peers when it says active', () => {
    expect(removalTold('removing', 1, 3)).toBe(true);
    expect(removalTold('removed', 1, 3)).toBe(true);
    expect(removalTold('removing', 0, 3)).toBe(false);
    // Away through the whole removal: its metadata still says active (or does not name it).
    expect(removalTold('active', 1, 3)).toBe(false);
    expect(removalTold('active', 2, 3)).toBe(true);
    expect(removalTold('active', 1, 2)).toBe(false);
    expect(removalTold('active', 2, 2)).toBe(true);
    expect(removalTold(undefined, 1, 2)).toBe(false);
    expect(removalTold(undefined, 2, 3)).toBe(true);
  });

  it('the directory says which nodes the registry names as removed', () => {
    const meta = withQueues();
    meta.apply({ type: 'addNode', id: 'n4', peerAddress: 'h4:8001', seed: SEED });
    meta.apply({ type: 'removeNode', id: 'n1', replacement: 'n4' });
    const directory = new ClusterDirectory('n2', new Map(SEED.map((n) => [n.id, n.peerAddress])));
    directory.refresh(meta.meta.nodes);
    expect(directory.isRemoved('n1')).toBe(false);
    meta.apply({ type: 'nodeRemoved', id: 'n1' });
    directory.refresh(meta.meta.nodes);
    expect(directory.isRemoved('n1')).toBe(true);
    expect(directory.has('n1')).toBe(false);
    expect(directory.isRemoved('n4')).toBe(false);
  });
});

describe('queue members', () => {
  it('grow adds an active node at the end; shrink retires one until the leader saw it leave; the last replica stays', () => {
    const m = withQueues();
    expect(m.apply({ type: 'growQueue', name: 'b', node: 'n4', seed: SEED })).toMatchObject({ ok: false, code: 'FAILED_PRECONDITION', reason: 'NODE_NOT_FOUND' });
    expect(m.apply({ type: 'growQueue', name: 'b', node: 'n1' })).toMatchObject({ ok: true, changed: true });
    expect(m.meta.queues.get('b')).toMatchObject({ members: ['n2', 'n3', 'n1'], initialMembers: ['n2', 'n3'] });
    expect(m.apply({ type: 'growQueue', name: 'b', node: 'n1' })).toMatchObject({ ok: true, changed: false });
    expect(m.apply({ type: 'growQueue', name: 'nope', node: 'n1' })).toMatchObject({ ok: false, code: 'NOT_FOUND', reason: 'QUEUE_NOT_FOUND' });
    expect(m.apply({ type: 'shrinkQueue', name: 'b', node: 'n2' })).toMatchObject({ ok: true, changed: true });
    const b = m.meta.queues.get('b')!;
    expect(b).toMatchObject({ members: ['n3', 'n1'], retiring: ['n2'], initialMembers: ['n2', 'n3'] });
    // A stale retire (another incarnation) changes nothing; the right one clears it.
    expect(m.apply({ type: 'retireReplica', name: 'b', createdIndex: b.createdIndex + 100, node: 'n2' })).toMatchObject({ ok: true, changed: false });
    expect(m.apply({ type: 'retireReplica', name: 'b', createdIndex: b.createdIndex, node: 'n2' })).toMatchObject({ ok: true, changed: true });
    expect(m.meta.queues.get('b')?.retiring).toBeUndefined();
    expect(m.apply({ type: 'shrinkQueue', name: 'solo', node: 'n1' })).toMatchObject({ ok: false, reason: 'MEMBERSHIP_REFUSED' });
    // Declared, grown, shrunk, retired: each tells the node's replicas.
    expect(m.changed.filter((name) => name === 'b')).toHaveLength(4);
  });

  it('prefer a leader, and rebalance: each queue first lists the member leading fewest queues so far', () => {
    const m = machine();
    for (let i = 0; i < 30; i++) m.apply({ type: 'declareQueue', name: `q${String(i).padStart(2, '0')}`, args: {}, passive: false, members: ['n1', 'n2', 'n3'] });
    expect(m.apply({ type: 'preferLeader', name: 'q00', node: 'n3' })).toMatchObject({ ok: true, changed: true });
    expect(m.meta.queues.get('q00')?.members).toEqual(['n3', 'n1', 'n2']);
    expect(m.apply({ type: 'preferLeader', name: 'q00', node: 'n9' })).toMatchObject({ ok: false, reason: 'NODE_NOT_FOUND' });
    expect(m.apply({ type: 'rebalance', nodes: ['n1', 'n2', 'n3'] })).toMatchObject({ ok: true, changed: true });
    const firsts = [...m.meta.queues.values()].map((q) => q.members[0]);
    for (const id of ['n1', 'n2', 'n3']) expect(firsts.filter((f) => f === id)).toHaveLength(10);
    // Again: balanced already.
    expect(m.apply({ type: 'rebalance', nodes: ['n1', 'n2', 'n3'] })).toMatchObject({ ok: true, changed: false });
    // Only over the nodes named (n3 down): 15 each.
    m.apply({ type: 'rebalance', nodes: ['n1', 'n2'] });
    const two = [...m.meta.queues.values()].map((q) => q.members[0]);
    expect(two.filter((f) => f === 'n1')).toHaveLength(15);
    expect(two.filter((f) => f === 'n2')).toHaveLength(15);
  });

  it('snapshots carry the registry and the members, retiring and initial members; replicas apply the same', () => {
    const a = withQueues();
    a.apply({ type: 'addNode', id: 'n4', peerAddress: 'h4:8001', seed: SEED });
    a.apply({ type: 'removeNode', id: 'n1', replacement: 'n4' });
    const b = machine();
    b.meta.restore(a.meta.snapshot());
    expect([...b.meta.nodes.all()]).toEqual([...a.meta.nodes.all()]);
    expect([...b.meta.queues.values()]).toEqual([...a.meta.queues.values()]);
    expect(b.changed).toContain(null);
    expect(b.nodeChanges()).toBe(1);
  });

  it('malformed membership commands are refused by the shape check', () => {
    const bad = [
      { type: 'addNode', id: 'bad id', peerAddress: 'h:1' },
      { type: 'addNode', id: 'n4', peerAddress: 'no-port' },
      { type: 'addNode', id: 'n4', peerAddress: 'h:70000' },
      { type: 'addNode', id: 'n4', peerAddress: 'h:1', seed: [{ id: 'n1' }] },
      { type: 'addNode', id: 'n4', peerAddress: 'h:1', seed: [{ id: 'n1', peerAddress: 'a:1' }, { id: 'n1', peerAddress: 'a:1' }] },
      { type: 'removeNode', id: 'n1', replacement: 5 },
      { type: 'growQueue', name: 3, node: 'n1' },
      { type: 'retireReplica', name: 'a', node: 'n1' },
      { type: 'rebalance', nodes: 'n1' },
      { type: 'preferLeader', name: 'a' },
    ];
    for (const command of bad) expect(decodeMetaCommand(encodeJson(command)).ok, JSON.stringify(command)).toBe(false);
    const m = withQueues();
    expect(m.meta.apply({ index: 99, term: 1, type: 'normal', data: encodeJson(bad[0]) })).toMatchObject({ ok: false, reason: 'MALFORMED_COMMAND' });
  });
});

describe("a group leader's next configuration step", () => {
  const status = (voters: string[], learners: string[] = [], id = 'n1', match: Record<string, number> = {}): RaftStatus =>
    ({
      id,
      commitIndex: 10,
      config: { voters, learners },
      progress: new Map(Object.entries(match).map(([k, v]) => [k, { match: v, next: v + 1, state: 'replicate', inflight: 0 }])),
    }) as unknown as RaftStatus;

  it('adds learners first, waits for them to be promoted, then removes voters, handing leadership over when it leaves itself', () => {
    expect(nextConfigStep(status(['n1', 'n2', 'n3']), true, ['n1', 'n2', 'n3'])).toEqual({ kind: 'none' });
    expect(nextConfigStep(status(['n1', 'n2', 'n3']), false, ['n1', 'n2', 'n4'])).toEqual({ kind: 'wait' });
    expect(nextConfigStep(status(['n1', 'n2', 'n3']), true, ['n1', 'n2', 'n4'])).toEqual({ kind: 'addLearner', node: 'n4' });
    expect(nextConfigStep(status(['n1', 'n2', 'n3'], ['n4']), true, ['n1', 'n2', 'n4'])).toEqual({ kind: 'wait' });
    expect(nextConfigStep(status(['n1', 'n2', 'n3', 'n4']), true, ['n1', 'n2', 'n4'])).toEqual({ kind: 'remove', node: 'n3' });
    expect(nextConfigStep(status(['n1', 'n2', 'n3'], ['n5']), true, ['n1', 'n2', 'n3'])).toEqual({ kind: 'remove', node: 'n5' });
    expect(nextConfigStep(status(['n1', 'n2', 'n3'], [], 'n1', { n2: 9, n3: 10 }), true, ['n2', 'n3'])).toEqual({ kind: 'handOff', to: 'n3' });
    // A voter the caller may not remove yet (a node whose replicas still move) stays.
    expect(nextConfigStep(status(['n1', 'n2', 'n3']), true, ['n1', 'n2'], (id) => id !== 'n3')).toEqual({ kind: 'none' });
  });

  it('quorum-critical: a node whose loss leaves the live voters short of a majority', () => {
    const up = (down: string[]) => (id: string) => !down.includes(id);
    expect(losesMajorityWithout(['n1', 'n2', 'n3'], 'n1', up([]))).toBe(false);
    expect(losesMajorityWithout(['n1', 'n2', 'n3'], 'n1', up(['n2']))).toBe(true);
    expect(losesMajorityWithout(['n1', 'n2', 'n3', 'n4'], 'n1', up([]))).toBe(false);
    expect(losesMajorityWithout(['n1', 'n2', 'n3', 'n4'], 'n1', up(['n4']))).toBe(true);
    expect(losesMajorityWithout(['n2', 'n3'], 'n1', up(['n2', 'n3']))).toBe(false);
    expect(losesMajorityWithout(['n1'], 'n1', up([]))).toBe(true);
  });
});
