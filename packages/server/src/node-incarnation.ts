/**
 * Who a node is beyond its id: an incarnation, a random id written to its data directory the
 * first time it starts (docs/architecture.md, "A lost data directory"). A node that comes
 * back under the same id with an empty data directory (its disk replaced, the directory
 * deleted) has a new incarnation, and it must not take part: it remembers no vote, so it
 * could vote twice in one term, and it lost every entry it acknowledged.
 *
 * Each node tells its incarnation on its Raft streams, and records (durably, in its own KV
 * store) the first incarnation each peer told it. A peer's stream under another incarnation
 * is refused (INCARNATION_CHANGED), and each stream also tells the peer which of its
 * incarnations this node knew: a node that learns, either way, that its peers knew another
 * incarnation of it stops before it steps a single message, and says what to do (start it
 * under a new id with `join`, and replace the old id: docs/operations.md).
 */
import { randomBytes } from 'node:crypto';

import type { KvStore } from '@quorumq/storage';
import type { NodeId } from '@quorumq/raft';

const OWN_KEY = 'node/incarnation';
const PEER_PREFIX = 'peer-incarnation/';

/** The status details of a stream refused for a changed incarnation: the caller's data was lost. */
export const INCARNATION_CHANGED = 'INCARNATION_CHANGED';
/** The status details of a stream refused by a node whose own data was lost (the caller is fine). */
export const LOST_DATA = 'LOST_DATA';

/** Raft stream metadata: the sender's incarnation, and the one it knew of the receiver. */
export const INCARNATION_METADATA = 'quorumq-incarnation';
export const YOUR_INCARNATION_METADATA = 'quorumq-your-incarnation';

const INCARNATION = /^[0-9a-f]{32}$/;

export class NodeIncarnations {
  private constructor(
    readonly own: string,
    private readonly peers: Map<NodeId, string>,
    private readonly kv: Pick<KvStore, 'batch'> | null,
  ) {}

  /** Reads this node's incarnation (making one in a new data directory) and its peers'. */
  static async load(kv: KvStore): Promise<NodeIncarnations> {
    let own = decode(await kv.get(OWN_KEY));
    if (own === null) {
      own = randomBytes(16).toString('hex');
      await kv.batch([{ type: 'put', key: OWN_KEY, value: Buffer.from(own) }], { sync: true });
    }
    const peers = new Map<NodeId, string>();
    for (const [key, value] of await kv.scan(PEER_PREFIX)) {
      const incarnation = decode(value);
      if (incarnation !== null) peers.set(key.slice(PEER_PREFIX.length), incarnation);
    }
    return new NodeIncarnations(own, peers, kv);
  }

  /** Without a store (the simulator, tests): records in memory only. */
  static inMemory(own: string): NodeIncarnations {
    return new NodeIncarnations(own, new Map(), null);
  }

  /** The incarnation of `peer` this node knows, if it ever talked to it. */
  known(peer: NodeId): string | undefined {
    return this.peers.get(peer);
  }

  /**
   * A peer's stream presents `presented`: true if it is the incarnation known (or the first
   * one seen, recorded now), false if the peer came back under the same id with another.
   */
  accept(peer: NodeId, presented: string | undefined): boolean {
    if (presented === undefined || !INCARNATION.test(presented)) return true;
    const known = this.peers.get(peer);
    if (known !== undefined) return known === presented;
    this.peers.set(peer, presented);
    void this.kv?.batch([{ type: 'put', key: PEER_PREFIX + peer, value: Buffer.from(presented) }], { sync: true }).catch(() => {
      // Recorded again on the next stream the peer opens after a restart of this node.
    });
    return true;
  }

  /** Whether `claimed` (what a peer knew of this node) says this node's data directory is not the one it had. */
  lostOwnData(claimed: string | undefined): boolean {
    return claimed !== undefined && INCARNATION.test(claimed) && claimed !== this.own;
  }
}

function decode(value: Uint8Array | undefined): string | null {
  if (value === undefined) return null;
  const text = Buffer.from(value).toString();
  return INCARNATION.test(text) ? text : null;
}

/** What a node whose peers knew another incarnation of it tells its operator. */
export function lostDataMessage(nodeId: NodeId, peer: NodeId): string {
  return (
    `node ${nodeId}'s data directory is not the one its peers know (${peer} knew another incarnation of ${nodeId}): ` +
    `its data was lost or replaced, and it must not rejoin under the same id (it remembers no vote and none of the entries it acknowledged). ` +
    `Start it with a new node id and join set (quorumq node --join), add it (quorumq cluster add-node NEW PEER-ADDRESS), ` +
    `then replace the old one (quorumq cluster remove-node ${nodeId} --replace-with NEW); see docs/operations.md`
  );
}
