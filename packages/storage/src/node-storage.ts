/**
 * The durable state of one node for all of its Raft groups: a shared WAL (entries and hard
 * states, one fsync per batch for every group) plus a KV store (membership, snapshots,
 * hard-state checkpoints and log-reset floors, see kv-layout.ts).
 *
 * Replay rules, applied record by record in WAL order:
 * - records of groups that are not members are ignored (deleted groups);
 * - records before the group's floor are ignored (its log was reset by an installed
 *   snapshot, or the group was deleted and created again);
 * - entries at or below the snapshot index are ignored (compacted);
 * - an entry at index i replaces the group's entries at i and after (a log suffix
 *   overwritten by a new leader); an entry after a gap marks the group damaged;
 * - a hard-state record replaces the group's hard state unless the checkpoint in the KV
 *   store was copied from a later record.
 *
 * Segment deletion relies on the same rules: a closed segment can go once, for every group
 * with records in it, those records are ignored on replay or (for entries) below the
 * group's snapshot; hard states about to disappear are checkpointed first.
 */
import type { Entry, HardState, RestoredState, Snapshot } from '@quorumq/raft';
import { assert } from './assert.js';
import {
  asError,
  GroupWriteFailedError,
  StaleSnapshotError,
  WalClosedError,
  WalCorruptionError,
  type WalCorruption,
  type WalFatalError,
} from './errors.js';
import { EMPTY_HARD_STATE, GroupState } from './group-state.js';
import type { KvOp, KvStore } from './kv.js';
import {
  decodeCheckpoint,
  decodeOverwrites,
  decodePosition,
  decodeRecovering,
  decodeSnapshotFileRef,
  decodeSnapshotMeta,
  decodeTermBound,
  EMPTY_VALUE,
  encodeJson,
  KV_PREFIX,
  kvKey,
  type Checkpoint,
  type Overwrite,
} from './kv-layout.js';
import { planRepairs, TERM_BOUND_STEP, type StorageRepair } from './repair.js';
import { GROUP_ID_BYTES_MAX, VOTE_BYTES_MAX, walRecordsOf, type WalRecord } from './record.js';
import {
  comparePositions,
  segmentFileName,
  Wal,
  type FlushStats,
  type SegmentSummary,
  type WalPosition,
  type WalRecovery,
  type WalUsage,
  type WalWriteMode,
} from './wal.js';
import { SnapshotFileError, SnapshotFiles, type SnapshotFileRef } from './snapshot-files.js';
import { joinPath, type WalFs } from './wal-fs.js';

export const SNAPSHOT_INTERVAL_DEFAULT = 1024;

export interface StorageLogger {
  warn(message: string): void;
}

export interface NodeStorageOptions {
  /** The WAL directory. */
  readonly dir: string;
  readonly fs: WalFs;
  /** Owned by NodeStorage from now on: `close()` closes it. */
  readonly kv: KvStore;
  /** Where snapshot files go (see snapshot-files.ts). Default: `<dir>/snapshots`. */
  readonly snapshotDir?: string;
  readonly segmentBytesMax?: number;
  /** `shouldSnapshot` says yes once this many entries were applied since the last snapshot. */
  readonly snapshotInterval?: number;
  /** The WAL failed (fsync error): the node must crash and recover. */
  readonly onFatal?: (error: WalFatalError) => void;
  readonly scheduleFlush?: (flush: () => void) => void;
  readonly onFlush?: (stats: FlushStats) => void;
  /** The WAL's clock for timing inline writes (see WalOptions.now); the simulator gives its own. */
  readonly now?: () => number;
  /** Default: console.warn. */
  readonly logger?: StorageLogger;
}

/** The persistence part of a Raft `Ready`. */
export interface PersistUpdate {
  readonly hardState: HardState | null;
  readonly entries: readonly Entry[];
  readonly snapshot: Snapshot | null;
}

/** What a persist needs from the KV store before its WAL records may be queued. */
interface KvPlan {
  readonly registerMember: boolean;
  /** The term bound to make durable first (see kv-layout.ts, termbound/), or null. */
  readonly raiseTermBound: number | null;
  /** A snapshot from the leader, with the hard state to checkpoint beside it. */
  readonly install: { readonly snapshot: Snapshot; readonly hardState: HardState } | null;
}

const consoleLogger: StorageLogger = { warn: (message) => console.warn(message) };
const noop = (): void => {};

export class NodeStorage {
  private closed = false;
  private closing: Promise<void> | null = null;
  /** All KV writes run one at a time, each computing its ops from the state it finds. */
  private kvQueue: Promise<void> = Promise.resolve();
  /** The member registrations and term bounds waiting for their KV write (see markGroup). */
  private marking: { readonly marks: Map<GroupState, number | null>; readonly written: Promise<void> } | null = null;
  /** What was found damaged when the storage opened and how it was repaired. */
  private repairsDone: readonly StorageRepair[] = [];
  private compaction: Promise<void> = Promise.resolve();

