/**
 * What the node needs from its peers: Raft messages out (fire and forget, Raft resends) and
 * forwarded proposals (a request to the group's leader, answered with the machine's reply).
 * A real node uses the gRPC PeerTransport; the simulator its simulated network.
 */
import type { Message, NodeId } from '@quorumq/raft';

export interface PeerLink {
  send(groupId: string, messages: readonly Message[]): void;
  /**
   * Forwards an encoded proposal to `peer`, which leads `groupId` as far as this node knows.
   * Resolves with the reply's bytes. Rejects with a ForwardError (the peer refused or the
   * proposal failed there) or a call error: UNAVAILABLE when nothing was sent, and
   * DEADLINE_EXCEEDED when no answer came within `timeoutMs` (the outcome is then unknown).
   */
  propose(peer: NodeId, groupId: string, command: Uint8Array, timeoutMs: number): Promise<Uint8Array>;
  /**
   * Asks `peer` for the bytes of messages its newest snapshot of `groupId` (at
   * `snapshotIndex`) lists (see snapshot-bodies.ts): resolves with those of a prefix of
   * `ids`, in order (null for one it has no bytes for). Rejects with the call's error:
   * FAILED_PRECONDITION when that snapshot is not its newest any more, UNAVAILABLE when
   * nothing was sent, DEADLINE_EXCEEDED when no answer came within `timeoutMs`.
   */
  fetchBodies(peer: NodeId, groupId: string, snapshotIndex: number, ids: readonly number[], timeoutMs: number): Promise<ReadonlyArray<Uint8Array | null>>;
  /** A batch (or a beat) arrived from `peer` (a link that picks which peers to send to first uses it). */
  heardFrom?(peer: NodeId): void;
  /** Whether a connection to `peer` is up now. */
  isConnected(peer: NodeId): boolean;
  /** Called on every tick: reconnects and pings idle peers. */
  keepAlive(): void;
  /**
   * Sends every peer a sign of life (an empty batch on the Raft stream), once per group
   * heartbeat interval: quiet groups send no heartbeats, so peers watch the node instead
   * (see PeerLiveness).
   */
  beat(): void;
  /** The cluster's nodes changed (cluster-directory.ts): every node's peer address, this one's included. */
  setPeers(peers: ReadonlyMap<NodeId, string>): void;
  close(): void;
}
