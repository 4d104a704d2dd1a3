/**
 * The metadata group's state machine: the cluster's topology (exchanges, bindings, the
 * set of queues) and each queue's definition (validated arguments and the nodes of its
 * Raft group). Every node runs it; the node reconciles its queue replicas with it.
 * Deterministic: the proposer chooses a new queue's members and puts them in the command.
 */
import { Reason } from '@quorumq/proto/errors';
import {
  Topology,
  argumentMismatch,
  argumentWarnings,
  decodeTopologySnapshot,
  encodeTopologySnapshot,
  parseQueueArguments,
  restoreTopology,
  snapshotTopology,
  QueueArgumentError,
  type QueueArguments,
  type QueueArgumentsInput,
  type TopologyCommand,
} from '@quorumq/queue';
import type { Entry, NodeId } from '@quorumq/raft';

import { decodeJson, encodeJson } from './json-codec.js';
import { decodeMetaEntry, type ParsedMetaCommand } from './meta-command.js';
import type { GroupMachine } from './raft-group.js';
import { ClusterNodes, type NodeCommand, type NodeRecord } from './cluster-nodes.js';
import { QueueMembership, type QueueMemberCommand } from './queue-membership.js';
import { Users, type UserCommand, type UserRecord } from './users.js';

export const QUEUE_NAME_BYTES_MAX = 255;

export interface QueueDefinition {
  readonly name: string;
  readonly args: QueueArguments;
  /** The nodes its Raft group should have as voters, the preferred leader first (queue-membership.ts). */
  readonly members: readonly NodeId[];
  /** Nodes removed from `members` whose removal from the group is not yet seen done: they keep their replica. */
  readonly retiring?: readonly NodeId[];
  /** The members it was declared with (set by its first membership change): a new replica's bootstrap configuration. */
  readonly initialMembers?: readonly NodeId[];
  /** The metadata index that created it: a queue re-created under the same name is a new group. */
  readonly createdIndex: number;
  /** The proposer's clock at creation: the queue's `expires` lease starts here. */
  readonly createdAt?: number;
}

export type MetaCommand =
  | { readonly type: 'topology'; readonly command: TopologyCommand }
  | {
      readonly type: 'declareQueue';
      readonly name: string;
      readonly args: QueueArgumentsInput;
      readonly passive: boolean;
      readonly members: readonly NodeId[];
      /** The proposing node's clock (carried in the command, so every replica agrees). */
      readonly createdAt?: number;
    }
  | { readonly type: 'deleteQueue'; readonly name: string; readonly reason: string; readonly createdIndex?: number }
  /** Users and permissions (users.ts). */
  | UserCommand
  /** The cluster's nodes (cluster-nodes.ts) and which of them hold each queue (queue-membership.ts). */
  | NodeCommand
  | QueueMemberCommand
  /** Changes nothing: its index tells a node how far to catch up to see every earlier change. */
  | { readonly type: 'barrier' };

/** Error reasons map to gRPC codes in the service. */
export type MetaErrorCode = 'INVALID_ARGUMENT' | 'NOT_FOUND' | 'FAILED_PRECONDITION' | 'PERMISSION_DENIED' | 'RESOURCE_EXHAUSTED';

export type MetaReply = (
  | {
      readonly ok: true;
      readonly changed: boolean;
      readonly warnings?: readonly string[];
      readonly queue?: QueueDefinition;
      /** Of putUser: whether it created the user. */
      readonly created?: boolean;
    }
  | { readonly ok: false; readonly code: MetaErrorCode; readonly reason: string; readonly message: string }
) & {
  /** The log index of the command: a node that waits until it applied this index reads its own write. */
  readonly index?: number;
  /** Of a batch entry: each command's reply, in order (the batch's own reply is `ok`). */
  readonly batch?: readonly MetaReply[];
};

export interface MetaSnapshot {
  readonly topology: Uint8Array;
  readonly queues: readonly QueueDefinition[];
  /** The last applied index when it was taken (absent in snapshots of releases before: 0). */
  readonly appliedIndex?: number;
  /** Users and permissions (absent in snapshots of releases before them: none). */
  readonly users?: readonly UserRecord[];
  /** The node registry (absent before membership changes existed: unmanaged). */
  readonly nodes?: readonly NodeRecord[];
}

export class MetaMachine implements GroupMachine<MetaReply> {
  topology = new Topology();
  readonly queues = new Map<string, QueueDefinition>();
  /** Users and their permissions (users.ts). */
  readonly users = new Users();
  /** The cluster's nodes, once membership changes began (cluster-nodes.ts). */
  readonly nodes = new ClusterNodes();
  private readonly membership = new QueueMembership(this.queues, this.nodes);
  /**
   * The index of the last entry applied (or the snapshot restored): every queue created at
   * or below it that is not in `queues` is deleted for good (its group id names its index).
   */
  appliedIndex = 0;

  /**
   * `onChange(name)`: queue `name` was declared, deleted or its members changed;
   * `onChange(null)`: any may have changed (restore). `onNodes()`: the node registry changed.
   */
  constructor(
    private readonly onChange: (queue: string | null) => void,
    private readonly onNodes: () => void = () => {},
  ) {}

