import { assert } from './assert.js';
import { decodeConfigEntry, isMember } from './config.js';
import type { ClusterConfig, Entry, NodeId, Snapshot } from './types.js';

/**
 * The in-memory Raft log of one group: a snapshot, then the entries after its offset.
 *
 *   offsetIndex                stableIndex      lastIndex
 *       |  entries[0] ... (durable) |  (unstable)  |
 *
 * Entries after `stableIndex` have not been reported durable by the driver yet. The log
 * may keep some entries at or below the latest snapshot's index (so slightly lagging
 * followers get entries instead of a snapshot); then offsetIndex < snapshot index.
 */
export class RaftLog {
  /** Index of the entry just before entries[0] (0 for a log that was never compacted). */
  private offsetIndex: number;
  private offsetTerm: number;
  private entries: Entry[];
  /** The newest snapshot, received or taken; the leader sends it to lagging followers. */
  snapshot: Snapshot | null;
  /** A snapshot installed from the leader that the driver has not persisted yet. */
  pendingSnapshot: Snapshot | null = null;
  /** Invariant: applied <= committed <= lastIndex(). */
  committed: number;
  applied: number;
  /** Invariant: offsetIndex <= stableIndex <= lastIndex(). */
  stableIndex: number;
  /** Configurations in force from each index on; configs[0] is the one at offsetIndex. */
  private configs: Array<{ index: number; config: ClusterConfig }>;

  constructor(snapshot: Snapshot | null, entries: readonly Entry[], committed: number, initialConfig: ClusterConfig) {
    this.snapshot = snapshot;
    this.offsetIndex = snapshot?.meta.index ?? 0;
    this.offsetTerm = snapshot?.meta.term ?? 0;
    this.configs = [{ index: this.offsetIndex, config: snapshot?.meta.config ?? initialConfig }];
    this.entries = [];
    this.stableIndex = this.offsetIndex;
    this.committed = this.offsetIndex;
    this.applied = this.offsetIndex;
    for (const entry of entries) {
      assert(entry.index === this.lastIndex() + 1, () => `restored entries not contiguous at ${entry.index}`);
      assert(entry.term >= this.lastTerm(), () => `restored entry ${entry.index} has a lower term than its predecessor`);
      this.pushEntry(entry);
    }
    this.stableIndex = this.lastIndex();
    assert(committed <= this.lastIndex(), () => `restored commit ${committed} beyond last index ${this.lastIndex()}`);
    this.committed = Math.max(committed, this.offsetIndex);
  }

  firstIndex(): number {
    return this.offsetIndex + 1;
  }

  lastIndex(): number {
    return this.offsetIndex + this.entries.length;
  }

  lastTerm(): number {
    const last = this.entries[this.entries.length - 1];
    return last === undefined ? this.offsetTerm : last.term;
  }

  /** The term of the entry at `index`, or undefined if it is compacted or not in the log. */
  term(index: number): number | undefined {
    if (index === this.offsetIndex) return this.offsetTerm;
    return this.entries[index - this.offsetIndex - 1]?.term;
  }

  matchTerm(index: number, term: number): boolean {
    return this.term(index) === term;
  }

  entry(index: number): Entry | undefined {
    return this.entries[index - this.offsetIndex - 1];
  }

  /** True if a log ending at (lastIndex, lastTerm) is at least as up to date as this one. */
  isUpToDate(lastIndex: number, lastTerm: number): boolean {
    return lastTerm > this.lastTerm() || (lastTerm === this.lastTerm() && lastIndex >= this.lastIndex());
  }

  /**
   * Entries [from, to) capped at `maxCount` entries and `maxBytes` of data, but always at
   * least one entry so that a single oversized entry still makes progress.
   */
  slice(from: number, to: number, maxCount: number, maxBytes: number): Entry[] {
    assert(from > this.offsetIndex, () => `slice from ${from} is compacted (offset ${this.offsetIndex})`);
    assert(to <= this.lastIndex() + 1, () => `slice to ${to} beyond last index ${this.lastIndex()}`);
    const result: Entry[] = [];
    let bytes = 0;
    for (let index = from; index < to && result.length < maxCount; index++) {
      const entry = this.entry(index);
      assert(entry !== undefined, () => `missing entry ${index}`);
      bytes += entry.data.byteLength;
      if (result.length > 0 && bytes > maxBytes) break;
      result.push(entry);
    }
    return result;
  }

