/**
 * Which followers get a group's appends at once, and which a moment later (transport.ts).
 *
 * A leader's entry is committed once a majority holds it durably: with three members, the
 * leader and ONE follower. Sending every append to every follower at once wakes every
 * follower for every entry, and with one publish in flight each wake-up (a read, a durable
 * write, a reply, the leader reading that reply) costs about as much CPU as the entry's own
 * work, for a reply the commit does not wait for; the two followers' durable writes also
 * contend for the disk at the same moment. So, per group and per flush, the appends go at
 * once to as many followers as a majority needs (the "eager" ones), and to the others
 * `DEFERRED_APPEND_MS` later, together with whatever else has been deferred for them by
 * then (one wake-up for several entries).
 *
 * Nothing Raft relies on changes: a deferred message is a message the network delayed. A
 * confirm still waits for a majority's durable write. If an eager follower does not answer
 * (dead, paused, partitioned), the deferred followers get the entries a few ms later and
 * theirs make the majority; and a follower not heard from for `EAGER_HEARD_WITHIN_MS`, or
 * whose stream is down, is not chosen as eager any more.
 *
 * The choice is stable (healthy peers first, then by id): the same follower stays eager, so
 * the other one keeps receiving batches.
 */
import type { NodeId } from '@quorumq/raft';

import type { GroupMessage } from './raft-codec.js';

/** How long appends to a follower a commit does not need wait before they leave. */
export const DEFERRED_APPEND_MS = 2;

/** A peer counts as healthy (eager-worthy) when heard from this recently: beats come every 100 ms. */
export const EAGER_HEARD_WITHIN_MS = 250;

/** Followers that must hold an entry for a majority, of `followers` addressed (the leader being one member more). */
export function eagerFollowers(followers: number): number {
  return Math.floor((followers + 1) / 2);
}

/**
 * For each group with appends to more followers than it needs for a majority, the peers
 * whose appends of that group may wait. `healthy(peer)` says whether the peer is connected
 * and heard from lately. Only `append` messages are ever deferred.
 */
export function deferrableAppends(
  queuedByPeer: ReadonlyMap<NodeId, readonly GroupMessage[]>,
  healthy: (peer: NodeId) => boolean,
): Map<string, Set<NodeId>> {
  const peersByGroup = new Map<string, NodeId[]>();
  for (const [peer, messages] of queuedByPeer) {
    for (const { groupId, message } of messages) {
      if (message.type !== 'append') continue;
      const peers = peersByGroup.get(groupId);
      if (peers === undefined) peersByGroup.set(groupId, [peer]);
      else if (!peers.includes(peer)) peers.push(peer);
    }
  }
  const deferred = new Map<string, Set<NodeId>>();
  for (const [groupId, peers] of peersByGroup) {
    const eager = eagerFollowers(peers.length);
    if (eager >= peers.length) continue;
    const ranked = peers
      .map((peer) => ({ peer, healthy: healthy(peer) }))
      .sort((a, b) => (a.healthy === b.healthy ? (a.peer < b.peer ? -1 : a.peer > b.peer ? 1 : 0) : a.healthy ? -1 : 1));
    deferred.set(groupId, new Set(ranked.slice(eager).map((r) => r.peer)));
  }
  return deferred;
}
