import { assert } from './assert.js';
import type { Snapshot } from './types.js';

/**
 * How the leader sends to one follower:
 * - probe: one append at a time until the follower's match index is found;
 * - replicate: optimistic pipelining, at most `inflightAppendsMax` appends unacknowledged;
 * - snapshot: the follower is behind the leader's first index and receives a snapshot.
 */
export type ProgressState = 'probe' | 'replicate' | 'snapshot';

export class Progress {
  /** Highest index known replicated (durably) on the follower. Invariant: match < next. */
  match = 0;
  next: number;
  state: ProgressState = 'probe';
  /** In probe state: an append is outstanding, wait for its answer or a heartbeat. */
  probeSent = false;
  /** In replicate state: the last index of each append in flight, oldest first. */
  private readonly inflight: number[] = [];
  /** The commit index last sent to the follower in an append. */
  commitSent = 0;
  /** Set by any message from the follower; check-quorum clears it every election timeout. */
  recentActive = false;
  /** The snapshot being sent, and the next byte to send / the bytes acknowledged. */
  snapshot: Snapshot | null = null;
  snapshotSentOffset = 0;
  snapshotAckedOffset = 0;
  /** Ticks since the snapshot transfer last made progress; a stalled chunk is re-sent. */
  snapshotStallTicks = 0;

  constructor(
    next: number,
    private readonly inflightAppendsMax: number,
  ) {
    assert(next >= 1, 'next index must be positive');
    assert(inflightAppendsMax >= 1, 'in-flight window must hold at least one append');
    this.next = next;
  }

  becomeProbe(): void {
    // After a snapshot the follower has at least the snapshot's index.
    if (this.state === 'snapshot' && this.snapshot !== null) {
      this.next = Math.max(this.match + 1, this.snapshot.meta.index + 1);
    } else {
      this.next = this.match + 1;
    }
    this.resetState('probe');
  }

  becomeReplicate(): void {
    this.next = this.match + 1;
    this.resetState('replicate');
  }

  becomeSnapshot(snapshot: Snapshot): void {
    this.resetState('snapshot');
    this.snapshot = snapshot;
  }

  private resetState(state: ProgressState): void {
    this.state = state;
    this.probeSent = false;
    this.inflight.length = 0;
    this.snapshot = null;
    this.snapshotSentOffset = 0;
    this.snapshotAckedOffset = 0;
    this.snapshotStallTicks = 0;
  }

  /** Records a successful append up to `index`. Returns false if it was stale. */
  maybeUpdate(index: number): boolean {
    let updated = false;
    if (this.match < index) {
      this.match = index;
      updated = true;
      this.probeSent = false;
    }
    this.next = Math.max(this.next, index + 1);
    this.freeInflightTo(index);
    return updated;
  }

  /**
   * Handles a rejected append for `rejected` (its prevLogIndex); `probeFrom` is where the
   * leader computed, from the follower's hint, that the logs may match. Returns false if
   * the rejection is stale.
   */
  maybeDecrTo(rejected: number, probeFrom: number): boolean {
    // A rejection at or below the match index is stale. (Or the follower lost entries it
    // had acknowledged as durable; probing the same index again would only ping-pong.)
    if (rejected <= this.match) return false;
    if (this.state === 'replicate') {
      this.next = this.match + 1;
      return true;
    }
    // In probe state, only the answer to the last probe counts.
    if (this.next - 1 !== rejected) return false;
    this.next = Math.max(Math.min(rejected, probeFrom + 1), this.match + 1, 1);
    this.probeSent = false;
    return true;
  }

  /** Whether the leader must hold back appends to this follower for now. */
  isPaused(): boolean {
    switch (this.state) {
      case 'probe':
        return this.probeSent;
      case 'replicate':
        return this.inflight.length >= this.inflightAppendsMax;
      case 'snapshot':
        return true;
    }
  }

  /** Records that an append ending at `lastIndex` (or an empty probe) was sent. */
  sentAppend(lastIndex: number, entryCount: number): void {
    switch (this.state) {
      case 'replicate':
        if (entryCount > 0) {
          this.next = lastIndex + 1;
          this.inflight.push(lastIndex);
        }
        return;
      case 'probe':
        this.probeSent = true;
        return;
      case 'snapshot':
        assert(false, 'sending appends while a snapshot is in flight');
    }
  }

  private freeInflightTo(index: number): void {
    let freed = 0;
    while (freed < this.inflight.length && (this.inflight[freed] ?? Infinity) <= index) freed++;
    this.inflight.splice(0, freed);
  }

  inflightCount(): number {
    return this.inflight.length;
  }
}