  /**
   * Appends entries from the leader after checking that the log matches at prevIndex.
   * Returns the index of the last new entry, or null if the log does not match.
   */
  maybeAppend(prevIndex: number, prevTerm: number, entries: readonly Entry[]): number | null {
    if (!this.matchTerm(prevIndex, prevTerm)) return null;
    const lastNewIndex = prevIndex + entries.length;
    const conflictIndex = this.findConflict(entries);
    if (conflictIndex !== 0) {
      assert(conflictIndex > this.committed, () => `entry ${conflictIndex} conflicts with the committed log (commit ${this.committed})`);
      const first = entries[0];
      assert(first !== undefined, 'conflict without entries');
      this.append(entries.slice(conflictIndex - first.index));
    }
    return lastNewIndex;
  }

  /**
   * The first index where `entries` disagree with the log (by term) or go beyond it, or 0
   * if the log already contains all of them.
   */
  findConflict(entries: readonly Entry[]): number {
    for (const entry of entries) {
      if (entry.index <= this.offsetIndex) continue;
      if (!this.matchTerm(entry.index, entry.term)) return entry.index;
    }
    return 0;
  }

  /**
   * For fast back-tracking: the largest index <= `index` whose term is <= `term`. Used by
   * the leader with a follower's hint, and by the follower to compute that hint.
   */
  findConflictByTerm(index: number, term: number): number {
    let candidate = Math.min(index, this.lastIndex());
    for (; candidate > this.offsetIndex; candidate--) {
      const candidateTerm = this.term(candidate);
      if (candidateTerm !== undefined && candidateTerm <= term) return candidate;
    }
    return candidate;
  }

  /** Appends (truncating a conflicting, uncommitted suffix first). */
  append(entries: readonly Entry[]): void {
    const first = entries[0];
    if (first === undefined) return;
    assert(first.index > this.committed, () => `append at ${first.index} would overwrite committed entries (commit ${this.committed})`);
    assert(first.index <= this.lastIndex() + 1, () => `append at ${first.index} leaves a gap after ${this.lastIndex()}`);
    if (first.index <= this.lastIndex()) this.truncateFrom(first.index);
    for (const entry of entries) {
      assert(entry.index === this.lastIndex() + 1, 'appended entries are not contiguous');
      assert(entry.term >= this.lastTerm(), () => `entry ${entry.index} term ${entry.term} is below the last term ${this.lastTerm()}`);
      this.pushEntry(entry);
    }
  }

  private truncateFrom(index: number): void {
    assert(index > this.committed, () => `truncating committed entry ${index}`);
    this.entries.length = index - this.offsetIndex - 1;
    this.stableIndex = Math.min(this.stableIndex, index - 1);
    while (this.configs.length > 1 && (this.configs[this.configs.length - 1]?.index ?? 0) >= index) this.configs.pop();
  }

  private pushEntry(entry: Entry): void {
    this.entries.push(entry);
    if (entry.type === 'config') this.configs.push({ index: entry.index, config: decodeConfigEntry(entry.data).config });
  }

  /** The configuration in force: the latest in the log, committed or not (dissertation 4.1). */
  latestConfig(): ClusterConfig {
    const latest = this.configs[this.configs.length - 1];
    assert(latest !== undefined, 'no configuration');
    return latest.config;
  }

  /**
   * Whether `id` is a member (voter or learner) of a configuration this log holds: the base
   * one (at the snapshot or the start) or one of its configuration entries, committed or not.
   * That covers the configuration being left while a change commits and the one being entered.
   */
  namesMember(id: NodeId): boolean {
    return this.configs.some(({ config }) => isMember(config, id));
  }