  private constructor(
    private readonly wal: Wal,
    private readonly kv: KvStore,
    private readonly groupStates: Map<string, GroupState>,
    /** `shouldSnapshot` says yes once this many entries were applied since the last snapshot. */
    readonly snapshotInterval: number,
    private readonly snapshotFiles: SnapshotFiles,
    /** Each group's current snapshot file (absent: none, or an older store's KV value). */
    private readonly snapshotFileOf: Map<string, string>,
  ) {}

  /**
   * Loads the KV state, replays the WAL (cutting off a torn tail, logged and reported in
   * `recovery`), and rebuilds every group. Corruption does not fail `open`: it is exposed
   * as `corruption` and every group then refuses to restore.
   */
  static async open(options: NodeStorageOptions): Promise<NodeStorage> {
    const snapshotInterval = options.snapshotInterval ?? SNAPSHOT_INTERVAL_DEFAULT;
    assert(Number.isSafeInteger(snapshotInterval) && snapshotInterval >= 1, `bad snapshotInterval ${snapshotInterval}`);
    const snapshotFiles = await SnapshotFiles.open(options.fs, options.snapshotDir ?? joinPath(options.dir, 'snapshots'));
    const snapshotFileOf = new Map<string, string>();
    const groups = await loadGroups(options.kv, snapshotFiles, snapshotFileOf);
    await snapshotFiles.removeUnreferenced(new Set(snapshotFileOf.values()));
    const wal = await Wal.open(
      {
        dir: options.dir,
        fs: options.fs,
        ...(options.segmentBytesMax === undefined ? {} : { segmentBytesMax: options.segmentBytesMax }),
        ...(options.onFatal === undefined ? {} : { onFatal: options.onFatal }),
        ...(options.scheduleFlush === undefined ? {} : { scheduleFlush: options.scheduleFlush }),
        ...(options.onFlush === undefined ? {} : { onFlush: options.onFlush }),
        ...(options.now === undefined ? {} : { now: options.now }),
      },
      (record, position) => replayRecord(groups, record, position),
    );
    for (const group of groups.values()) {
      if (group.replayGap !== null) group.damage ??= group.replayGap;
      group.replayGap = null;
      group.resetSubmitted();
    }
    const logger = options.logger ?? consoleLogger;
    logRecovery(logger, wal.recovery);
    const storage = new NodeStorage(wal, options.kv, groups, snapshotInterval, snapshotFiles, snapshotFileOf);
    await storage.repairDamage(logger);
    return storage;
  }

  get recovery(): WalRecovery {
    return this.wal.recovery;
  }

  /**
   * The damage found when the storage opened, each with its repair (see repair.ts): the
   * groups named here restarted from their snapshot (or empty) and recover from a leader.
   */
  get repairs(): readonly StorageRepair[] {
    return this.repairsDone;
  }

  /** The group was repaired and has not caught up yet: its replica must not vote (see RecoveryMark). */
  isRecovering(groupId: string): boolean {
    const group = this.groupStates.get(groupId);
    return group !== undefined && group.member && group.recovering !== null;
  }

  /**
   * Repairs what `open` found damaged (see repair.ts for the rules and why they are safe),
   * durably, before any group restores; gives old stores their term bounds; forgets the
   * recovery marks of groups that caught up before a crash.
   */
  private async repairDamage(logger: StorageLogger): Promise<void> {
    const corruption = this.wal.corruption;
    let seqMin = 0;
    for (const group of this.groupStates.values()) {
      seqMin = Math.max(seqMin, group.floor?.seq ?? 0, group.checkpoint?.position?.seq ?? 0, ...group.overwrites.map((o) => o.seq));
    }
    const restartSeq = corruption === null ? null : this.wal.restartSeq(seqMin + 1);
    const floor = restartSeq === null ? this.wal.position() : { seq: restartSeq, offset: 0 };
    const plan = planRepairs([...this.groupStates.values()], corruption, floor);
    if (plan.ops.length > 0) await this.kv.batch(plan.ops, { sync: true });
    plan.apply();
    if (restartSeq !== null) await this.wal.restartAfterCorruption(restartSeq);
    for (const warning of plan.warnings) logger.warn(warning);
    for (const repair of plan.repairs) {
      logger.warn(
        `REPAIR: group ${repair.groupId}: ${repair.damage} (${repair.detail}); dropped ${repair.droppedEntries} log entries` +
          `${repair.snapshotIndex === null ? ' and its snapshot' : `, kept its snapshot at ${repair.snapshotIndex}`}; ` +
          `it restarts in term ${repair.term} and neither votes nor campaigns until a leader gives it an entry of that term`,
      );
    }
    this.repairsDone = plan.repairs;
  }

  /** Unreadable WAL bytes found before the tail, or null. */
  /** The WAL's segment files and their bytes now (read when /metrics is scraped). */
  walUsage(): WalUsage {
    return this.wal.usage();
  }

