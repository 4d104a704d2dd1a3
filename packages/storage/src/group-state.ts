import type { Entry, HardState, Snapshot } from '@quorumq/raft';
import { assert } from './assert.js';
import type { WalCorruption } from './errors.js';
import type { Checkpoint, Overwrite, RecoveringMark } from './kv-layout.js';
import type { WalPosition } from './wal.js';

export const EMPTY_HARD_STATE: HardState = { term: 0, vote: null, commit: 0 };

/** What the driver has handed to `persist`, durable or not: used to validate the next call. */
export interface SubmittedView {
  readonly lastIndex: number;
  readonly snapshotIndex: number;
  readonly hardState: HardState;
}

/**
 * One group's durable state in memory, plus what is needed to order and validate writes.
 * The durable fields change only once the corresponding write is durable.
 */
export class GroupState {
  member = false;
  /** Bumped when the log is reset (snapshot install, delete): completions of writes queued
   *  before it belong to the old log and must not touch the new one. */
  epoch = 0;
  floor: WalPosition | null = null;
  checkpoint: Checkpoint | null = null;
  snapshot: Snapshot | null = null;
  hardState: HardState = EMPTY_HARD_STATE;
  /** The WAL record `hardState` came from; null if it came from the checkpoint (or none). */
  hardStatePosition: WalPosition | null = null;
  /** Durable entries after the snapshot: contiguous, entries[i].index = snapshotIndex + 1 + i. */
  entries: Entry[] = [];
  /** During replay: records after a hole in the log, not (yet) explained by an overwrite. */
  replayGap: WalCorruption | null = null;
  /** Replay found entries missing: this group must not serve its log. */
  damage: WalCorruption | null = null;
  /** An earlier persist failed: the Raft core is ahead of the durable log until restored. */
  failure: Error | null = null;
  submitted: SubmittedView = { lastIndex: 0, snapshotIndex: 0, hardState: EMPTY_HARD_STATE };
  /**
   * Where this group's log overwrote a suffix: an entry at `index` written in segment `seq`
   * makes every record of this group at `index` or above in older segments dead. Segment
   * deletion needs this; replay handles overwrites by itself, reading segments in order.
   */
  overwrites: Overwrite[] = [];
  /** The overwrites as last saved in the KV store (replay cannot see those whose segment is gone). */
  savedOverwrites: readonly Overwrite[] = [];
  /** Serializes the writes of this group that need the KV store before the WAL. */
  lane: Promise<void> | null = null;
  /** Durable in the KV store: no hard state of this group with a higher term was ever written. */
  termBound = 0;
  /** The bound asked for by persists submitted so far (durable once their KV step is done). */
  termBoundSubmitted = 0;
  /** The snapshot the KV store points at could not be read back intact (missing, short, bad CRC). */
  lostSnapshot: string | null = null;
  /** Repaired after damage and not caught up yet (see repair.ts); kept in the KV store. */
  recovering: RecoveringMark | null = null;

  constructor(readonly id: string) {}

  snapshotIndex(): number {
    return this.snapshot?.meta.index ?? 0;
  }

  lastIndex(): number {
    return this.snapshotIndex() + this.entries.length;
  }

  /** The term of the last durable entry (or of the snapshot), 0 for an empty log. */
  lastTerm(): number {
    return this.entries[this.entries.length - 1]?.term ?? this.snapshot?.meta.term ?? 0;
  }

  /** Appends durable entries; an entry at index i replaces the entries at i and after. */
  appendDurable(entries: readonly Entry[]): void {
    const first = entries[0];
    if (first === undefined) return;
    assert(first.index > this.snapshotIndex(), () => `group ${this.id}: entry ${first.index} is inside the snapshot`);
    assert(first.index <= this.lastIndex() + 1, () => `group ${this.id}: entry ${first.index} after ${this.lastIndex()}`);
    this.entries.length = first.index - this.snapshotIndex() - 1;
    for (const entry of entries) this.entries.push(entry);
  }