  /** Index of the latest configuration entry (or of the base configuration). */
  latestConfigIndex(): number {
    return this.configs[this.configs.length - 1]?.index ?? 0;
  }

  configAt(index: number): ClusterConfig {
    let result: ClusterConfig | undefined;
    for (const candidate of this.configs) {
      if (candidate.index > index) break;
      result = candidate.config;
    }
    assert(result !== undefined, () => `no configuration known at ${index}`);
    return result;
  }

  commitTo(index: number): void {
    if (index <= this.committed) return;
    assert(index <= this.lastIndex(), () => `commit ${index} beyond last index ${this.lastIndex()}`);
    this.committed = index;
  }

  /** Called when the driver reports entries up to (index, term) durable. */
  stableTo(index: number, term: number): void {
    if (index > this.stableIndex && this.matchTerm(index, term)) this.stableIndex = index;
  }

  unstableEntries(): Entry[] {
    return this.entries.slice(this.stableIndex - this.offsetIndex);
  }

  /** Committed entries that are durable here and not yet applied. */
  entriesToApply(maxBytes: number): Entry[] {
    const to = Math.min(this.committed, this.stableIndex);
    if (to <= this.applied) return [];
    return this.slice(this.applied + 1, to + 1, Number.MAX_SAFE_INTEGER, maxBytes);
  }

  appliedTo(index: number): void {
    assert(index <= this.committed, () => `applied ${index} beyond commit ${this.committed}`);
    if (index > this.applied) this.applied = index;
  }

  /** Replaces the whole log with a snapshot received from the leader. */
  restore(snapshot: Snapshot): void {
    assert(snapshot.meta.index > this.committed, 'restoring a snapshot behind the commit index');
    this.snapshot = snapshot;
    this.pendingSnapshot = snapshot;
    this.offsetIndex = snapshot.meta.index;
    this.offsetTerm = snapshot.meta.term;
    this.entries = [];
    this.configs = [{ index: snapshot.meta.index, config: snapshot.meta.config }];
    this.committed = snapshot.meta.index;
    this.applied = snapshot.meta.index;
    this.stableIndex = snapshot.meta.index;
  }

  /**
   * Records a snapshot taken locally at `snapshot.meta.index` (<= applied) and drops the
   * entries before `retainFrom`, never beyond the snapshot.
   */
  compact(snapshot: Snapshot, retainFrom: number): void {
    const index = snapshot.meta.index;
    assert(index <= this.applied, () => `snapshot at ${index} is beyond applied ${this.applied}`);
    assert(index <= this.stableIndex, () => `snapshot at ${index} is beyond the durable log ${this.stableIndex}`);
    this.snapshot = snapshot;
    const newOffset = Math.min(index, Math.max(this.offsetIndex, retainFrom - 1));
    if (newOffset <= this.offsetIndex) return;
    const newOffsetTerm = this.term(newOffset);
    assert(newOffsetTerm !== undefined, 'compaction point not in the log');
    const baseConfig = this.configAt(newOffset);
    this.entries = this.entries.slice(newOffset - this.offsetIndex);
    this.offsetIndex = newOffset;
    this.offsetTerm = newOffsetTerm;
    this.configs = [{ index: newOffset, config: baseConfig }, ...this.configs.filter((c) => c.index > newOffset)];
  }

  /**
   * The first index to keep when compacting to a snapshot at `index`: at most `count`
   * entries up to `index`, and no more than `bytes` of entry data (always keeping none
   * rather than one over the budget).
   */
  retainFrom(index: number, count: number, bytes: number): number {
    let from = index + 1;
    let kept = 0;
    while (from - 1 > this.offsetIndex && index - (from - 1) < count) {
      const entry = this.entry(from - 1);
      if (entry === undefined) break;
      kept += entry.data.byteLength;
      if (kept > bytes) break;
      from -= 1;
    }
    return from;
  }

  /** The term for a new snapshot at `index`, which must still be in the log. */
  termForSnapshot(index: number): number {
    const term = this.term(index);
    assert(term !== undefined, () => `no term for snapshot index ${index}`);
    return term;
  }
}