  get corruption(): WalCorruption | null {
    return this.wal.corruption;
  }

  /** The WAL's next position (after every queued record). */
  position(): WalPosition {
    return this.wal.position();
  }

  /** The groups this node is a member of, sorted. */
  groups(): string[] {
    return [...this.groupStates.values()]
      .filter((group) => group.member)
      .map((group) => group.id)
      .sort();
  }

  /**
   * The group's durable state, to build its Raft node from. An unknown group restores
   * empty. Also forgets whatever was submitted but not made durable, and clears a failed
   * write: call it only while no persist of the group is in flight.
   */
  restoreGroup(groupId: string): RestoredState {
    const corruption = this.wal.corruption;
    if (corruption !== null) throw new WalCorruptionError(corruption, `cannot restore group ${groupId}`);
    const group = this.groupStates.get(groupId);
    if (group === undefined || !group.member) return { hardState: EMPTY_HARD_STATE, snapshot: null, entries: [] };
    if (group.damage !== null) throw new WalCorruptionError(group.damage, `group ${groupId}`);
    checkRestorable(group);
    group.failure = null;
    group.resetSubmitted();
    const recovering = group.recovering === null ? null : { term: group.recovering.term };
    return { hardState: group.hardState, snapshot: group.snapshot, entries: group.entries.slice(), recovering };
  }

  /** The group's saved snapshot (taken here or installed from a leader), or null. Changes nothing. */
  savedSnapshot(groupId: string): Snapshot | null {
    const group = this.groupStates.get(groupId);
    return group === undefined || !group.member ? null : group.snapshot;
  }

  /**
   * Makes a Ready's hard state, entries and snapshot durable; resolves once all of it is.
   * A snapshot means "installed from the leader": the log restarts after it.
   * Calls for one group must come in Ready order (they are queued in call order).
   */
  /**
   * Persists a Ready's hard state, entries and snapshot, in order with the group's earlier
   * persists. `mode` says how the WAL writes them (see WalWriteMode): 'lazy' only for a hard
   * state whose commit index alone moved (recomputed after a crash), 'inline' where nothing
   * waits on the event loop meanwhile (a follower's entries).
   */
  persist(groupId: string, update: PersistUpdate, mode: WalWriteMode = 'pooled'): Promise<void> {
    let group: GroupState;
    let plan: KvPlan;
    try {
      this.assertWritable();
      group = this.groupFor(groupId);
      this.assertGroupWritable(group);
      plan = planUpdate(group, update);
    } catch (error) {
      return Promise.reject(error);
    }
    if (!plan.registerMember && plan.raiseTermBound === null && plan.install === null && group.lane === null) {
      return this.enqueueUpdate(group, update, mode);
    }
    const enqueued = this.onLane(group, async () => {
      this.assertGroupWritable(group);
      try {
        await this.applyKvPlan(group, plan);
      } catch (error) {
        group.failure ??= asError(error); // later persists of the group were validated against this one
        throw error;
      }
      return { durable: this.enqueueUpdate(group, update, mode) };
    });
    return enqueued.then(({ durable }) => durable);
  }

  /**
   * Saves a snapshot the node took itself, drops the entries it covers, then deletes the
   * WAL segments no group needs any more. Throws StaleSnapshotError if the group already
   * has a snapshot at or after that index. The file is written before the group's turn in
   * its lane (and the node's KV queue): a long queue's snapshot takes a while to write, and
   * the group's appends, and every group's KV work, go on meanwhile.
   */
  async saveLocalSnapshot(groupId: string, snapshot: Snapshot): Promise<void> {
    this.assertWritable();
    const group = this.groupStates.get(groupId);
    assert(group !== undefined && group.member, () => `saveLocalSnapshot: unknown group ${groupId}`);
    this.checkNotStale(group, snapshot);
    // Its name (group, index, term) is no other snapshot's: one at this index or after makes it stale.
    const file = await this.snapshotFiles.write(group.id, snapshot.meta.index, snapshot.meta.term, snapshot.data);
    await this.onLane(group, async () => {
      this.assertGroupWritable(group);
      await this.kvStep(() => this.writeLocalSnapshot(group, snapshot, file));
    });
    await this.compact();
  }

  /** True once `snapshotInterval` entries were applied since the group's last snapshot. */
  shouldSnapshot(groupId: string, appliedIndex: number): boolean {
    const snapshotIndex = this.groupStates.get(groupId)?.snapshotIndex() ?? 0;
    return appliedIndex - snapshotIndex >= this.snapshotInterval;
  }

