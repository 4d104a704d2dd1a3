/**
 * Who this node's peers are now, and where their peer listeners are: the configuration's
 * `peers` while membership is unmanaged, then the metadata's node registry
 * (cluster-nodes.ts). A removed node is no peer: its calls are refused and its messages
 * dropped. The transport, the peer authenticator, the liveness watch and the service read
 * it; the node refreshes it when the registry changes.
 */
import type { NodeId } from '@quorumq/raft';

import type { ClusterNodes, SeedNode } from './cluster-nodes.js';

export class ClusterDirectory {
  private addresses: ReadonlyMap<NodeId, string>;
  private active: ReadonlySet<NodeId>;
  private readonly listeners: Array<(added: readonly NodeId[], removed: readonly NodeId[]) => void> = [];
  /** Whether the registry names the nodes (see ClusterNodes.managed). */
  private registryManaged = false;

  constructor(
    readonly selfId: NodeId,
    /** The configuration's peers: the start, and the addresses this node was told for them. */
    private readonly configured: ReadonlyMap<NodeId, string>,
  ) {
    this.addresses = configured;
    this.active = new Set(configured.keys());
  }

  /** Whether `id` is a node of the cluster (active or being removed), this one included. */
  has(id: NodeId): boolean {
    return this.addresses.has(id);
  }

  /** Every node of the cluster (this one included), sorted. */
  ids(): NodeId[] {
    return [...this.addresses.keys()].sort();
  }

  /** The nodes new queue replicas may go to (not being removed), sorted. */
  activeIds(): NodeId[] {
    return [...this.active].sort();
  }

  /** The peer listener of `id`. */
  peerAddress(id: NodeId): string | undefined {
    return this.addresses.get(id);
  }

  /** All nodes' peer addresses (this one's included). */
  peers(): ReadonlyMap<NodeId, string> {
    return this.addresses;
  }

  /** The nodes this one knows, for a membership command of an unmanaged cluster (ClusterNodes.seed). */
  seed(): SeedNode[] | undefined {
    if (this.registryManaged) return undefined;
    return this.ids().map((id) => ({ id, peerAddress: this.addresses.get(id)! }));
  }

  get managed(): boolean {
    return this.registryManaged;
  }

  /** `listener(added, removed)` after each change of the peer set. */
  onChange(listener: (added: readonly NodeId[], removed: readonly NodeId[]) => void): void {
    this.listeners.push(listener);
  }

  /** Reads the metadata's registry (it changed, or a snapshot was restored). */
  refresh(registry: ClusterNodes): void {
    this.registryManaged = registry.managed;
    if (!registry.managed) return;
    const addresses = new Map<NodeId, string>();
    const active = new Set<NodeId>();
    for (const node of registry.all()) {
      if (node.state === 'removed') continue;
      // The address this node was configured with wins: peers may see each other under other names.
      addresses.set(node.id, this.configured.get(node.id) ?? node.peerAddress);
      if (node.state === 'active') active.add(node.id);
    }
    const added = [...addresses.keys()].filter((id) => !this.addresses.has(id) || this.addresses.get(id) !== addresses.get(id));
    const removed = [...this.addresses.keys()].filter((id) => !addresses.has(id));
    this.addresses = addresses;
    this.active = active;
    if (added.length === 0 && removed.length === 0) return;
    for (const listener of this.listeners) listener(added, removed);
  }
}
