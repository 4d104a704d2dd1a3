/**
 * The membership RPCs (AddNode, RemoveNode, GrowQueue, ShrinkQueue, TransferLeadership,
 * Rebalance, QuorumCritical; docs/operations.md): checked here, then proposed to the
 * metadata group, which records the intent; the groups' leaders carry it out
 * (member-changes.ts). Each change writes an audit line with the user who made it.
 */
import { quorumq } from '@quorumq/proto';
import type { NodeId } from '@quorumq/raft';
import type { Logger } from 'pino';

import type { AccessControl, Principal } from './access-control.js';
import type { ClusterDirectory } from './cluster-directory.js';
import { nodeIdProblem, peerAddressProblem } from './cluster-nodes.js';
import { BrokerError, Reason, invalidArgument, notFound } from './errors.js';
import type { LocalQueue } from './local-queue.js';
import type { MetaCommand, MetaReply, QueueDefinition } from './meta-machine.js';
import { replicaNodes } from './queue-membership.js';

import pb = quorumq.v1;

export interface MembershipAdminParts {
  readonly nodeId: NodeId;
  readonly directory: ClusterDirectory;
  readonly access: AccessControl;
  /** The metadata group's voters as this node knows them. */
  metaVoters(): readonly NodeId[];
  /** Whether this node's metadata replica is a member of its group (a joining node's is not until added). */
  isMetaMember(): boolean;
  queues(): Iterable<QueueDefinition>;
  localQueue(name: string): LocalQueue | undefined;
  queueDefinition(name: string): Promise<QueueDefinition>;
  /** Whether this node reaches `id` now (itself included). */
  isUp(id: NodeId): boolean;
  propose(command: MetaCommand): Promise<MetaReply>;
  metaError(reply: Extract<MetaReply, { ok: false }>): BrokerError;
  readonly logger: Logger;
}

const who = (principal: Principal): string => (principal.kind === 'anonymous' ? '(anonymous)' : principal.user);

function nodeOf(value: string | null | undefined, field: string): NodeId {
  const problem = nodeIdProblem(value ?? '');
  if (problem !== null) throw invalidArgument(`${field}: ${problem}`);
  return value!;
}

/** Whether `voters` keep a majority without `node`, counting only those `isUp` accepts. */
export function losesMajorityWithout(voters: readonly NodeId[], node: NodeId, isUp: (id: NodeId) => boolean): boolean {
  if (!voters.includes(node)) return false;
  const live = voters.filter((id) => id !== node && isUp(id)).length;
  return live < Math.floor(voters.length / 2) + 1;
}

export class MembershipAdmin {
  constructor(private readonly parts: MembershipAdminParts) {}

  private async change(principal: Principal, command: MetaCommand, audit: Record<string, unknown>): Promise<pb.MembershipResponse.$Properties> {
    this.parts.access.requireAdministrator(principal);
    const reply = await this.parts.propose(command);
    if (!reply.ok) throw this.parts.metaError(reply);
    this.parts.logger.info({ audit: command.type, by: who(principal), ...audit, changed: reply.changed }, 'membership change');
    return { changed: reply.changed };
  }

  private get seed(): { seed?: { id: NodeId; peerAddress: string }[] } {
    const seed = this.parts.directory.seed(this.parts.isMetaMember());
    return seed === undefined ? {} : { seed };
  }

  addNode(request: pb.AddNodeRequest, principal: Principal): Promise<pb.MembershipResponse.$Properties> {
    const id = nodeOf(request.node, 'node');
    const problem = peerAddressProblem(request.peerAddress);
    if (problem !== null) throw invalidArgument(`peer_address: ${problem}`);
    return this.change(principal, { type: 'addNode', id, peerAddress: request.peerAddress, ...this.seed }, { node: id, peerAddress: request.peerAddress });
  }

  removeNode(request: pb.RemoveNodeRequest, principal: Principal): Promise<pb.MembershipResponse.$Properties> {
    const id = nodeOf(request.node, 'node');
    const replacement = request.replacement ? nodeOf(request.replacement, 'replacement') : undefined;
    return this.change(
      principal,
      { type: 'removeNode', id, ...(replacement !== undefined ? { replacement } : {}), ...this.seed },
      { node: id, replacement: replacement ?? null },
    );
  }

  async queueMember(kind: 'growQueue' | 'shrinkQueue' | 'preferLeader', request: pb.QueueMemberRequest, principal: Principal): Promise<pb.MembershipResponse.$Properties> {
    if (typeof request.queue !== 'string' || request.queue === '') throw invalidArgument('queue must not be empty');
    const node = nodeOf(request.node, 'node');
    this.parts.access.requireAdministrator(principal);
    await this.parts.queueDefinition(request.queue);
    if (!this.parts.directory.names(node)) throw notFound(Reason.NODE_NOT_FOUND, `node ${node} is not a member of the cluster`);
    const command: MetaCommand = kind === 'growQueue' ? { type: kind, name: request.queue, node, ...this.seed } : { type: kind, name: request.queue, node };
    return this.change(principal, command, { queue: request.queue, node });
  }

  /** The preferred leaders spread over the nodes this one reaches (an unreachable node would not take over). */
  rebalance(principal: Principal): Promise<pb.MembershipResponse.$Properties> {
    const nodes = this.parts.directory.activeIds().filter((id) => this.parts.isUp(id));
    return this.change(principal, { type: 'rebalance', nodes }, { nodes });
  }

  async quorumCritical(request: pb.QuorumCriticalRequest, principal: Principal): Promise<pb.QuorumCriticalResponse.$Properties> {
    const node = nodeOf(request.node, 'node');
    this.parts.access.requireAdministrator(principal);
    if (!this.parts.directory.names(node)) throw notFound(Reason.NODE_NOT_FOUND, `node ${node} is not a member of the cluster`);
    const isUp = (id: NodeId): boolean => this.parts.isUp(id);
    const queues: string[] = [];
    for (const definition of this.parts.queues()) {
      // The group's own configuration where this node has a replica; the metadata's members elsewhere.
      const local = this.parts.localQueue(definition.name);
      const voters = local !== undefined ? local.group.status().config.voters : replicaNodes(definition);
      if (losesMajorityWithout(voters, node, isUp)) queues.push(definition.name);
    }
    return { queues: queues.sort(), metadata: losesMajorityWithout(this.parts.metaVoters(), node, isUp) };
  }
}