  /**
   * True when this group's entries up to `appliedIndex` keep a WAL segment alive that is
   * older than the one closed last: a snapshot at `appliedIndex` lets the
   * segment go. A group that writes little (the metadata, an idle queue) would otherwise keep
   * a segment full of other groups' dead entries on disk and read at every start.
   */
  pinsOldSegment(groupId: string, appliedIndex: number): boolean {
    const group = this.groupStates.get(groupId);
    if (group === undefined || !group.member || appliedIndex <= group.snapshotIndex()) return false;
    // Older than the segment closed last (the one before the segment being written).
    const old = this.wal.position().seq - 1;
    for (const segment of this.wal.segments()) {
      if (segment.seq >= old) continue;
      const maxEntryIndex = segment.groups.get(groupId);
      if (maxEntryIndex === undefined) continue;
      if (group.floor !== null && group.floor.seq > segment.seq) continue;
      const live = group.liveIndexIn(segment.seq, maxEntryIndex);
      if (live > group.snapshotIndex() && live <= appliedIndex) return true;
    }
    return false;
  }

  /** Removes the group and all of its state; its WAL records are ignored from now on. */
  async deleteGroup(groupId: string): Promise<void> {
    this.assertWritable();
    const group = this.groupStates.get(groupId);
    if (group === undefined) return;
    // In the group's lane: after a registration still being written (writeDelete does
    // nothing for a group that never became a member).
    await this.onLane(group, () => this.kvStep(() => this.writeDelete(group)));
  }

  /** Flushes what is queued and closes the WAL and the KV store. Idempotent. */
  close(): Promise<void> {
    this.closed = true;
    this.closing ??= this.closeOnce();
    return this.closing;
  }

  private async closeOnce(): Promise<void> {
    await this.compaction;
    await this.kvQueue;
    await this.wal.close();
    await this.kv.close();
  }

  // ------------------------------------------------------------------- writing

  private assertWritable(): void {
    if (this.closed) throw new WalClosedError('NodeStorage is closed');
    const corruption = this.wal.corruption;
    if (corruption !== null) throw new WalCorruptionError(corruption, 'storage is read-only until repaired');
    const fatal = this.wal.fatalError;
    if (fatal !== null) throw fatal;
  }

  private assertGroupWritable(group: GroupState): void {
    if (group.damage !== null) throw new WalCorruptionError(group.damage, `group ${group.id}`);
    if (group.failure !== null) {
      throw new GroupWriteFailedError(
        `an earlier persist of group ${group.id} failed (${group.failure.message}); restore the group first`,
        { cause: group.failure },
      );
    }
  }

  private groupFor(groupId: string): GroupState {
    let group = this.groupStates.get(groupId);
    if (group === undefined) {
      assertEncodable('group id', groupId, GROUP_ID_BYTES_MAX);
      group = new GroupState(groupId);
      this.groupStates.set(groupId, group);
    }
    return group;
  }

  /** Runs `step` after the group's earlier lane steps (KV-then-WAL writes stay in order). */
  private onLane<T>(group: GroupState, step: () => Promise<T>): Promise<T> {
    const result = (group.lane ?? Promise.resolve()).then(step);
    const lane = result.then(noop, noop);
    group.lane = lane;
    void lane.then(() => {
      if (group.lane === lane) group.lane = null;
    });
    return result;
  }

  private kvStep<T>(step: () => Promise<T>): Promise<T> {
    const result = this.kvQueue.then(step);
    this.kvQueue = result.then(noop, noop);
    return result;
  }

  private async applyKvPlan(group: GroupState, plan: KvPlan): Promise<void> {
    if (plan.install !== null) {
      const { snapshot, hardState } = plan.install;
      return this.kvStep(() => this.writeInstall(group, snapshot, hardState, plan.raiseTermBound));
    }
    if (group.member && (plan.raiseTermBound === null || plan.raiseTermBound <= group.termBound)) return;
    return this.markGroup(group, plan.raiseTermBound);
  }

  /**
   * Records that this node holds a replica of `group` (loaded on restart) before its first
   * records are written, and raises its term bound before a hard state passes it. The groups
   * marked while a batch waits for its turn in the KV queue join it: one synced LevelDB batch
   * for all of them, not one each (a burst of declares creates hundreds of groups a second,
   * and each synced write costs an fdatasync). A mark only ever comes first in its group's
   * lane, so moving it ahead of other groups' KV work reorders nothing that concerns it.
   */
  private markGroup(group: GroupState, termBound: number | null): Promise<void> {
    if (this.marking === null) {
      const marks = new Map<GroupState, number | null>();
      const written = this.kvStep(async () => {
        if (this.marking?.marks === marks) this.marking = null;
        const ops: KvOp[] = [];
        for (const [g, bound] of marks) {
          if (!g.member) ops.push({ type: 'put', key: kvKey('member', g.id), value: EMPTY_VALUE });
          if (bound !== null && bound > g.termBound) ops.push({ type: 'put', key: kvKey('termBound', g.id), value: encodeJson(bound) });
        }
        if (ops.length === 0) return;
        await this.kv.batch(ops, { sync: true });
        for (const [g, bound] of marks) {
          g.member = true;
          if (bound !== null) g.termBound = Math.max(g.termBound, bound);
        }
      });
      this.marking = { marks, written };
    }
    const previous = this.marking.marks.get(group) ?? null;
    this.marking.marks.set(group, termBound === null ? previous : Math.max(termBound, previous ?? 0));
    return this.marking.written;
  }

