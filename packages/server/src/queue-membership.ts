/**
 * Which nodes hold a queue's replicas, as the metadata group decides it (docs/operations.md,
 * "Membership"). Part of MetaMachine: pure and deterministic.
 *
 * A definition's `members` is what the queue's Raft group should become: the queue's leader
 * adds a member missing from the group as a learner (promoted once caught up), then removes
 * a voter no longer listed (membership-reconciler.ts). A removed member is listed in
 * `retiring` until the leader saw the group's configuration drop it and proposed
 * `retireReplica`: the node keeps its replica (and its vote) until then, so a removal never
 * leaves the group short of the voters its configuration counts. The first member is the
 * preferred leader; `rebalance` reorders members so the first ones spread over the nodes.
 */
import { Reason } from '@quorumq/proto/errors';
import type { NodeId } from '@quorumq/raft';

import type { ClusterNodes, SeedNode } from './cluster-nodes.js';
import type { MetaErrorCode, QueueDefinition } from './meta-machine.js';
import { QUEUE_MEMBERS_MAX } from './meta-command.js';

export type QueueMemberCommand =
  /** `seed`: see ClusterNodes.seed (the proposer's nodes, while the registry is empty). */
  | { readonly type: 'growQueue'; readonly name: string; readonly node: NodeId; readonly seed?: readonly SeedNode[] }
  | { readonly type: 'shrinkQueue'; readonly name: string; readonly node: NodeId }
  | { readonly type: 'retireReplica'; readonly name: string; readonly createdIndex: number; readonly node: NodeId }
  /** `node` becomes the preferred leader (first member). */
  | { readonly type: 'preferLeader'; readonly name: string; readonly node: NodeId }
  /** Leaders spread over `nodes` (the live ones, as the proposer saw them). */
  | { readonly type: 'rebalance'; readonly nodes: readonly NodeId[] };

export type MembershipReply =
  | { readonly ok: true; readonly changed: boolean; readonly queues: readonly string[] }
  | { readonly ok: false; readonly code: MetaErrorCode; readonly reason: string; readonly message: string };

/** The nodes that hold (or still hold) a replica of the queue: its members and those retiring. */
export function replicaNodes(definition: QueueDefinition): readonly NodeId[] {
  const retiring = definition.retiring ?? [];
  return retiring.length === 0 ? definition.members : [...definition.members, ...retiring.filter((id) => !definition.members.includes(id))];
}

/** The voters a brand-new replica of the queue starts with: the members it was declared with. */
export function initialVoters(definition: QueueDefinition): readonly NodeId[] {
  return definition.initialMembers ?? definition.members;
}

/** A definition with new members: the first change records the members it was created with. */
function withMembers(definition: QueueDefinition, members: readonly NodeId[], retiring: readonly NodeId[]): QueueDefinition {
  const { retiring: _old, ...rest } = definition;
  return {
    ...rest,
    members: [...members],
    initialMembers: definition.initialMembers ?? definition.members,
    ...(retiring.length > 0 ? { retiring: [...retiring] } : {}),
  };
}

export class QueueMembership {
  constructor(
    private readonly queues: Map<string, QueueDefinition>,
    private readonly nodes: ClusterNodes,
  ) {}

  apply(command: QueueMemberCommand): MembershipReply {
    switch (command.type) {
      case 'growQueue':
        return this.grow(command.name, command.node);
      case 'shrinkQueue':
        return this.shrink(command.name, command.node);
      case 'retireReplica':
        return this.retire(command.name, command.createdIndex, command.node);
      case 'rebalance':
        return this.rebalance(command.nodes);
      case 'preferLeader':
        return this.preferLeader(command.name, command.node);
    }
  }

  /** Moves every replica on `id` to `replacement` (or drops it); refused, changing nothing, if a queue would have none left. */
  removeNode(id: NodeId, replacement: NodeId | undefined): MembershipReply {
    const changes: QueueDefinition[] = [];
    for (const definition of this.queues.values()) {
      const at = definition.members.indexOf(id);
      if (at < 0) continue;
      const members = [...definition.members];
      if (replacement !== undefined && !members.includes(replacement)) members[at] = replacement;
      else members.splice(at, 1);
      if (members.length === 0) {
        return refuse(
          'FAILED_PRECONDITION',
          Reason.MEMBERSHIP_REFUSED,
          `queue ${JSON.stringify(definition.name)} has its only replica on ${id}: name a replacement node, or grow the queue onto another node first`,
        );
      }
      const retiring = [...(definition.retiring ?? []).filter((node) => !members.includes(node) && node !== id), id];
      changes.push(withMembers(definition, members, retiring));
    }
    for (const changed of changes) this.queues.set(changed.name, changed);
    return { ok: true, changed: changes.length > 0, queues: changes.map((d) => d.name) };
  }

