/**
 * Who this node's peers are now, and where their peer listeners are: the configuration's
 * `peers` while membership is unmanaged, then the metadata's node registry
 * (cluster-nodes.ts). A removed node is no peer: its calls are refused and its messages
 * dropped. The transport, the peer authenticator, the liveness watch and the service read
 * it; the node refreshes it when the registry changes.
 *
 * A node this one's registry does not name may introduce itself (`introduce`: an
 * authenticated peer call that carries its peer address): this node may have been away, or
 * have lost the end of its metadata log to damage (repair.ts), while that node joined, and
 * only the metadata that node may now lead can tell it so. Such a peer is reachable and its
 * messages are stepped, but it is no active node (no replica is placed on it) and no seed of
 * a membership command, until the registry names it; one the registry names as removed
 * cannot introduce itself.
 */
import type { NodeId } from '@quorumq/raft';

import type { ClusterNodes, SeedNode } from './cluster-nodes.js';

/**
 * Peers admitted by their own word at most (see `introduce`): a node rarely misses more than a
 * few joins, and each one admitted gets a link from this node.
 */
export const INTRODUCED_MAX = 16;

export class ClusterDirectory {
  private addresses: ReadonlyMap<NodeId, string>;
  private active: ReadonlySet<NodeId>;
  private readonly listeners: Array<(added: readonly NodeId[], removed: readonly NodeId[]) => void> = [];
  /** Whether the registry names the nodes (see ClusterNodes.managed). */
  private registryManaged = false;
  /** Peers that introduced themselves and that the registry does not name yet, with their peer addresses. */
  private readonly introduced = new Map<NodeId, string>();
  /** The nodes the registry names as removed: they cannot introduce themselves. */
  private removed: ReadonlySet<NodeId> = new Set();

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

  /**
   * The nodes this one knows, for a membership command of an unmanaged cluster
   * (ClusterNodes.seed). Without this node when `selfIsMember` is false: a joining node's
   * `peers` name itself and the running nodes, and it is no node of the cluster until added.
   */
  seed(selfIsMember = true): SeedNode[] | undefined {
    if (this.registryManaged) return undefined;
    return this.ids()
      .filter((id) => !this.introduced.has(id) && (selfIsMember || id !== this.selfId))
      .map((id) => ({ id, peerAddress: this.addresses.get(id)! }));
  }

  /** Whether the configuration or the registry names `id` (a node of the cluster, not only introduced). */
  names(id: NodeId): boolean {
    return this.addresses.has(id) && !this.introduced.has(id);
  }

  /** Whether the registry names `id` as removed (its calls are refused, and told so: PeerAuthenticator.refusal). */
  isRemoved(id: NodeId): boolean {
    return this.removed.has(id);
  }

  /** Whether `id` is here only because it introduced itself (see above). */
  isIntroduced(id: NodeId): boolean {
    return this.introduced.has(id);
  }

  /**
   * An authenticated peer `id` told its peer address. True when `id` is a node of the
   * cluster now: one this directory had, or one it admits from now on (not this node, not
   * removed, and while fewer than INTRODUCED_MAX are). The caller checked the address
   * (peerAddressProblem).
   */
  introduce(id: NodeId, peerAddress: string): boolean {
    if (id === this.selfId) return false;
    if (this.addresses.has(id)) return true;
    if (this.removed.has(id) || this.introduced.size >= INTRODUCED_MAX) return false;
    this.introduced.set(id, peerAddress);
    const addresses = new Map(this.addresses);
    addresses.set(id, peerAddress);
    this.addresses = addresses;
    for (const listener of this.listeners) listener([id], []);
    return true;
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
    const removedIds = new Set<NodeId>();
    for (const node of registry.all()) {
      if (node.state === 'removed') {
        removedIds.add(node.id);
        continue;
      }
      // The address this node was configured with wins: peers may see each other under other names.
      addresses.set(node.id, this.configured.get(node.id) ?? node.peerAddress);
      if (node.state === 'active') active.add(node.id);
    }
    // An introduced peer stays until the registry names it (then as the registry says).
    for (const [id, address] of this.introduced) {
      if (addresses.has(id) || removedIds.has(id)) this.introduced.delete(id);
      else addresses.set(id, address);
    }
    this.removed = removedIds;
    const added = [...addresses.keys()].filter((id) => !this.addresses.has(id) || this.addresses.get(id) !== addresses.get(id));
    const removed = [...this.addresses.keys()].filter((id) => !addresses.has(id));
    this.addresses = addresses;
    this.active = active;
    if (added.length === 0 && removed.length === 0) return;
    for (const listener of this.listeners) listener(added, removed);
  }
}
