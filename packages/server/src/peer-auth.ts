/**
 * Who may call the peer services (RaftTransport/Stream, Peer/ProposeBatch): a configured
 * peer that presents the cluster secret. Every peer call carries two metadata entries, the
 * caller's node id and the secret; the secret is compared in constant time. A refusal is
 * UNAUTHENTICATED with one message whatever was wrong, so it tells a caller nothing about
 * which node ids exist.
 *
 * Until peers get their own authenticated listener (a later issue), the secret travels in
 * the clear with the call: it keeps clients on the shared port out of the peer services,
 * not an eavesdropper on the network between the nodes.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { Metadata, status as Status } from '@grpc/grpc-js';
import { PEER_NODE_ID_METADATA, PEER_SECRET_METADATA } from '@quorumq/proto/errors';
import type { NodeId } from '@quorumq/raft';

// The metadata keys of the caller's node id and of the cluster secret (the wire contract's).
export { PEER_NODE_ID_METADATA, PEER_SECRET_METADATA };

export const UNAUTHENTICATED_PEER = 'peer services are for the nodes of this cluster: the call has no valid cluster credentials';

/** The metadata a node sends with each of its peer calls. */
export function peerCallMetadata(selfId: NodeId, secret: string): Metadata {
  const metadata = new Metadata();
  metadata.set(PEER_NODE_ID_METADATA, selfId);
  metadata.set(PEER_SECRET_METADATA, secret);
  return metadata;
}

/** A refused peer call, as grpc-js sends it. */
export const unauthenticatedPeer = (): { code: Status; details: string } => ({ code: Status.UNAUTHENTICATED, details: UNAUTHENTICATED_PEER });

const digest = (value: string): Buffer => createHash('sha256').update(value, 'utf8').digest();

export class PeerAuthenticator {
  /** SHA-256 of the secret: equal-length inputs for timingSafeEqual, whatever a caller sends. */
  private readonly secretDigest: Buffer | null;

  constructor(
    private readonly selfId: NodeId,
    private readonly peers: ReadonlyMap<NodeId, string>,
    secret: string | null,
  ) {
    this.secretDigest = secret === null ? null : digest(secret);
  }

  /** The authenticated peer's node id, or null (refuse the call as UNAUTHENTICATED). */
  authenticate(metadata: Metadata): NodeId | null {
    const presented = single(metadata, PEER_SECRET_METADATA);
    const claimed = single(metadata, PEER_NODE_ID_METADATA);
    // The secret is checked first and always, so a refusal takes as long whatever the id.
    const secretOk = this.secretDigest !== null && presented !== null && timingSafeEqual(digest(presented), this.secretDigest);
    if (!secretOk || claimed === null || claimed === this.selfId || !this.peers.has(claimed)) return null;
    return claimed;
  }
}

function single(metadata: Metadata, key: string): string | null {
  const values = metadata.get(key);
  if (values.length !== 1) return null;
  const value = values[0];
  return typeof value === 'string' ? value : null;
}
