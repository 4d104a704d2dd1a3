/**
 * Node-level failure detection, for quiet groups (RaftNode.isQuiet): a quiet group sends no
 * heartbeats, so the node watches its peers instead. Every node sends each peer a beat
 * (an empty batch on the peer stream) every group heartbeat interval, and any batch from a
 * peer counts as hearing from it. A peer not heard from for an election timeout is reported
 * silent once; the node then wakes the quiet groups that peer leads (they elect another
 * leader) and those this node leads with it as a member (they check their quorum again).
 *
 * Time this node itself was stalled (its event loop blocked, the process paused) says
 * nothing about its peers: their beats wait unread in the socket. A check that comes late
 * restarts every peer's clock instead of reporting them all silent.
 */
import type { Message, NodeId } from '@quorumq/raft';

/**
 * The group id of a beat sent as a message (the simulator's links; a real node sends an
 * empty batch): no group has it, so a node only counts it as hearing from the sender.
 */
export const NODE_BEAT_GROUP = '';

/** A beat as a message, for a link that carries messages only. */
export function beatMessage(from: NodeId, to: NodeId): Message {
  return { type: 'heartbeat', from, to, term: 0, commit: 0, readSeq: 0, quiesce: false };
}

export class PeerLiveness {
  private readonly lastHeard = new Map<NodeId, number>();
  private readonly silent = new Set<NodeId>();
  private lastCheck: number;

  constructor(
    peers: Iterable<NodeId>,
    /** An election timeout, in ms. */
    private readonly silentAfterMs: number,
    now: number,
  ) {
    for (const peer of peers) this.lastHeard.set(peer, now);
    this.lastCheck = now;
  }

  /** A batch (or a beat) arrived from `peer`. */
  heard(peer: NodeId, now: number): void {
    if (!this.lastHeard.has(peer)) return;
    this.lastHeard.set(peer, now);
    this.silent.delete(peer);
  }

  /** Whether `peer` was reported silent and has not been heard from since. */
  isSilent(peer: NodeId): boolean {
    return this.silent.has(peer);
  }

  /** The peers that went silent since the last check (called on every tick). */
  check(now: number): NodeId[] {
    const gap = now - this.lastCheck;
    this.lastCheck = now;
    if (gap > this.silentAfterMs / 2) {
      // This node was stalled: what it did not read says nothing of its peers.
      for (const peer of this.lastHeard.keys()) if (!this.silent.has(peer)) this.lastHeard.set(peer, now);
      return [];
    }
    const found: NodeId[] = [];
    for (const [peer, at] of this.lastHeard) {
      if (this.silent.has(peer) || now - at < this.silentAfterMs) continue;
      this.silent.add(peer);
      found.push(peer);
    }
    return found;
  }
}
