/**
 * Which followers get a group's appends at once, which a moment later, and how the held
 * ones travel (transport.ts).
 *
 * A leader's entry is committed once a majority holds it durably: with three members, the
 * leader and ONE follower. Sending every append to every follower at once wakes every
 * follower for every entry, and with one publish in flight each wake-up (a read, a durable
 * write, a reply, the leader reading that reply) costs about as much CPU as the entry's own
 * work, for a reply the commit does not wait for; the two followers' durable writes also
 * contend for the disk at the same moment. So, per group and per flush, the appends go at
 * once to as many followers as a majority needs (the "eager" ones). The others' appends
 * are held, and leave together, joined into one append per group (`coalesceAppends`):
 * - once they carry `DEFERRED_APPEND_ENTRIES_MAX` entries or `DEFERRED_APPEND_BYTES_MAX`
 *   bytes (a batch entry, or a burst between two answers of the eager follower);
 * - at the latest `DEFERRED_APPEND_MS` after the first was held (at one publish in flight,
 *   the held follower then takes about twenty entries per wake-up instead of one);
 * - as soon as an eager follower has not answered for `HEDGE_AFTER_MS` (its disk is slow
 *   for a moment, it paused, it died): the held follower's answer then makes the majority;
 * - or with the next other message to that follower, before it.
 *
 * Appends are held only while no healthy follower has entries unanswered (an empty append
 * commits nothing: it waits with its group's held appends, transport.ts `mayHold`). At one
 * operation in flight the eager follower has answered before the next append comes, so the third
 * member is spared a wake-up per entry; under load (a pipeline: the eager follower still
 * working on earlier appends) every follower gets every append at once, the held ones going
 * first, and a commit takes the first two durable copies of three, so a follower slow for a
 * moment (a collection, a slow write, code not optimised yet) does not hold commits up.
 *
 * Nothing Raft relies on changes: a held message is a message the network delayed, and a
 * joined append is what the follower would hold after taking its parts one by one. A
 * confirm still waits for a majority's durable write. If an eager follower does not answer
 * (dead, paused, partitioned), the held followers get the entries `HEDGE_AFTER_MS` later
 * and theirs make the majority; and a follower not heard from for `EAGER_HEARD_WITHIN_MS`,
 * or whose stream is down, is not chosen as eager any more.
 *
 * The choice is stable (healthy peers first, then by id): the same follower stays eager, so
 * the other one keeps receiving batches.
 */
import type { AppendMessage, Entry, NodeId } from '@quorumq/raft';

import type { GroupMessage } from './raft-codec.js';

/** The longest appends to a follower a commit does not need are held. */
export const DEFERRED_APPEND_MS = 20;

/** Held appends leave at once when they carry this many entries... */
export const DEFERRED_APPEND_ENTRIES_MAX = 32;

/** ... or this many bytes of entries. */
export const DEFERRED_APPEND_BYTES_MAX = 32 * 1024;

/**
 * Held appends leave at once when a follower that was sent appends at once has not answered
 * for this long: about two durable writes on a quiet disk, so usually a slow disk or a
 * paused or dead process. The held follower's answer then makes the majority instead.
 */
export const HEDGE_AFTER_MS = 2;

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
    if (peers.length === 2) {
      // A group of three: the one follower that is not first in the ranking waits.
      const [a, b] = peers as [NodeId, NodeId];
      deferred.set(groupId, new Set([ranksFirst(a, healthy(a), b, healthy(b)) ? b : a]));
      continue;
    }
    const ranked = peers
      .map((peer) => ({ peer, healthy: healthy(peer) }))
      .sort((x, y) => (ranksFirst(x.peer, x.healthy, y.peer, y.healthy) ? -1 : x.peer === y.peer ? 0 : 1));
    deferred.set(groupId, new Set(ranked.slice(eager).map((r) => r.peer)));
  }
  return deferred;
}

/** The ranking of followers for eagerness: healthy ones first, then by id. */
function ranksFirst(a: NodeId, aHealthy: boolean, b: NodeId, bHealthy: boolean): boolean {
  return aHealthy === bHealthy ? a < b : aHealthy;
}

/** Entry bytes one coalesced append may carry (a raft batch holds up to RAFT_BATCH_BYTES_MAX). */
export const COALESCED_APPEND_BYTES_MAX = 4 * 1024 * 1024;

/**
 * Joins each run of a group's appends that continue one another into one append: the held
 * appends of a deferred follower are typically one per entry, and one append for all of
 * them costs the follower one step and one reply instead of one each (and the leader reads
 * one reply). Two appends join when nothing else of their group lies between them, they
 * share sender, term and receiver, and the second starts where the first ends; the joined
 * append carries both entry lists and the later commit index (it only grows within a
 * term), which is what the follower would hold after taking them one by one. Messages of
 * other groups keep their order; a group's messages keep theirs.
 */
export function coalesceAppends(messages: readonly GroupMessage[], bytesMax = COALESCED_APPEND_BYTES_MAX): GroupMessage[] {
  const out: GroupMessage[] = [];
  // Per group: where in `out` its last message is, when that message is an append still open
  // to joining, and the entry list of a joined append (ours to extend: no copy per join).
  const open = new Map<string, { at: number; bytes: number; joined: Entry[] | null }>();
  for (const item of messages) {
    const { groupId, message } = item;
    if (message.type !== 'append') {
      open.delete(groupId);
      out.push(item);
      continue;
    }
    const bytes = entryBytes(message.entries);
    const last = open.get(groupId);
    const previous = last === undefined ? undefined : out[last.at]!.message;
    if (
      last !== undefined &&
      previous !== undefined &&
      previous.type === 'append' &&
      previous.from === message.from &&
      previous.to === message.to &&
      previous.term === message.term &&
      previous.prevLogIndex + previous.entries.length === message.prevLogIndex &&
      last.bytes + bytes <= bytesMax
    ) {
      if (last.joined === null) last.joined = [...previous.entries];
      for (const entry of message.entries) last.joined.push(entry);
      out[last.at] = { groupId, message: { ...previous, entries: last.joined, commit: Math.max(previous.commit, message.commit) } };
      last.bytes += bytes;
      continue;
    }
    open.set(groupId, { at: out.length, bytes, joined: null });
    out.push(item);
  }
  return out;
}

function entryBytes(entries: AppendMessage['entries']): number {
  let bytes = 0;
  for (const entry of entries) bytes += entry.data.byteLength;
  return bytes;
}

/** What a follower's held appends carry. */
export interface HeldLoad {
  entries: number;
  bytes: number;
}

/** Adds held messages to `load`; true once the held appends should leave without waiting. */
export function holdFills(load: HeldLoad, held: readonly GroupMessage[]): boolean {
  for (const { message } of held) {
    if (message.type !== 'append') continue;
    load.entries += message.entries.length;
    load.bytes += entryBytes(message.entries);
  }
  return load.entries >= DEFERRED_APPEND_ENTRIES_MAX || load.bytes >= DEFERRED_APPEND_BYTES_MAX;
}
