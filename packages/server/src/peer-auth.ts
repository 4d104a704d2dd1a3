/**
 * Who may call the peer listener (RaftTransport/Stream, Peer/ProposeBatch,
 * Peer/FetchBodies, and the Broker calls other nodes proxy): a configured peer other than
 * this node, proven by the cluster secret, by its TLS client certificate, or by both when
 * both are configured. Every peer call carries the caller's node id and, when the cluster
 * has one, the secret (compared in constant time); with mutual TLS the certificate the
 * handshake verified against the cluster CA must name the node id the call claims (as its
 * CN or a DNS subject alternative name). A refusal is UNAUTHENTICATED with one message
 * whatever was wrong, so it tells a caller nothing about which node ids exist.
 *
 * Without peer TLS the secret travels in the clear: keep the network between the nodes
 * private (see docs/security.md).
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { Metadata, status as Status } from '@grpc/grpc-js';
import { PEER_NODE_ID_METADATA, PEER_SECRET_METADATA } from '@quorumq/proto/errors';
import type { NodeId } from '@quorumq/raft';

import { nodeIdProblem, peerAddressProblem } from './cluster-nodes.js';
import { certificateNames, verifiedPeerCertificate, type CallWithAuthContext } from './tls-identity.js';

// The metadata keys of the caller's node id and of the cluster secret (the wire contract's).
export { PEER_NODE_ID_METADATA, PEER_SECRET_METADATA };

/**
 * The calling node's client address (its `advertise`), sent on its Raft streams: the node
 * called tells clients that address in leader hints and ClusterStatus.
 */
export const PEER_CLIENT_ADDRESS_METADATA = 'quorumq-client-address';

/**
 * The calling node's peer address (where its peer listener is), sent on every peer call: a
 * node whose metadata does not name the caller yet admits it with that address
 * (ClusterDirectory.introduce), so that it can answer.
 */
export const PEER_ADDRESS_METADATA = 'quorumq-peer-address';

export const UNAUTHENTICATED_PEER = 'peer services are for the nodes of this cluster: the call has no valid cluster credentials';

/** The metadata a node sends with each of its peer calls. */
export function peerCallMetadata(selfId: NodeId, secret: string | null, clientAddress?: string, peerAddress?: string): Metadata {
  const metadata = new Metadata();
  metadata.set(PEER_NODE_ID_METADATA, selfId);
  if (secret !== null) metadata.set(PEER_SECRET_METADATA, secret);
  if (peerAddress !== undefined) metadata.set(PEER_ADDRESS_METADATA, peerAddress);
  if (clientAddress !== undefined) metadata.set(PEER_CLIENT_ADDRESS_METADATA, clientAddress);
  return metadata;
}

/** What the authenticator reads of a call: its metadata and its TLS peer certificate. */
export interface PeerCall extends CallWithAuthContext {
  readonly metadata: Metadata;
}

/** The node id a peer call claims (for log lines about refused calls; never trusted). */
export function claimedNodeId(call: { metadata: Metadata }): string {
  return String(call.metadata.get(PEER_NODE_ID_METADATA)[0] ?? '').slice(0, 64);
}

/** A refused peer call, as grpc-js sends it. */
export const unauthenticatedPeer = (): { code: Status; details: string } => ({ code: Status.UNAUTHENTICATED, details: UNAUTHENTICATED_PEER });

/** How the details of a call refused to a removed node start (see PeerAuthenticator.refusal). */
export const NODE_REMOVED_PEER = 'NODE_REMOVED';

/** A call refused to `id`, which proved its credentials and which the registry names as removed. */
export const removedPeer = (id: NodeId): { code: Status; details: string } => ({
  code: Status.FAILED_PRECONDITION,
  details: `${NODE_REMOVED_PEER}: node ${id} was removed from the cluster; it takes no part any more and its id cannot be used again`,
});

const digest = (value: string): Buffer => createHash('sha256').update(value, 'utf8').digest();