  private grow(name: string, node: NodeId): MembershipReply {
    const definition = this.queues.get(name);
    if (definition === undefined) return refuse('NOT_FOUND', Reason.QUEUE_NOT_FOUND, `queue ${JSON.stringify(name)} does not exist`);
    if (this.nodes.get(node)?.state !== 'active') {
      return refuse('FAILED_PRECONDITION', Reason.NODE_NOT_FOUND, `node ${node} is not an active member of the cluster`);
    }
    if (definition.members.includes(node)) return { ok: true, changed: false, queues: [] };
    if (definition.members.length >= QUEUE_MEMBERS_MAX) {
      return refuse('FAILED_PRECONDITION', Reason.MEMBERSHIP_REFUSED, `a queue has at most ${QUEUE_MEMBERS_MAX} replicas`);
    }
    const retiring = (definition.retiring ?? []).filter((id) => id !== node);
    this.queues.set(name, withMembers(definition, [...definition.members, node], retiring));
    return { ok: true, changed: true, queues: [name] };
  }

  private shrink(name: string, node: NodeId): MembershipReply {
    const definition = this.queues.get(name);
    if (definition === undefined) return refuse('NOT_FOUND', Reason.QUEUE_NOT_FOUND, `queue ${JSON.stringify(name)} does not exist`);
    if (!definition.members.includes(node)) return { ok: true, changed: false, queues: [] };
    if (definition.members.length === 1) {
      return refuse('FAILED_PRECONDITION', Reason.MEMBERSHIP_REFUSED, `${node} holds the only replica of queue ${JSON.stringify(name)}; grow it onto another node first`);
    }
    const members = definition.members.filter((id) => id !== node);
    const retiring = [...(definition.retiring ?? []).filter((id) => id !== node), node];
    this.queues.set(name, withMembers(definition, members, retiring));
    return { ok: true, changed: true, queues: [name] };
  }

  private preferLeader(name: string, node: NodeId): MembershipReply {
    const definition = this.queues.get(name);
    if (definition === undefined) return refuse('NOT_FOUND', Reason.QUEUE_NOT_FOUND, `queue ${JSON.stringify(name)} does not exist`);
    if (!definition.members.includes(node)) {
      return refuse('FAILED_PRECONDITION', Reason.NODE_NOT_FOUND, `${node} holds no replica of queue ${JSON.stringify(name)} (members: ${definition.members.join(', ')})`);
    }
    if (definition.members[0] === node) return { ok: true, changed: false, queues: [] };
    this.queues.set(name, withMembers(definition, [node, ...definition.members.filter((id) => id !== node)], definition.retiring ?? []));
    return { ok: true, changed: true, queues: [name] };
  }

  private retire(name: string, createdIndex: number, node: NodeId): MembershipReply {
    const definition = this.queues.get(name);
    if (definition === undefined || definition.createdIndex !== createdIndex || !(definition.retiring ?? []).includes(node)) {
      return { ok: true, changed: false, queues: [] };
    }
    this.queues.set(name, withMembers(definition, definition.members, (definition.retiring ?? []).filter((id) => id !== node)));
    return { ok: true, changed: true, queues: [name] };
  }

  /**
   * Puts first, in each queue (by name), the member among `nodes` that leads fewest queues so
   * far (the current first one on a tie): the preferred leaders spread as evenly as the
   * queues' members allow. Each queue's leader then hands leadership to its first member.
   */
  private rebalance(nodes: readonly NodeId[]): MembershipReply {
    const counts = new Map<NodeId, number>(nodes.map((id) => [id, 0]));
    const changed: string[] = [];
    for (const name of [...this.queues.keys()].sort()) {
      const definition = this.queues.get(name)!;
      const candidates = definition.members.filter((id) => counts.has(id));
      if (candidates.length === 0) continue;
      let best = candidates[0]!;
      for (const candidate of candidates) if (counts.get(candidate)! < counts.get(best)!) best = candidate;
      counts.set(best, counts.get(best)! + 1);
      if (definition.members[0] === best) continue;
      const members = [best, ...definition.members.filter((id) => id !== best)];
      this.queues.set(name, withMembers(definition, members, definition.retiring ?? []));
      changed.push(name);
    }
    return { ok: true, changed: changed.length > 0, queues: changed };
  }
}

function refuse(code: MetaErrorCode, reason: string, message: string): MembershipReply {
  return { ok: false, code, reason, message };
}
