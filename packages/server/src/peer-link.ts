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
  close(): void;
}
