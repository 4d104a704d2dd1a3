/**
 * QueueReplicas (queue-replicas.ts) removes the storage of a queue group found at the start
 * that no replica claims once the metadata shows its queue gone for good (deleted, or moved
 * off this node, in an entry the node applied), and releases the message store records
 * adopted for its snapshot; a group whose queue is created by an entry not applied yet stays.
 * (A node killed after applying a delete but before its group's files were deleted left them,
 * and the records its snapshot listed, until now.)
 */
import { describe, expect, it, vi } from 'vitest';

import type { AdoptedBodies } from '../src/adopted-bodies.js';
import { MetaMachine, type QueueDefinition } from '../src/meta-machine.js';
import { QueueReplicas, type QueueReplicasParts, type ReplicaWiring } from '../src/queue-replicas.js';

function setup(groups: string[]) {
  const meta = new MetaMachine(() => {});
  const deleteGroup = vi.fn(async (_groupId: string) => {});
  const forget = vi.fn((_groupId: string) => {});
  const parts = {
    nodeId: 'n3',
    storage: { groups: () => groups, deleteGroup },
    adopted: { forget } as unknown as AdoptedBodies,
    meta,
    logger: { info: () => {}, warn: () => {}, error: () => {} },
    isStopping: () => false,
  } as unknown as QueueReplicasParts;
  const replicas = new QueueReplicas(parts);
  replicas.wire({} as ReplicaWiring);
  return { meta, replicas, deleteGroup, forget };
}

const definition = (name: string, createdIndex: number, members: string[]): QueueDefinition =>
  ({ name, createdIndex, members, args: {} }) as unknown as QueueDefinition;

describe('QueueReplicas: groups of queues deleted while the node was away', () => {
  it('removes an unclaimed group once the metadata applied past its creation, and only then', () => {
    const { meta, replicas, deleteGroup, forget } = setup(['meta', 'q/5/gone', 'q/7/moved', 'q/50/later']);
    meta.appliedIndex = 10;
    // 'moved' still exists but no longer on this node.
    meta.queues.set('moved', definition('moved', 7, ['n1', 'n2', 'n4']));
    replicas.reconcile();
    expect(deleteGroup.mock.calls.map(([g]) => g).sort()).toEqual(['q/5/gone', 'q/7/moved']);
    expect(forget.mock.calls.map(([g]) => g).sort()).toEqual(['q/5/gone', 'q/7/moved']);

    // Created by an entry not applied yet: it may be this node's; left alone until applied.
    replicas.reconcile();
    expect(deleteGroup).toHaveBeenCalledTimes(2);
    meta.appliedIndex = 60;
    replicas.reconcile();
    expect(deleteGroup).toHaveBeenLastCalledWith('q/50/later');
    expect(forget).toHaveBeenLastCalledWith('q/50/later');
    // Each once; the meta group is never touched.
    replicas.reconcile();
    expect(deleteGroup).toHaveBeenCalledTimes(3);
  });

  it("keeps the metadata's applied index in its snapshot", () => {
    const meta = new MetaMachine(() => {});
    meta.appliedIndex = 1234;
    const restored = new MetaMachine(() => {});
    restored.restore(meta.snapshot());
    expect(restored.appliedIndex).toBe(1234);
    // A snapshot of the release before has none: nothing is taken as deleted until an entry applies.
    const old = JSON.parse(Buffer.from(meta.snapshot()).toString('utf8')) as Record<string, unknown>;
    delete old.appliedIndex;
    const fromOld = new MetaMachine(() => {});
    fromOld.restore(Buffer.from(JSON.stringify(old)));
    expect(fromOld.appliedIndex).toBe(0);
  });
});