  /**
   * Saves an installed snapshot with the floor (the WAL position after everything queued
   * so far, so every older record of the group is ignored on replay) and a checkpoint of
   * the hard state. Its commit is the snapshot index: that much is committed (it is in the
   * snapshot) and durable now, while entries after it are not yet.
   */
  private async writeInstall(group: GroupState, snapshot: Snapshot, hardState: HardState, termBound: number | null): Promise<void> {
    const file = await this.snapshotFiles.write(group.id, snapshot.meta.index, snapshot.meta.term, snapshot.data);
    const floor = this.wal.position();
    const checkpoint: Checkpoint = {
      hardState: { term: hardState.term, vote: hardState.vote, commit: snapshot.meta.index },
      position: null,
    };
    await this.kv.batch(
      [
        { type: 'put', key: kvKey('member', group.id), value: EMPTY_VALUE },
        ...snapshotOps(group.id, snapshot, file),
        { type: 'put', key: kvKey('floor', group.id), value: encodeJson(floor) },
        { type: 'put', key: kvKey('checkpoint', group.id), value: encodeJson(checkpoint) },
        { type: 'del', key: kvKey('overwrites', group.id) },
        ...(termBound !== null && termBound > group.termBound ? [{ type: 'put' as const, key: kvKey('termBound', group.id), value: encodeJson(termBound) }] : []),
      ],
      { sync: true },
    );
    if (termBound !== null) group.termBound = Math.max(group.termBound, termBound);
    group.installSnapshot(snapshot, floor, checkpoint);
    group.savedOverwrites = [];
    await this.replaceSnapshotFile(group.id, file.file);
  }

  /** After the KV store points at `file`: the group's previous snapshot file goes. */
  private async replaceSnapshotFile(groupId: string, file: string | null): Promise<void> {
    const previous = this.snapshotFileOf.get(groupId);
    if (file === null) this.snapshotFileOf.delete(groupId);
    else this.snapshotFileOf.set(groupId, file);
    if (previous !== undefined && previous !== file) await this.snapshotFiles.remove(previous);
  }

  private checkNotStale(group: GroupState, snapshot: Snapshot): void {
    const { index } = snapshot.meta;
    if (index <= group.snapshotIndex()) {
      throw new StaleSnapshotError(`group ${group.id}: snapshot at ${index}, already have ${group.snapshotIndex()}`);
    }
  }

  /** Points the KV store at a local snapshot's file (written and durable already). */
  private async writeLocalSnapshot(group: GroupState, snapshot: Snapshot, file: SnapshotFileRef): Promise<void> {
    const { index, term } = snapshot.meta;
    try {
      // A snapshot installed while the file was written makes this one stale.
      this.checkNotStale(group, snapshot);
    } catch (error) {
      if (this.snapshotFileOf.get(group.id) !== file.file) await this.snapshotFiles.remove(file.file);
      throw error;
    }
    assert(index <= group.lastIndex(), () => `group ${group.id}: snapshot at ${index} beyond durable ${group.lastIndex()}`);
    const covered = group.entries[index - group.snapshotIndex() - 1];
    assert(covered?.term === term, () => `group ${group.id}: snapshot term ${term} != entry ${index}'s ${covered?.term}`);
    await this.kv.batch(snapshotOps(group.id, snapshot, file), { sync: true });
    group.compactTo(snapshot);
    await this.replaceSnapshotFile(group.id, file.file);
  }

  private async writeDelete(group: GroupState): Promise<void> {
    if (!group.member) return;
    const floor = this.wal.position();
    const ops: KvOp[] = [
      { type: 'del', key: kvKey('member', group.id) },
      { type: 'del', key: kvKey('checkpoint', group.id) },
      { type: 'del', key: kvKey('overwrites', group.id) },
      { type: 'del', key: kvKey('snapshotMeta', group.id) },
      { type: 'del', key: kvKey('snapshotData', group.id) },
      { type: 'del', key: kvKey('snapshotFile', group.id) },
      { type: 'del', key: kvKey('termBound', group.id) },
      { type: 'del', key: kvKey('recovering', group.id) },
      { type: 'put', key: kvKey('floor', group.id), value: encodeJson(floor) },
    ];
    await this.kv.batch(ops, { sync: true });
    group.reset(floor);
    group.savedOverwrites = [];
    await this.replaceSnapshotFile(group.id, null);
  }