  /**
   * Applies one committed entry: one command, or a batch of them applied in order, each
   * with its own reply (MetaBatcher). A command it cannot apply (not JSON, an unknown type, a
   * missing or mistyped field) changes nothing and gets a MALFORMED_COMMAND error reply, the
   * same on every replica: apply never throws on bad input, so any log can be replayed.
   */
  apply(entry: Entry): MetaReply {
    this.appliedIndex = entry.index;
    const decoded = decodeMetaEntry(entry.data);
    if (decoded.kind === 'one') return this.applyParsed(decoded.parsed, entry.index, null);
    // Every queue created by this entry gets its index as createdIndex, which names its
    // group: a queue deleted and declared again in one entry would reuse the group id of the
    // queue just deleted, so that declare is refused (the batcher never does that).
    const deleted = new Set<string>();
    const batch = decoded.commands.map((parsed) => this.applyParsed(parsed, entry.index, deleted));
    return { ok: true, changed: batch.some((reply) => reply.ok && reply.changed), index: entry.index, batch };
  }

  /** `deleted`: in a batch, the queues it deleted so far. */
  private applyParsed(parsed: ParsedMetaCommand, index: number, deleted: Set<string> | null): MetaReply {
    if (!parsed.ok) return { ...malformedCommand(parsed.problem), index };
    const command = parsed.command;
    if (command.type === 'declareQueue' && !command.passive && deleted?.has(command.name) === true) {
      return {
        ok: false,
        code: 'FAILED_PRECONDITION',
        reason: Reason.PRECONDITION_FAILED,
        message: `queue ${JSON.stringify(command.name)} was deleted in the same metadata entry; declare it again`,
        index,
      };
    }
    const reply = this.applyCommand(command, index);
    // Only a queue's declare or delete concerns its replicas (bindings and exchanges do not).
    if (reply.ok && reply.changed && (command.type === 'declareQueue' || command.type === 'deleteQueue')) {
      if (command.type === 'deleteQueue') deleted?.add(command.name);
      this.onChange(command.name);
    }
    return { ...reply, index };
  }

  /** The node and queue membership commands (cluster-nodes.ts, queue-membership.ts). */
  private applyMembership(command: NodeCommand | QueueMemberCommand): MetaReply {
    if ('seed' in command) this.nodes.seed(command.seed);
    let reply;
    switch (command.type) {
      case 'addNode': {
        const added = this.nodes.add(command.id, command.peerAddress);
        if (added.ok && added.changed) this.onNodes();
        return added;
      }
      case 'nodeRemoved': {
        const removed = this.nodes.markRemoved(command.id);
        if (removed.ok && removed.changed) this.onNodes();
        return removed;
      }
      case 'removeNode': {
        const problem = this.nodes.removalProblem(command.id, command.replacement);
        if (problem !== null) return problem;
        reply = this.membership.removeNode(command.id, command.replacement);
        if (reply.ok && this.nodes.markRemoving(command.id)) this.onNodes();
        break;
      }
      default:
        reply = this.membership.apply(command);
    }
    if (!reply.ok) return reply;
    for (const name of reply.queues) this.onChange(name);
    return { ok: true, changed: reply.changed };
  }

  snapshot(): Uint8Array {
    const snapshot: MetaSnapshot = {
      topology: encodeTopologySnapshot(snapshotTopology(this.topology)),
      queues: [...this.queues.values()],
      appliedIndex: this.appliedIndex,
      users: this.users.snapshot(),
      ...(this.nodes.managed ? { nodes: this.nodes.snapshot() } : {}),
    };
    return encodeJson(snapshot);
  }

  restore(data: Uint8Array): void {
    const snapshot = decodeJson<MetaSnapshot>(data);
    this.topology = restoreTopology(decodeTopologySnapshot(snapshot.topology));
    this.queues.clear();
    for (const q of snapshot.queues) this.queues.set(q.name, q);
    this.appliedIndex = typeof snapshot.appliedIndex === 'number' && Number.isSafeInteger(snapshot.appliedIndex) ? snapshot.appliedIndex : 0;
    this.users.restore(snapshot.users ?? []);
    this.nodes.restore(snapshot.nodes ?? []);
    this.onChange(null);
    this.onNodes();
  }

  private applyCommand(command: MetaCommand, index: number): MetaReply {
    switch (command.type) {
      case 'topology':
        return this.applyTopology(command.command);
      case 'declareQueue':
        return this.declareQueue(command, index);
      case 'barrier':
        return { ok: true, changed: false };
      case 'putUser':
      case 'deleteUser':
      case 'setPermissions':
      case 'clearPermissions':
        return this.users.apply(command);
      case 'addNode':
      case 'removeNode':
      case 'nodeRemoved':
      case 'growQueue':
      case 'shrinkQueue':
      case 'retireReplica':
      case 'preferLeader':
      case 'rebalance':
        return this.applyMembership(command);
      case 'deleteQueue': {
        const existing = this.queues.get(command.name);
        if (existing === undefined) return { ok: true, changed: false };
        // A delete issued for an older incarnation must not remove a re-created queue.
        if (command.createdIndex !== undefined && command.createdIndex !== existing.createdIndex) return { ok: true, changed: false };
        this.queues.delete(command.name);
        this.topology.apply({ type: 'deleteQueue', name: command.name });
        return { ok: true, changed: true, queue: existing };
      }
    }
  }