export class PeerAuthenticator {
  /** SHA-256 of the secret: equal-length inputs for timingSafeEqual, whatever a caller sends. */
  private readonly secretDigest: Buffer | null;

  constructor(
    private readonly selfId: NodeId,
    /**
     * The cluster's nodes now (cluster-directory.ts): a removed node's calls are refused. A
     * node they do not name is admitted when it tells its peer address and `introduce`
     * accepts it (ClusterDirectory.introduce).
     */
    private readonly peers: { has(id: NodeId): boolean; introduce?(id: NodeId, peerAddress: string): boolean; isRemoved?(id: NodeId): boolean },
    secret: string | null,
    /** The peer listener requires client certificates from the cluster CA (peer mutual TLS). */
    private readonly mutualTls = false,
  ) {
    this.secretDigest = secret === null ? null : digest(secret);
  }

  /** The authenticated peer's node id, or null (refuse the call with `refusal`). */
  authenticate(call: PeerCall): NodeId | null {
    const claimed = this.credentialed(call);
    if (claimed === null) return null;
    return this.peers.has(claimed) || this.introduces(call, claimed) ? claimed : null;
  }

  /**
   * The status to refuse a call `authenticate` refused with: UNAUTHENTICATED (which tells the
   * caller nothing about which node ids exist), but FAILED_PRECONDITION / NODE_REMOVED to a
   * node that proved the cluster's credentials and that the registry names as removed. Such a
   * node left the metadata group before the entry that marks it removed, so its own metadata
   * never tells it; its peers do (BrokerNode.toldRemoved).
   */
  refusal(call: PeerCall): { code: Status; details: string } {
    const claimed = this.credentialed(call);
    return claimed === null ? unauthenticatedPeer() : this.refusalOf(claimed);
  }

  /**
   * Whether `peer`, authenticated when its stream opened, is still a node of the cluster: a
   * stream stays open for as long as both nodes run, and a node removed since is refused
   * (`refusalOf`) at its next batch.
   */
  stillAdmits(peer: NodeId): boolean {
    return this.peers.has(peer);
  }

  /** The status to refuse `peer`, which proved the cluster's credentials, with (see `refusal`). */
  refusalOf(peer: NodeId): { code: Status; details: string } {
    return this.peers.isRemoved?.(peer) === true ? removedPeer(peer) : unauthenticatedPeer();
  }

  /** The node id `call` claims when it carries the cluster's credentials for it (the secret, the certificate), else null. */
  private credentialed(call: PeerCall): NodeId | null {
    // Neither a secret nor TLS: a single node, which serves no peer calls.
    if (this.secretDigest === null && !this.mutualTls) return null;
    const presented = single(call.metadata, PEER_SECRET_METADATA);
    const claimed = single(call.metadata, PEER_NODE_ID_METADATA);
    // The secret is checked first and always, so a refusal takes as long whatever the id.
    const secretOk = this.secretDigest === null || (presented !== null && timingSafeEqual(digest(presented), this.secretDigest));
    if (!secretOk || claimed === null || claimed === this.selfId || nodeIdProblem(claimed) !== null) return null;
    if (this.mutualTls) {
      const cert = verifiedPeerCertificate(call);
      if (cert === null || !certificateNames(cert).includes(claimed)) return null;
    }
    return claimed;
  }

  /** Whether the authenticated `claimed`, which the directory does not name, is admitted by the peer address it tells. */
  private introduces(call: PeerCall, claimed: NodeId): boolean {
    const address = single(call.metadata, PEER_ADDRESS_METADATA);
    return address !== null && peerAddressProblem(address) === null && (this.peers.introduce?.(claimed, address) ?? false);
  }
}

function single(metadata: Metadata, key: string): string | null {
  const values = metadata.get(key);
  if (values.length !== 1) return null;
  const value = values[0];
  return typeof value === 'string' ? value : null;
}