  /** Queues the update's WAL records; the durable view advances when they are durable. */
  private enqueueUpdate(group: GroupState, update: PersistUpdate, mode: WalWriteMode): Promise<void> {
    const records = walRecordsOf(group.id, update.entries, update.hardState);
    if (records.length === 0) return Promise.resolve();
    const epoch = group.epoch;
    let durable: Promise<void>;
    try {
      const queued = this.wal.enqueue(records, () => {
        if (group.epoch !== epoch) return; // the log was reset meanwhile: these records are superseded
        const first = update.entries[0];
        if (first !== undefined) group.noteIfOverwrite(queued.positions[0]!.seq, first.index);
        group.appendDurable(update.entries);
        if (update.hardState !== null) group.setDurableHardState(update.hardState, queued.positions[records.length - 1]!);
        if (group.recovering !== null && group.lastTerm() >= group.recovering.term) this.endRecovery(group);
      }, mode);
      durable = queued.durable;
    } catch (error) {
      durable = Promise.reject(error);
    }
    return durable.catch((error: unknown) => {
      if (group.epoch === epoch) group.failure ??= asError(error);
      throw error;
    });
  }

  /**
   * The group's durable log holds an entry of its recovery term: it is intact again. The KV
   * mark goes lazily: found at the next open with the log past it, it is dropped then.
   */
  private endRecovery(group: GroupState): void {
    group.recovering = null;
    void this.kvStep(() => this.kv.batch([{ type: 'del', key: kvKey('recovering', group.id) }], { sync: false })).catch(noop);
  }

  // ---------------------------------------------------------------- compaction

  private compact(): Promise<void> {
    const run = this.compaction.then(() => this.compactOnce());
    this.compaction = run.then(noop, noop);
    return run;
  }

  /**
   * Deletes the segments no group needs. Before that, it checkpoints the hard states they
   * hold, and saves the overwrite markers they hold: a doomed segment may hold the records
   * that overwrote a group's suffix in an older segment that stays, and replay must not
   * bring those older records back.
   */
  private async compactOnce(): Promise<void> {
    if (this.closed || this.wal.corruption !== null || this.wal.fatalError !== null) return;
    const doomed = await this.kvStep(async () => {
      const segments = this.wal.segments();
      const seqs = segments.filter((segment) => !this.segmentNeeded(segment)).map((segment) => segment.seq);
      const doomedSeqs = new Set(seqs);
      const oldestKept = Math.min(...segments.filter((segment) => !doomedSeqs.has(segment.seq)).map((segment) => segment.seq), this.wal.position().seq);
      await this.checkpointHardStates(doomedSeqs, oldestKept);
      return seqs;
    });
    await this.wal.deleteSegments(doomed);
  }

  private segmentNeeded(segment: SegmentSummary): boolean {
    for (const [groupId, maxEntryIndex] of segment.groups) {
      const group = this.groupStates.get(groupId);
      if (group === undefined || !group.member) continue; // ignored on replay
      if (group.floor !== null && group.floor.seq > segment.seq) continue; // all before the floor
      if (group.liveIndexIn(segment.seq, maxEntryIndex) > group.snapshotIndex()) return true;
    }
    return false;
  }

  private async checkpointHardStates(doomedSeqs: ReadonlySet<number>, oldestKeptSeq: number): Promise<void> {
    const checkpoints: Array<[GroupState, Checkpoint]> = [];
    const ops: KvOp[] = [];
    for (const group of this.groupStates.values()) {
      if (!group.member) continue;
      const position = group.hardStatePosition;
      if (position !== null && doomedSeqs.has(position.seq)) {
        const checkpoint: Checkpoint = { hardState: group.hardState, position };
        checkpoints.push([group, checkpoint]);
        ops.push({ type: 'put', key: kvKey('checkpoint', group.id), value: encodeJson(checkpoint) });
      }
      // Overwrites newer than every remaining segment concern nothing that is left.
      group.forgetOverwritesAtOrBefore(oldestKeptSeq);
      if (!sameOverwrites(group.overwrites, group.savedOverwrites)) {
        ops.push(
          group.overwrites.length === 0
            ? { type: 'del', key: kvKey('overwrites', group.id) }
            : { type: 'put', key: kvKey('overwrites', group.id), value: encodeJson(group.overwrites) },
        );
      }
    }
    if (ops.length === 0) return;
    await this.kv.batch(ops, { sync: true });
    for (const [group, checkpoint] of checkpoints) group.checkpoint = checkpoint;
    for (const group of this.groupStates.values()) group.savedOverwrites = [...group.overwrites];
  }
}

function sameOverwrites(a: readonly Overwrite[], b: readonly Overwrite[]): boolean {
  return a.length === b.length && a.every((overwrite, i) => overwrite.seq === b[i]?.seq && overwrite.index === b[i]?.index);
}

// ------------------------------------------------------------------- validation

/**
 * Checks an update against what was submitted before (not only what is durable: several
 * persists of a group can be in flight) and advances the submitted view.
 */