  private applyTopology(command: TopologyCommand): MetaReply {
    if (command.type === 'declareQueue' || command.type === 'deleteQueue') {
      return { ok: false, code: 'INVALID_ARGUMENT', reason: Reason.MALFORMED_COMMAND, message: 'queues are declared with declareQueue' };
    }
    const reply = this.topology.apply(command);
    if (reply.ok) return { ok: true, changed: reply.changed };
    return { ok: false, code: reply.error.code, reason: topologyReason(reply.error.code, reply.error.message), message: reply.error.message };
  }

  private declareQueue(command: Extract<MetaCommand, { type: 'declareQueue' }>, index: number): MetaReply {
    const existing = this.queues.get(command.name);
    if (command.passive) {
      if (existing === undefined) return notFoundQueue(command.name);
      return { ok: true, changed: false, queue: existing };
    }
    const problem = queueNameProblem(command.name);
    if (problem !== null) return { ok: false, code: 'INVALID_ARGUMENT', reason: Reason.INVALID_QUEUE_NAME, message: problem };
    let args: QueueArguments;
    try {
      args = parseQueueArguments(command.args);
    } catch (error) {
      const message = error instanceof QueueArgumentError || error instanceof Error ? error.message : String(error);
      return { ok: false, code: 'INVALID_ARGUMENT', reason: Reason.INVALID_QUEUE_ARGUMENT, message };
    }
    const warnings = argumentWarnings(args);
    if (args.deadLetterExchange !== null && args.deadLetterRoutingKey === null) {
      const dlx = this.topology.exchange(args.deadLetterExchange);
      if (dlx?.type === 'direct') {
        warnings.push(
          `dead_letter_exchange ${JSON.stringify(args.deadLetterExchange)} is a direct exchange and no dead_letter_routing_key is set: ` +
            'dead-lettered messages keep their original routing keys and are lost unless a binding matches them',
        );
      }
    }
    if (existing !== undefined) {
      const differing = argumentMismatch(existing.args, args);
      if (differing !== null) {
        return {
          ok: false,
          code: 'FAILED_PRECONDITION',
          reason: Reason.ARGUMENT_MISMATCH,
          message:
            `queue ${JSON.stringify(command.name)} exists with ${differing} = ${JSON.stringify(existing.args[differing])}, ` +
            `the declare asked for ${JSON.stringify(args[differing])}`,
        };
      }
      return { ok: true, changed: false, warnings, queue: existing };
    }
    // A proposer's view of the nodes may be stale: only active nodes get replicas.
    const members = this.nodes.managed ? command.members.filter((id) => this.nodes.get(id)?.state === 'active') : command.members;
    if (members.length === 0) {
      return { ok: false, code: 'INVALID_ARGUMENT', reason: Reason.NO_MEMBERS, message: 'a queue needs at least one replica' };
    }
    const reply = this.topology.apply({ type: 'declareQueue', name: command.name });
    if (!reply.ok) {
      return { ok: false, code: reply.error.code, reason: topologyReason(reply.error.code, reply.error.message), message: reply.error.message };
    }
    const definition: QueueDefinition = {
      name: command.name,
      args,
      members: [...members],
      createdIndex: index,
      ...(command.createdAt !== undefined ? { createdAt: command.createdAt } : {}),
    };
    this.queues.set(command.name, definition);
    return { ok: true, changed: true, warnings, queue: definition };
  }
}

/** The reply to a metadata command that cannot be applied (see meta-command.ts). */
export function malformedCommand(problem: string): MetaReply {
  return { ok: false, code: 'INVALID_ARGUMENT', reason: Reason.MALFORMED_COMMAND, message: `malformed metadata command: ${problem}` };
}

export function notFoundQueue(name: string): MetaReply {
  return { ok: false, code: 'NOT_FOUND', reason: Reason.QUEUE_NOT_FOUND, message: `queue ${JSON.stringify(name)} does not exist` };
}

export function queueNameProblem(name: string): string | null {
  if (typeof name !== 'string' || name.length === 0) return 'a queue name must not be empty';
  if (Buffer.byteLength(name) > QUEUE_NAME_BYTES_MAX) return `a queue name is at most ${QUEUE_NAME_BYTES_MAX} bytes`;
  if (name.startsWith('amq.')) return `queue names starting with "amq." are reserved`;
  return null;
}

function topologyReason(code: MetaErrorCode, message: string): string {
  if (code === 'NOT_FOUND') return message.includes('queue') && !message.includes('exchange') ? Reason.QUEUE_NOT_FOUND : Reason.EXCHANGE_NOT_FOUND;
  if (code === 'FAILED_PRECONDITION') return message.includes('type') ? Reason.ARGUMENT_MISMATCH : Reason.PRECONDITION_FAILED;
  return code;
}
