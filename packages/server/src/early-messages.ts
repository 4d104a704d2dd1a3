/**
 * Raft messages for a queue group this node will create but has not yet: its declare is
 * committed, and the metadata entry is applied here a moment after the node that proposed
 * it. The preferred leader of a new queue campaigns as soon as it created its replica
 * (RaftGroup.campaign); its vote requests would otherwise be dropped here and sent again
 * only after an election timeout, and each declare would wait that long for its leader.
 * They are held instead, and stepped when the group is created. Bounded in number and age:
 * anything dropped is re-sent by Raft.
 */
import type { GroupMessage } from './raft-codec.js';

/** Messages held at most, over all groups. */
const HELD_MAX = 10_000;

export class EarlyMessages {
  private readonly held = new Map<string, { readonly at: number; readonly messages: GroupMessage[] }>();
  private count = 0;

  constructor(
    /** How long a message is held (an election timeout or two). */
    private readonly holdMs: number,
  ) {}

  /** Holds a message for a group not created yet; false when it is dropped (full). */
  hold(envelope: GroupMessage, now: number): boolean {
    if (this.count >= HELD_MAX) return false;
    let entry = this.held.get(envelope.groupId);
    if (entry === undefined) {
      entry = { at: now, messages: [] };
      this.held.set(envelope.groupId, entry);
    }
    entry.messages.push(envelope);
    this.count += 1;
    return true;
  }

  /** The messages held for `groupId`, oldest first; they are no longer held. */
  take(groupId: string): GroupMessage[] {
    const entry = this.held.get(groupId);
    if (entry === undefined) return [];
    this.held.delete(groupId);
    this.count -= entry.messages.length;
    return entry.messages;
  }

  /** Drops what was held too long (the group was never created here). */
  expire(now: number): void {
    if (this.count === 0) return;
    for (const [groupId, entry] of this.held) {
      // Oldest groups first (insertion order): stop at the first young one.
      if (now - entry.at < this.holdMs) break;
      this.held.delete(groupId);
      this.count -= entry.messages.length;
    }
  }
}
