/**
 * Node-level failure detection, for quiet groups (RaftNode.isQuiet): a quiet group sends no
 * heartbeats, so the node watches its peers instead. Every node sends each peer a beat
 * (an empty batch on the peer stream) every group heartbeat interval, and any batch from a
 * peer counts as hearing from it. A peer not heard from for an election timeout is reported
 * silent once; the node then has the groups that peer leads elect another leader, and wakes
 * the quiet groups this node leads with it as a member if it leaves them no majority.
 *
 * Time this node itself was stalled (its event loop blocked, the process paused) says
 * nothing about its peers: their beats wait unread in the socket. A check that comes late
 * (more than a quarter of the timeout after the last) does not count the lateness against
 * any peer: a peer is silent after an election timeout of this node's running time without
 * a batch. A node late on every check still finds a dead peer, later: each check counts at
 * least a quarter of the timeout.
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

interface Heard {
  /** When the peer was last heard from. */
  readonly at: number;
  /** `stalledMs` then. */
  readonly stalledMs: number;
}

export class PeerLiveness {
  private readonly lastHeard = new Map<NodeId, Heard>();
  private readonly silent = new Set<NodeId>();
  private lastCheck: number;
  /** The lateness of all checks so far, not counted against the peers. */
  private stalledMs = 0;

  constructor(
    peers: Iterable<NodeId>,
    /** An election timeout, in ms. */
    private readonly silentAfterMs: number,
    now: number,
    /** A gap after which a peer heard again counts as back (see `heard`). */
    private readonly backAfterMs: number = silentAfterMs / 4,
  ) {
    for (const peer of peers) this.lastHeard.set(peer, { at: now, stalledMs: 0 });
    this.lastCheck = now;
  }

  /**
   * A batch (or a beat) arrived from `peer`. Returns true when it is the first for at least
   * `backAfterMs` (a quarter of an election timeout by default; beats come every heartbeat
   * interval), this node's own stalls not counted: the peer was out of reach, and a quiet
   * group may have left it behind (see RaftGroup.peerBack).
   */
  heard(peer: NodeId, now: number): boolean {
    const before = this.lastHeard.get(peer);
    if (before === undefined) return false;
    this.lastHeard.set(peer, { at: now, stalledMs: this.stalledMs });
    this.silent.delete(peer);
    return now - before.at - (this.stalledMs - before.stalledMs) >= this.backAfterMs;
  }

  /** The peers changed (membership): a new one counts as heard now, a removed one is forgotten. */
  setPeers(peers: Iterable<NodeId>, now: number): void {
    const wanted = new Set(peers);
    for (const peer of [...this.lastHeard.keys()]) {
      if (wanted.has(peer)) continue;
      this.lastHeard.delete(peer);
      this.silent.delete(peer);
    }
    for (const peer of wanted) if (!this.lastHeard.has(peer)) this.lastHeard.set(peer, { at: now, stalledMs: this.stalledMs });
  }

  /** Whether `peer` was reported silent and has not been heard from since. */
  isSilent(peer: NodeId): boolean {
    return this.silent.has(peer);
  }

  /**
   * A member of a group `peer` leads asks for votes: it found `peer` silent. Reports `peer`
   * silent now (true, once) if nothing came from it for an election timeout, this node's
   * stalls included; that member's own finding stands for the reading this node may not
   * have done. A node loaded by the first survivor's elections would otherwise find a dead
   * peer late, and its groups would not elect the leaders it was chosen for.
   */
  confirmSilent(peer: NodeId, now: number): boolean {
    const heard = this.lastHeard.get(peer);
    if (heard === undefined || this.silent.has(peer) || now - heard.at < this.silentAfterMs) return false;
    this.silent.add(peer);
    return true;
  }

  /** The peers that went silent since the last check (called on every tick). */
  check(now: number): NodeId[] {
    this.stalledMs += Math.max(0, now - this.lastCheck - this.silentAfterMs / 4);
    this.lastCheck = now;
    const found: NodeId[] = [];
    for (const [peer, heard] of this.lastHeard) {
      if (this.silent.has(peer) || now - heard.at - (this.stalledMs - heard.stalledMs) < this.silentAfterMs) continue;
      this.silent.add(peer);
      found.push(peer);
    }
    return found;
  }
}