function planUpdate(group: GroupState, update: PersistUpdate): KvPlan {
  const { entries, hardState, snapshot } = update;
  const before = group.submitted;
  checkContiguous(group.id, entries);
  const first = entries[0];
  if (snapshot !== null) {
    assert(snapshot.meta.index > before.snapshotIndex, () => `group ${group.id}: installing an older snapshot`);
    assert(first === undefined || first.index === snapshot.meta.index + 1, () => `group ${group.id}: entries must follow the snapshot`);
  } else if (first !== undefined) {
    assert(first.index > before.snapshotIndex, () => `group ${group.id}: entry ${first.index} is inside the snapshot`);
    assert(first.index <= before.lastIndex + 1, () => `group ${group.id}: entry ${first.index} after ${before.lastIndex}: gap`);
  }
  const lastIndex = entries[entries.length - 1]?.index ?? snapshot?.meta.index ?? before.lastIndex;
  if (hardState !== null) checkHardStateTransition(group.id, before.hardState, hardState, lastIndex);
  // The bound is raised durably before a hard state passes it, a step ahead so that it
  // takes a KV write only every TERM_BOUND_STEP terms.
  let raiseTermBound: number | null = null;
  if (hardState !== null && hardState.term > group.termBoundSubmitted) {
    raiseTermBound = hardState.term + TERM_BOUND_STEP;
    group.termBoundSubmitted = raiseTermBound;
  }
  group.submitted = {
    lastIndex,
    snapshotIndex: snapshot?.meta.index ?? before.snapshotIndex,
    hardState: hardState ?? before.hardState,
  };
  return {
    raiseTermBound,
    registerMember: !group.member,
    install: snapshot === null ? null : { snapshot, hardState: hardState ?? before.hardState },
  };
}

/** The string survives UTF-8 (no lone surrogates): replay must see the same id. */
function assertEncodable(what: string, value: string, bytesMax: number): void {
  const bytes = Buffer.from(value, 'utf8');
  assert(bytes.length > 0 && bytes.length <= bytesMax, () => `bad ${what} (${bytes.length} bytes)`);
  assert(bytes.toString('utf8') === value, () => `${what} is not well-formed UTF-16: ${JSON.stringify(value)}`);
}

function checkContiguous(groupId: string, entries: readonly Entry[]): void {
  for (let i = 0; i < entries.length; i++) {
    const entry = entries[i]!;
    assert(Number.isSafeInteger(entry.index) && entry.index >= 1, () => `group ${groupId}: bad entry index ${entry.index}`);
    const previous = entries[i - 1];
    assert(previous === undefined || entry.index === previous.index + 1, () => `group ${groupId}: entries not contiguous at ${entry.index}`);
  }
}

/** Raft safety: terms never go back, one vote per term, commit never goes back. */
function checkHardStateTransition(groupId: string, before: HardState, after: HardState, lastIndex: number): void {
  assert(after.term >= before.term, () => `group ${groupId}: term ${after.term} < ${before.term}`);
  assert(
    after.term > before.term || before.vote === null || after.vote === before.vote,
    () => `group ${groupId}: vote changed from ${before.vote} to ${after.vote} in term ${after.term}`,
  );
  assert(after.commit >= before.commit, () => `group ${groupId}: commit ${after.commit} < ${before.commit}`);
  assert(after.commit <= lastIndex, () => `group ${groupId}: commit ${after.commit} beyond last index ${lastIndex}`);
  if (after.vote !== null && after.vote !== before.vote) assertEncodable('vote', after.vote, VOTE_BYTES_MAX);
}

function checkRestorable(group: GroupState): void {
  const base = group.snapshotIndex();
  group.entries.forEach((entry, i) => {
    assert(entry.index === base + 1 + i, () => `group ${group.id}: entries not contiguous at ${entry.index}`);
  });
  assert(
    group.hardState.commit <= group.lastIndex(),
    () => `group ${group.id}: commit ${group.hardState.commit} beyond last index ${group.lastIndex()}`,
  );
}

/** The KV side of a snapshot whose bytes are durable in `file`. */
function snapshotOps(groupId: string, snapshot: Snapshot, file: SnapshotFileRef): KvOp[] {
  return [
    { type: 'put', key: kvKey('snapshotMeta', groupId), value: encodeJson(snapshot.meta) },
    { type: 'put', key: kvKey('snapshotFile', groupId), value: encodeJson(file) },
    // A store written before snapshot files kept the bytes in the KV store.
    { type: 'del', key: kvKey('snapshotData', groupId) },
  ];
}

// ---------------------------------------------------------------------- loading