  /** Records that a durable entry at `index` in segment `seq` replaced this log's suffix, if it did. */
  noteIfOverwrite(seq: number, index: number): void {
    if (index <= this.lastIndex()) this.overwrites.push({ seq, index });
  }

  /**
   * The highest index of this group's records in segment `seq` that are still live, given
   * the highest entry index the segment holds for it.
   */
  liveIndexIn(seq: number, maxEntryIndex: number): number {
    let live = maxEntryIndex;
    for (const overwrite of this.overwrites) if (overwrite.seq > seq) live = Math.min(live, overwrite.index - 1);
    return live;
  }

  /** True if a record of this group at `index` in segment `seq` was overwritten later. */
  isOverwritten(seq: number, index: number): boolean {
    return this.overwrites.some((overwrite) => overwrite.seq > seq && index >= overwrite.index);
  }

  /** Overwrites newer than no remaining segment concern only deleted segments. */
  forgetOverwritesAtOrBefore(oldestSeq: number): void {
    this.overwrites = this.overwrites.filter((overwrite) => overwrite.seq > oldestSeq);
  }

  setDurableHardState(hardState: HardState, position: WalPosition | null): void {
    this.hardState = hardState;
    this.hardStatePosition = position;
  }

  /** A local snapshot is durable: entries up to its index are no longer needed. */
  compactTo(snapshot: Snapshot): void {
    const drop = snapshot.meta.index - this.snapshotIndex();
    assert(drop > 0 && drop <= this.entries.length, () => `group ${this.id}: cannot compact to ${snapshot.meta.index}`);
    this.entries = this.entries.slice(drop);
    this.snapshot = snapshot;
    this.submitted = { ...this.submitted, snapshotIndex: Math.max(this.submitted.snapshotIndex, snapshot.meta.index) };
  }

  /** A snapshot from the leader is durable: the log restarts after it. */
  installSnapshot(snapshot: Snapshot, floor: WalPosition, checkpoint: Checkpoint): void {
    this.member = true;
    this.epoch += 1;
    this.floor = floor;
    this.snapshot = snapshot;
    this.entries = [];
    this.overwrites = [];
    this.checkpoint = checkpoint;
    this.setDurableHardState(checkpoint.hardState, null);
  }

  /** The group is deleted: forget everything but the floor. */
  reset(floor: WalPosition): void {
    this.member = false;
    this.epoch += 1;
    this.floor = floor;
    this.snapshot = null;
    this.entries = [];
    this.overwrites = [];
    this.checkpoint = null;
    this.setDurableHardState(EMPTY_HARD_STATE, null);
    this.damage = null;
    this.failure = null;
    this.lostSnapshot = null;
    this.recovering = null;
    this.termBound = 0;
    this.resetSubmitted();
  }

  /** Forget what was submitted but not made durable (after a restore). */
  resetSubmitted(): void {
    this.submitted = { lastIndex: this.lastIndex(), snapshotIndex: this.snapshotIndex(), hardState: this.hardState };
    this.termBoundSubmitted = this.termBound;
  }

  /**
   * Repaired after damage: the log restarts after `snapshot` (the group's own, if it was
   * intact, else none) at `floor`, with a hard state in a term it never acted in.
   */
  restartAfterDamage(snapshot: Snapshot | null, floor: WalPosition, checkpoint: Checkpoint, recovering: RecoveringMark, termBound: number): void {
    this.epoch += 1;
    this.floor = floor;
    this.snapshot = snapshot;
    this.entries = [];
    this.overwrites = [];
    this.savedOverwrites = [];
    this.checkpoint = checkpoint;
    this.setDurableHardState(checkpoint.hardState, null);
    this.replayGap = null;
    this.damage = null;
    this.lostSnapshot = null;
    this.recovering = recovering;
    this.termBound = termBound;
    this.resetSubmitted();
  }
}
