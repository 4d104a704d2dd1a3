/**
 * The cluster's nodes, as the metadata group replicates them (docs/operations.md,
 * "Membership"). Part of MetaMachine's state: pure and deterministic.
 *
 * A cluster starts unmanaged: its nodes are the `peers` of the configuration, the same on
 * every node, and this registry is empty. The first membership command carries the
 * proposer's view of them (`seed`), which the registry takes as its start; from then on the
 * registry is the truth and a node's `peers` only say where to find the cluster.
 *
 * A node is `active`, then `removing` (its queue replicas move or shrink away and the
 * metadata group drops it; peers still talk to it), then `removed` (nobody talks to it; its
 * id is never used again: its old disk may still hold votes of past terms).
 */
import { Reason } from '@quorumq/proto/errors';
import type { NodeId } from '@quorumq/raft';

import type { MetaErrorCode } from './meta-machine.js';

export type NodeState = 'active' | 'removing' | 'removed';

export interface NodeRecord {
  readonly id: NodeId;
  /** Where peers reach its peer listener. */
  readonly peerAddress: string;
  readonly state: NodeState;
}

export interface SeedNode {
  readonly id: NodeId;
  readonly peerAddress: string;
}

export type NodeCommand =
  | { readonly type: 'addNode'; readonly id: NodeId; readonly peerAddress: string; readonly seed?: readonly SeedNode[] }
  /** Queue replicas on `id` go to `replacement` (or shrink away); see QueueMembership.removeNode. */
  | { readonly type: 'removeNode'; readonly id: NodeId; readonly replacement?: NodeId; readonly seed?: readonly SeedNode[] }
  /** The metadata group's leader saw `id` leave the group's configuration. */
  | { readonly type: 'nodeRemoved'; readonly id: NodeId };

export type NodeReply =
  | { readonly ok: true; readonly changed: boolean }
  | { readonly ok: false; readonly code: MetaErrorCode; readonly reason: string; readonly message: string };

/** The node id syntax of the configuration (config.ts). */
export const NODE_ID = /^[A-Za-z0-9_.-]{1,64}$/;

export function nodeIdProblem(id: unknown): string | null {
  return typeof id === 'string' && NODE_ID.test(id) ? null : `a node id is 1 to 64 letters, digits, "_", "." or "-", got ${JSON.stringify(id)}`;
}

/** A peer address: host:port, at most 255 bytes. */
export function peerAddressProblem(address: unknown): string | null {
  if (typeof address !== 'string' || address.length === 0) return 'a peer address must be host:port';
  if (Buffer.byteLength(address) > 255) return 'a peer address is at most 255 bytes';
  const port = Number(address.slice(address.lastIndexOf(':') + 1));
  if (!address.includes(':') || !Number.isInteger(port) || port < 0 || port > 65535) return `a peer address must be host:port, got ${JSON.stringify(address)}`;
  return null;
}

/**
 * Whether a node takes its peers' word that it was removed (BrokerNode.toldRemoved): `told`
 * of its `others` peers said so, and its own registry says `ownState` of it. A registry never
 * names a node removed by mistake (a removal is final, an id is never used again), so one
 * peer is enough when the node's own metadata says it is being removed; a node that was away
 * through the whole removal (its own metadata says active) waits for a majority of its peers.
 */
export function removalTold(ownState: NodeState | undefined, told: number, others: number): boolean {
  if (told === 0) return false;
  return ownState === 'removing' || ownState === 'removed' || told > others / 2;
}

export class ClusterNodes {
  private readonly nodes = new Map<NodeId, NodeRecord>();

  /** Whether membership commands have run: the registry, not the configuration, names the nodes. */
  get managed(): boolean {
    return this.nodes.size > 0;
  }

  get(id: NodeId): NodeRecord | undefined {
    return this.nodes.get(id);
  }

  all(): IterableIterator<NodeRecord> {
    return this.nodes.values();
  }

  /** Takes the proposer's view of an unmanaged cluster as the start (see the file comment). */
  seed(seed: readonly SeedNode[] | undefined): void {
    if (this.managed || seed === undefined) return;
    for (const node of seed) this.nodes.set(node.id, { id: node.id, peerAddress: node.peerAddress, state: 'active' });
  }

  /** Whether `id` is a node (active or being removed): it may hold replicas. */
  isMember(id: NodeId): boolean {
    const state = this.nodes.get(id)?.state;
    return state === 'active' || state === 'removing';
  }

  add(id: NodeId, peerAddress: string): NodeReply {
    const existing = this.nodes.get(id);
    if (existing?.state === 'removed') {
      return refuse('FAILED_PRECONDITION', `node ${id} was removed from the cluster and its id cannot be used again; start the node with a new id`);
    }
    if (existing !== undefined) {
      if (existing.peerAddress === peerAddress) return { ok: true, changed: false };
      return refuse('FAILED_PRECONDITION', `node ${id} is already a member with peer address ${existing.peerAddress}`);
    }
    this.nodes.set(id, { id, peerAddress, state: 'active' });
    return { ok: true, changed: true };
  }

  /** Checked before QueueMembership moves the node's replicas. */
  removalProblem(id: NodeId, replacement: NodeId | undefined): NodeReply | null {
    const existing = this.nodes.get(id);
    if (existing === undefined || existing.state === 'removed') return refuse('NOT_FOUND', `node ${id} is not a member of the cluster`);
    if (replacement !== undefined) {
      if (replacement === id) return refuse('INVALID_ARGUMENT', 'a node cannot replace itself');
      if (this.nodes.get(replacement)?.state !== 'active') return refuse('FAILED_PRECONDITION', `the replacement ${replacement} is not an active member; add it first`);
    }
    const remaining = [...this.nodes.values()].filter((node) => node.state === 'active' && node.id !== id);
    if (remaining.length === 0) return refuse('FAILED_PRECONDITION', 'the last node of a cluster cannot be removed');
    return null;
  }

  markRemoving(id: NodeId): boolean {
    const existing = this.nodes.get(id);
    if (existing === undefined || existing.state !== 'active') return false;
    this.nodes.set(id, { ...existing, state: 'removing' });
    return true;
  }

  markRemoved(id: NodeId): NodeReply {
    const existing = this.nodes.get(id);
    if (existing === undefined || existing.state === 'removed') return { ok: true, changed: false };
    this.nodes.set(id, { ...existing, state: 'removed' });
    return { ok: true, changed: true };
  }

  snapshot(): NodeRecord[] {
    return [...this.nodes.values()];
  }

  restore(records: readonly NodeRecord[]): void {
    this.nodes.clear();
    for (const record of records) this.nodes.set(record.id, record);
  }
}

function refuse(code: MetaErrorCode, message: string): NodeReply {
  const reason = code === 'NOT_FOUND' ? Reason.NODE_NOT_FOUND : code === 'INVALID_ARGUMENT' ? Reason.INVALID_ARGUMENT : Reason.PRECONDITION_FAILED;
  return { ok: false, code, reason, message };
}