async function loadGroups(kv: KvStore, snapshotFiles: SnapshotFiles, snapshotFileOf: Map<string, string>): Promise<Map<string, GroupState>> {
  const groups = new Map<string, GroupState>();
  const groupOf = (key: string, prefix: string): GroupState => {
    const id = key.slice(prefix.length);
    let group = groups.get(id);
    if (group === undefined) {
      group = new GroupState(id);
      groups.set(id, group);
    }
    return group;
  };
  for (const [key] of await kv.scan(KV_PREFIX.member)) groupOf(key, KV_PREFIX.member).member = true;
  for (const [key, value] of await kv.scan(KV_PREFIX.floor)) {
    groupOf(key, KV_PREFIX.floor).floor = decodePosition(value, key);
  }
  for (const [key, value] of await kv.scan(KV_PREFIX.checkpoint)) {
    const group = groupOf(key, KV_PREFIX.checkpoint);
    group.checkpoint = decodeCheckpoint(value, key);
    group.setDurableHardState(group.checkpoint.hardState, null);
  }
  for (const [key, value] of await kv.scan(KV_PREFIX.termBound)) {
    const group = groupOf(key, KV_PREFIX.termBound);
    group.termBound = decodeTermBound(value, key);
  }
  for (const [key, value] of await kv.scan(KV_PREFIX.recovering)) {
    groupOf(key, KV_PREFIX.recovering).recovering = decodeRecovering(value, key);
  }
  for (const [key, value] of await kv.scan(KV_PREFIX.overwrites)) {
    const group = groupOf(key, KV_PREFIX.overwrites);
    group.overwrites = decodeOverwrites(value, key);
    group.savedOverwrites = [...group.overwrites];
  }
  const data = new Map(await kv.scan(KV_PREFIX.snapshotData));
  const files = new Map(await kv.scan(KV_PREFIX.snapshotFile));
  for (const [key, value] of await kv.scan(KV_PREFIX.snapshotMeta)) {
    const group = groupOf(key, KV_PREFIX.snapshotMeta);
    const fileKey = kvKey('snapshotFile', group.id);
    const fileValue = files.get(fileKey);
    let bytes: Uint8Array | undefined;
    if (fileValue !== undefined) {
      const ref = decodeSnapshotFileRef(fileValue, fileKey);
      try {
        bytes = await snapshotFiles.read(ref, group.id);
      } catch (error) {
        if (!(error instanceof SnapshotFileError)) throw error;
        // Missing, short or failing its CRC: the group is repaired (see repair.ts).
        group.lostSnapshot = error.message;
        continue;
      }
      snapshotFileOf.set(group.id, ref.file);
    } else {
      bytes = data.get(kvKey('snapshotData', group.id));
    }
    if (bytes === undefined) {
      group.lostSnapshot = `snapshot of group ${group.id} has meta but no data`;
      continue;
    }
    group.snapshot = { meta: decodeSnapshotMeta(value, key), data: bytes };
  }
  return groups;
}

function replayRecord(groups: ReadonlyMap<string, GroupState>, record: WalRecord, position: WalPosition): void {
  const group = groups.get(record.groupId);
  if (group === undefined || !group.member) return;
  if (group.floor !== null && comparePositions(position, group.floor) < 0) return;
  if (record.kind === 'hardState') {
    const checkpointed = group.checkpoint?.position;
    if (checkpointed !== undefined && checkpointed !== null && comparePositions(position, checkpointed) <= 0) return;
    group.setDurableHardState(record.hardState, position);
    return;
  }
  const { entry } = record;
  if (group.damage !== null) return;
  // Overwritten by a record in a segment that is gone since (see compactOnce).
  if (group.isOverwritten(position.seq, entry.index)) return;
  if (entry.index <= group.snapshotIndex()) {
    // Covered by the snapshot, which replay loads before the records that led up to it. It
    // still overwrote everything after it that was written before it: drop that.
    group.noteIfOverwrite(position.seq, entry.index);
    group.entries = [];
    group.replayGap = null;
    return;
  }
  if (entry.index > group.lastIndex() + 1) {
    // Entries are missing before this one. That is damage, unless a later record overwrites
    // the log from at or before the hole: then this record was dead, and the records that
    // would have filled the hole were deleted with their segment. Decided at the end.
    group.replayGap ??= {
      segment: position.seq,
      file: segmentFileName(position.seq),
      offset: position.offset,
      reason: `entry ${entry.index} follows ${group.lastIndex()}: entries are missing`,
    };
    return;
  }
  group.replayGap = null;
  group.noteIfOverwrite(position.seq, entry.index);
  // Copy the data out of the segment buffer so that buffer can be freed.
  group.appendDurable([{ index: entry.index, term: entry.term, type: entry.type, data: new Uint8Array(entry.data) }]);
}

function logRecovery(logger: StorageLogger, recovery: WalRecovery): void {
  const { truncated, corruption } = recovery;
  if (truncated !== null) {
    logger.warn(
      `WAL: cut a torn tail off segment ${truncated.segment} (${truncated.file}) at offset ${truncated.offset}: ` +
        `${truncated.bytesDiscarded} bytes discarded (${truncated.reason})`,
    );
  }
  if (corruption !== null) {
    logger.warn(
      `WAL: CORRUPTION in segment ${corruption.segment} (${corruption.file}) at offset ${corruption.offset}: ` +
        `${corruption.reason}; no group will restore until repaired`,
    );
  }
}
