/**
 * The node's write-ahead log, shared by all of its Raft groups.
 *
 * Segments: files named by a zero-padded sequence number. A record never straddles two
 * segments; the WAL moves to a new segment when the next record would push the current one
 * past `segmentBytesMax` (a record larger than that gets a segment of its own). A segment
 * is made durable before the next one is created, so only the last segment can have a
 * torn tail.
 *
 * Group commit: `enqueue`/`append` encode the records at once and queue them. Everything
 * queued in one event-loop turn goes out in ONE durable write (`WalFile.appendDurable`: on
 * the real disk a writev to a segment opened O_DSYNC, so no separate fdatasync); while that
 * flush is in flight new records queue up and go out together in the next one. A promise
 * resolves only after the write covering its records returned.
 *
 * Inline writes: a flush whose records all asked for it (`WalWriteMode` 'inline', a
 * follower's entries) and that is small is written on the event loop
 * (`WalFile.appendDurableNow`) instead of through libuv's thread pool, whose round trip
 * (wake a pool thread, then wake the loop when it is done) is pure latency for a node that
 * has nothing to do until the write is durable. An inline write that takes long (a slow
 * disk) turns them off for a while, so a slow disk does not hold the event loop write after write.
 *
 * Positions: every record gets its (segment, offset) when it is queued, not when it is
 * written, so `position()` is exact even with records still queued. Positions never go
 * backwards, not even after a failed write (the WAL then moves on to a fresh segment), so
 * a position handed out once is never reused by a different record.
 *
 * Failures: a durable write that fails for any reason but a lack of room (ENOSPC, EDQUOT,
 * EFBIG), like a failed fdatasync, is fatal (state `failed`, every pending and future
 * append rejects with WalFatalError, `onFatal` fires): the kernel may have dropped the
 * dirty pages and there is no honest way to retry. A write refused for lack of room is
 * truncated away and the batch rejected with WalDiskFullError/WalWriteError, together with
 * everything queued behind it (it may depend on the failed records); if the truncate
 * fails, that is fatal.
 */
import { assert } from './assert.js';
import {
  describeError,
  errnoCode,
  WalClosedError,
  WalCorruptionError,
  WalDiskFullError,
  WalFatalError,
  WalWriteError,
  type WalCorruption,
} from './errors.js';
import { encodeRecords, RECORD_BYTES_MIN, scanSegment, type EncodedRecords, type WalRecord } from './record.js';
import { joinPath, type OpenOptions, type WalFile, type WalFs } from './wal-fs.js';

export const SEGMENT_BYTES_MAX_DEFAULT = 64 * 1024 * 1024;
const SEGMENT_NAME_DIGITS = 16;
/** Segments keep zero-filled space ahead of their writes, up to their size (node-wal-fs.ts); recovery reads it as the end. */
function segmentOpen(segmentBytesMax: number): OpenOptions {
  return { preallocate: segmentBytesMax };
}
const SEGMENT_NAME = /^(\d{16})\.wal$/;

/** Where a record starts: segment sequence number, byte offset in that segment. */
export interface WalPosition {
  readonly seq: number;
  readonly offset: number;
}

export function comparePositions(a: WalPosition, b: WalPosition): number {
  return a.seq !== b.seq ? a.seq - b.seq : a.offset - b.offset;
}

export function segmentFileName(seq: number): string {
  return `${String(seq).padStart(SEGMENT_NAME_DIGITS, '0')}.wal`;
}

/** A torn tail cut off during recovery. */
export interface TornTail {
  readonly segment: number;
  readonly file: string;
  /** The segment's length after truncation. */
  readonly offset: number;
  readonly bytesDiscarded: number;
  readonly reason: string;
}

export interface WalRecovery {
  readonly segments: number;
  readonly records: number;
  readonly truncated: TornTail | null;
  readonly corruption: WalCorruption | null;
}

/** Reported after each successful flush (metrics, benchmarks). */
export interface FlushStats {
  readonly appends: number;
  readonly records: number;
  readonly bytes: number;
  /** Segments written (2+ when the flush crossed a segment boundary). */
  readonly segments: number;
}

/** The WAL's files now (metrics): segments on disk and their bytes, the active one included. */
export interface WalUsage {
  readonly segments: number;
  readonly bytes: number;
}

/** What compaction needs to know about a closed segment. */
export interface SegmentSummary {
  readonly seq: number;
  readonly bytes: number;
  /** Per group with records here: its highest entry index here (0 if only hard states). */
  readonly groups: ReadonlyMap<string, number>;
}

export interface WalOptions {
  readonly dir: string;
  readonly fs: WalFs;
  readonly segmentBytesMax?: number;
  /** Called once when the WAL fails; the node must crash and recover. */
  readonly onFatal?: (error: WalFatalError) => void;
  /** How to run the flush "at the end of this turn". Default: setImmediate. */
  readonly scheduleFlush?: (flush: () => void) => void;
  readonly onFlush?: (stats: FlushStats) => void;
  /** The largest flush written inline (see WalWriteMode). Default INLINE_BYTES_MAX; 0: never. */
  readonly inlineBytesMax?: number;
  /** A clock in milliseconds, to time inline writes. Default: performance.now. */
  readonly now?: () => number;
}

/**
 * How an enqueue's records reach the disk:
 * - 'pooled' (the default): a flush starts at the end of the turn and writes them through
 *   the file's `appendDurable` (libuv's thread pool on the real disk);
 * - 'inline': the same, but the flush may be written on the event loop (`appendDurableNow`)
 *   when none of its records is 'pooled', it is at most `inlineBytesMax` and no inline write
 *   was slow lately (INLINE_SLOW_MS);
 * - 'lazy': starts no flush; the records wait for the next enqueue that does (or for
 *   `close`). For records whose loss in a crash is harmless (a Raft commit index, which is
 *   recomputed), so that they cost no durable write of their own.
 */
export type WalWriteMode = 'pooled' | 'inline' | 'lazy';

/**
 * Flushes up to this size may be written inline: a one-at-a-time publish's entry (about
 * 1.2 KB) and what a few queues add in one turn, not the batches of a busy node, whose
 * write would hold the event loop for longer and which overlap better with the loop's other
 * work (docs/architecture.md, Performance).
 */
export const INLINE_BYTES_MAX = 16 * 1024;
/** An inline write slower than this (ms) stops inline writes for INLINE_HOLD_MS. */
export const INLINE_SLOW_MS = 10;
export const INLINE_HOLD_MS = 10_000;

/** Called for every valid record during recovery, in log order. */
export type ReplayVisitor = (record: WalRecord, position: WalPosition) => void;

export interface Enqueued {
  /** Where each record will be, in order. */
  readonly positions: readonly WalPosition[];
  /** Resolves once every record is durable. */
  readonly durable: Promise<void>;
}

type WalState =
  | { readonly kind: 'open' }
  | { readonly kind: 'closing' }
  | { readonly kind: 'closed' }
  | { readonly kind: 'failed'; readonly error: WalFatalError }
  | { readonly kind: 'corrupt'; readonly corruption: WalCorruption };

/** Per-segment bookkeeping: size and, per group, the highest entry index it holds. */
class Segment implements SegmentSummary {
  bytes = 0;
  readonly groups = new Map<string, number>();

  constructor(readonly seq: number) {}

  note(record: WalRecord): void {
    notePerGroup(this.groups, record);
  }

  absorb(chunk: Chunk): void {
    this.bytes += chunk.bytes;
    for (const [groupId, index] of chunk.groups) {
      this.groups.set(groupId, Math.max(index, this.groups.get(groupId) ?? 0));
    }
  }
}

/** Queued bytes that go to one segment, starting at `offset`. */
class Chunk {
  readonly bufs: Buffer[] = [];
  bytes = 0;
  readonly groups = new Map<string, number>();

  constructor(
    readonly seq: number,
    readonly offset: number,
  ) {}

  add(buf: Buffer): void {
    this.bufs.push(buf);
    this.bytes += buf.length;
  }

  note(record: WalRecord): void {
    notePerGroup(this.groups, record);
  }
}

function notePerGroup(groups: Map<string, number>, record: WalRecord): void {
  const index = record.kind === 'entry' ? record.entry.index : 0;
  groups.set(record.groupId, Math.max(index, groups.get(record.groupId) ?? 0));
}

/**
 * Where queued records are encoded: two reusable buffers, one filled by `enqueue` while the
 * other's records are written. A flush takes everything queued, and flushes run one at a
 * time, so when the next flush starts the buffer the previous one wrote is free again.
 * Reusing warm memory instead of a fresh allocation per batch spares the page faults of
 * touching new pages (more than half the cost of encoding a 1 KB record). A batch that does
 * not fit gets a buffer of its own.
 */
class EncodeArenas {
  private readonly buffers: [Buffer | null, Buffer | null] = [null, null];
  private filling = 0;
  private used = 0;

  constructor(private readonly bytes: number) {}

  readonly allocate = (size: number): Buffer => {
    if (size > this.bytes - this.used) return Buffer.allocUnsafe(size);
    const buffer = (this.buffers[this.filling] ??= Buffer.allocUnsafeSlow(this.bytes));
    const slice = buffer.subarray(this.used, this.used + size);
    // Keep slices 8-byte aligned.
    this.used += (size + 7) & ~7;
    return slice;
  };

  /** A flush took everything queued so far: fill the other buffer from now on. */
  switch(): void {
    this.filling = 1 - this.filling;
    this.used = 0;
  }
}

const ENCODE_ARENA_BYTES = 4 * 1024 * 1024;

interface Pending {
  readonly records: number;
  readonly onDurable: (() => void) | undefined;
  readonly resolve: () => void;
  readonly reject: (error: unknown) => void;
}

export class Wal {
  private state: WalState = { kind: 'open' };
  private active: Segment;
  private activeFile: WalFile | null;
  /** Segments before the active one, by seq (ascending insertion order). */
  private readonly closedSegments = new Map<number, Segment>();
  /** Where the next queued record goes. */
  private nextSeq: number;
  private nextOffset: number;
  private queue: Chunk[] = [];
  private pending: Pending[] = [];
  private flushing = false;
  private flushScheduled = false;
  /** Something queued asked for a flush (any WalWriteMode but 'lazy'). */
  private urgent = false;
  /** First segment the in-flight flush writes to: its records are not acknowledged yet. */
  private inFlightFirstSeq: number | null = null;
  private idleWaiters: Array<() => void> = [];
  private closing: Promise<void> | null = null;
  private readonly segmentBytesMax: number;
  private readonly scheduleFlush: (flush: () => void) => void;
  private readonly arenas = new EncodeArenas(ENCODE_ARENA_BYTES);
  private readonly inlineBytesMax: number;
  private readonly now: () => number;
  /** Something queued for the next flush must be written through the pool (WalWriteMode 'pooled'). */
  private pooledQueued = false;
  /** No inline write before this time (`now`): one was slow. */
  private inlineHeldUntil = Number.NEGATIVE_INFINITY;
  /** The highest segment number found on disk when opened (0: none). */
  private lastSeqOnDisk = 0;

  private constructor(
    private readonly options: WalOptions,
    readonly recovery: WalRecovery,
    active: Segment,
    activeFile: WalFile | null,
  ) {
    this.segmentBytesMax = options.segmentBytesMax ?? SEGMENT_BYTES_MAX_DEFAULT;
    this.scheduleFlush = options.scheduleFlush ?? ((flush) => setImmediate(flush));
    this.inlineBytesMax = options.inlineBytesMax ?? INLINE_BYTES_MAX;
    this.now = options.now ?? (() => performance.now());
    this.active = active;
    this.activeFile = activeFile;
    this.nextSeq = active.seq;
    this.nextOffset = active.bytes;
  }

  /**
   * Replays every segment in order through `visit`, cuts off a torn tail, and opens the
   * last segment for appending. On corruption the WAL opens read-only (state `corrupt`):
   * nothing is truncated, nothing can be appended.
   */
  static async open(options: WalOptions, visit: ReplayVisitor): Promise<Wal> {
    const segmentBytesMax = options.segmentBytesMax ?? SEGMENT_BYTES_MAX_DEFAULT;
    assert(
      Number.isSafeInteger(segmentBytesMax) && segmentBytesMax >= RECORD_BYTES_MIN,
      () => `bad segmentBytesMax ${segmentBytesMax}`,
    );
    const { fs, dir } = options;
    await fs.mkdirp(dir);
    const seqs = (await fs.list(dir)).flatMap((name) => {
      const match = SEGMENT_NAME.exec(name);
      return match === null ? [] : [Number(match[1])];
    });
    seqs.sort((a, b) => a - b);
    const replay = await replaySegments(fs, dir, seqs, visit);
    const last = replay.segments[replay.segments.length - 1];
    if (replay.recovery.corruption !== null) {
      const wal = new Wal(options, replay.recovery, last ?? new Segment(0), null);
      wal.state = { kind: 'corrupt', corruption: replay.recovery.corruption };
      wal.lastSeqOnDisk = seqs[seqs.length - 1] ?? 0;
      return wal;
    }
    const { active, file } = await openActiveSegment(fs, dir, last, replay.recovery.truncated, segmentBytesMax);
    const wal = new Wal(options, replay.recovery, active, file);
    for (const segment of replay.segments) if (segment !== active) wal.closedSegments.set(segment.seq, segment);
    wal.lastSeqOnDisk = seqs[seqs.length - 1] ?? 0;
    return wal;
  }

  /**
   * The segment a corrupt WAL restarts in (see `restartAfterCorruption`): after every
   * segment on disk and at least `seqMin` (past every position the caller ever recorded).
   */
  restartSeq(seqMin: number): number {
    return Math.max(seqMin, this.lastSeqOnDisk + 1);
  }

  /**
   * Leaves the corrupt state: deletes every segment and starts afresh in segment `seq`
   * (from `restartSeq`). The caller has made every record in the old segments irrelevant
   * first (for NodeStorage: a floor at `seq` for every group), so a crash part-way through
   * leaves nothing that replay would use.
   */
  async restartAfterCorruption(seq: number): Promise<void> {
    assert(this.state.kind === 'corrupt', 'restartAfterCorruption of a WAL that is not corrupt');
    assert(seq > this.lastSeqOnDisk, () => `restart in segment ${seq}, but ${this.lastSeqOnDisk} exists`);
    const { fs, dir } = this.options;
    const file = await fs.openAppend(this.pathOf(seq), segmentOpen(this.segmentBytesMax));
    await fs.syncDir(dir);
    for (const name of await fs.list(dir)) {
      const match = SEGMENT_NAME.exec(name);
      if (match !== null && Number(match[1]) !== seq) await fs.unlink(joinPath(dir, name));
    }
    await fs.syncDir(dir);
    this.closedSegments.clear();
    this.active = new Segment(seq);
    this.activeFile = file;
    this.nextSeq = seq;
    this.nextOffset = 0;
    this.lastSeqOnDisk = seq;
    this.state = { kind: 'open' };
  }

  get corruption(): WalCorruption | null {
    return this.state.kind === 'corrupt' ? this.state.corruption : null;
  }

  get fatalError(): WalFatalError | null {
    return this.state.kind === 'failed' ? this.state.error : null;
  }

  /** Segment files and their bytes written so far (queued records not yet flushed excluded). */
  usage(): WalUsage {
    let bytes = this.active.bytes;
    for (const segment of this.closedSegments.values()) bytes += segment.bytes;
    return { segments: this.closedSegments.size + 1, bytes };
  }

  /** Where the next record will go: after every record queued so far. */
  position(): WalPosition {
    return { seq: this.nextSeq, offset: this.nextOffset };
  }

  /**
   * Queues records; the next flush writes them durably, in order. Throws (synchronously) if
   * the WAL cannot accept them. `onDurable` runs synchronously when the records are durable,
   * before the promise resolves and before the flush is over, so bookkeeping that depends on
   * durability can never be observed half-done. `mode`: how the records reach the disk (see
   * WalWriteMode).
   */
  enqueue(records: readonly WalRecord[], onDurable?: () => void, mode: WalWriteMode = 'pooled'): Enqueued {
    this.assertAppendable();
    assert(records.length > 0, 'enqueue of no records');
    const positions = this.place(records, encodeRecords(records, this.arenas.allocate));
    const durable = new Promise<void>((resolve, reject) => {
      this.pending.push({ records: records.length, onDurable, resolve, reject });
    });
    if (mode === 'pooled') this.pooledQueued = true;
    if (mode !== 'lazy') {
      this.urgent = true;
      this.kick();
    }
    return { positions, durable };
  }

  append(records: readonly WalRecord[]): Promise<void> {
    try {
      return this.enqueue(records).durable;
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /**
   * Closed segments whose every record is acknowledged (the in-flight flush's are not),
   * ascending: the candidates for deletion.
   */
  segments(): SegmentSummary[] {
    const below = this.inFlightFirstSeq ?? this.active.seq;
    return [...this.closedSegments.values()].filter((segment) => segment.seq < below);
  }

  /** Deletes closed segments (see `segments()`), then makes the deletions durable. */
  async deleteSegments(seqs: readonly number[]): Promise<void> {
    if (seqs.length === 0) return;
    const below = this.inFlightFirstSeq ?? this.active.seq;
    for (const seq of seqs) {
      assert(this.closedSegments.has(seq) && seq < below, () => `segment ${seq} is not deletable`);
      await this.tryIo(() => this.options.fs.unlink(this.pathOf(seq)), `deleting segment ${seq}`);
      this.closedSegments.delete(seq);
    }
    await this.tryIo(() => this.options.fs.syncDir(this.options.dir), 'syncing the WAL directory');
  }

  /** Flushes what is queued, then closes the active segment. Idempotent. */
  close(): Promise<void> {
    this.closing ??= this.closeOnce();
    return this.closing;
  }

  private async closeOnce(): Promise<void> {
    if (this.state.kind === 'open') {
      this.state = { kind: 'closing' };
      // Lazy records still queued are written now.
      if (this.queue.length > 0) this.kick();
      await this.whenIdle();
    }
    const file = this.activeFile;
    this.activeFile = null;
    if (this.state.kind === 'closing') this.state = { kind: 'closed' };
    if (file === null) return;
    if (this.state.kind === 'failed') await closeQuietly(file);
    else await file.close();
  }

  // --------------------------------------------------------------------- queueing

  private assertAppendable(): void {
    switch (this.state.kind) {
      case 'open':
        return;
      case 'failed':
        throw this.state.error;
      case 'corrupt':
        throw new WalCorruptionError(this.state.corruption, 'the WAL is read-only');
      default:
        throw new WalClosedError('the WAL is closed');
    }
  }

  /** Assigns each record its position and queues its bytes in the chunk for that segment. */
  private place(records: readonly WalRecord[], encoded: EncodedRecords): WalPosition[] {
    const positions: WalPosition[] = [];
    let chunk: Chunk | null = null;
    let runStart = 0;
    let at = 0;
    for (let i = 0; i < records.length; i++) {
      const size = encoded.sizes[i]!;
      if (this.nextOffset > 0 && this.nextOffset + size > this.segmentBytesMax) {
        this.nextSeq += 1;
        this.nextOffset = 0;
      }
      if (chunk === null || chunk.seq !== this.nextSeq) {
        if (chunk !== null) chunk.add(encoded.buf.subarray(runStart, at));
        runStart = at;
        chunk = this.tailChunk();
      }
      positions.push({ seq: this.nextSeq, offset: this.nextOffset });
      chunk.note(records[i]!);
      this.nextOffset += size;
      at += size;
    }
    assert(chunk !== null, 'no chunk');
    chunk.add(encoded.buf.subarray(runStart, at));
    return positions;
  }

  private tailChunk(): Chunk {
    const last = this.queue[this.queue.length - 1];
    if (last !== undefined && last.seq === this.nextSeq) {
      assert(last.offset + last.bytes === this.nextOffset, 'queued chunk does not end at the next position');
      return last;
    }
    const chunk = new Chunk(this.nextSeq, this.nextOffset);
    this.queue.push(chunk);
    return chunk;
  }

  private kick(): void {
    if (this.flushing || this.flushScheduled) return;
    this.flushScheduled = true;
    this.scheduleFlush(() => {
      this.flushScheduled = false;
      void this.runFlushes();
    });
  }

  private whenIdle(): Promise<void> {
    if (!this.flushing && !this.flushScheduled && this.queue.length === 0) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  // --------------------------------------------------------------------- flushing

  /** Flushes batch after batch until nothing is queued. Never throws. */
  private async runFlushes(): Promise<void> {
    if (this.flushing) return;
    this.flushing = true;
    while (this.queue.length > 0 && ((this.state.kind === 'open' && this.urgent) || this.state.kind === 'closing')) {
      const chunks = this.queue;
      const pending = this.pending;
      this.queue = [];
      this.pending = [];
      this.urgent = false;
      const inline = !this.pooledQueued;
      this.pooledQueued = false;
      this.arenas.switch();
      await this.flushBatch(chunks, pending, inline);
    }
    this.flushing = false;
    if (!this.flushScheduled) {
      const waiters = this.idleWaiters;
      this.idleWaiters = [];
      for (const wake of waiters) wake();
    }
  }

  private async flushBatch(chunks: readonly Chunk[], pending: readonly Pending[], inline: boolean): Promise<void> {
    this.inFlightFirstSeq = chunks[0]!.seq;
    let error: Error | null = null;
    try {
      for (const chunk of chunks) {
        error = await this.writeChunk(chunk, inline);
        if (error !== null) break;
      }
    } catch (bug) {
      error = this.fail('unexpected error while flushing', bug);
    }
    if (error !== null) {
      this.inFlightFirstSeq = null;
      for (const p of pending) p.reject(error);
      return;
    }
    for (const p of pending) settle(p);
    this.inFlightFirstSeq = null;
    this.options.onFlush?.(flushStats(chunks, pending));
  }

  /** Writes one chunk durably (`inline`: on the event loop if it may); returns the error that fails the batch, if any. */
  private async writeChunk(chunk: Chunk, inline: boolean): Promise<Error | null> {
    if (chunk.seq !== this.active.seq) {
      const error = await this.roll(chunk.seq);
      if (error !== null) return error;
    }
    const file = this.activeFile;
    assert(file !== null, 'no active segment file');
    assert(this.active.bytes === chunk.offset, () => `chunk at ${chunk.offset}, segment ends at ${this.active.bytes}`);
    try {
      if (!(inline && this.writeInline(file, chunk))) await file.appendDurable(chunk.bufs);
    } catch (cause) {
      // A write the file system refused (no space...) is cut away and the batch rejected.
      // Anything else may have failed while reaching the disk: like a failed fdatasync,
      // that leaves the bytes in an unknown state, and only recovery can tell.
      if (isRefusedWrite(cause)) return this.undoWrite(file, chunk, cause);
      return this.fail(`durable write (write + fdatasync) to segment ${chunk.seq} failed`, cause);
    }
    this.active.absorb(chunk);
    return null;
  }

  /**
   * Writes the chunk on the event loop if it is small enough, the file can and no inline
   * write was slow lately: true when it is durable, false when it was not written. Throws
   * what the write threw.
   */
  private writeInline(file: WalFile, chunk: Chunk): boolean {
    if (file.appendDurableNow === undefined || chunk.bytes > this.inlineBytesMax) return false;
    const start = this.now();
    if (start < this.inlineHeldUntil) return false;
    if (!file.appendDurableNow(chunk.bufs)) return false;
    if (this.now() - start > INLINE_SLOW_MS) this.inlineHeldUntil = start + INLINE_HOLD_MS;
    return true;
  }

  /**
   * Cuts the segment back to where the chunk started, and makes that durable: otherwise a
   * crash could bring the partial write back as garbage in a segment that is no longer the
   * last one, which recovery would rightly call corruption.
   */
  private async undoWrite(file: WalFile, chunk: Chunk, cause: unknown): Promise<Error> {
    try {
      await file.truncate(chunk.offset);
      await file.datasync();
    } catch (truncateCause) {
      return this.fail(
        `write to segment ${chunk.seq} failed (${describeError(cause)}) and truncating it back to ${chunk.offset} failed`,
        truncateCause,
      );
    }
    const error = writeError(`write of ${chunk.bytes} bytes to segment ${chunk.seq} failed, rolled back`, cause);
    this.abandonQueue(error);
    return error;
  }

  /**
   * Rejects everything queued behind a failed batch, and moves the next position to a new
   * segment so that no position handed out for a rejected record is ever reused.
   */
  private abandonQueue(error: Error): void {
    const pending = this.pending;
    this.pending = [];
    this.queue = [];
    for (const p of pending) p.reject(error);
    this.nextSeq += 1;
    this.nextOffset = 0;
  }

  /**
   * Starts segment `seq`. The current one is fully durable here (its last chunk was
   * datasynced), which is what lets recovery call any torn non-last segment corrupt.
   */
  private async roll(seq: number): Promise<Error | null> {
    assert(seq > this.active.seq, () => `roll from segment ${this.active.seq} to ${seq}`);
    const previous = this.activeFile;
    try {
      // Before the next segment exists: a segment that is not the last ends with its data
      // (no zero-filled space a crash would leave for recovery to call corrupt).
      await previous?.seal?.();
    } catch (cause) {
      return this.fail(`sealing segment ${this.active.seq} failed`, cause);
    }
    let file: WalFile;
    try {
      file = await this.options.fs.openAppend(this.pathOf(seq), segmentOpen(this.segmentBytesMax));
    } catch (cause) {
      const error = writeError(`creating segment ${seq} failed`, cause);
      this.abandonQueue(error);
      return error;
    }
    try {
      await this.options.fs.syncDir(this.options.dir);
      if (previous !== null) await previous.close();
    } catch (cause) {
      await closeQuietly(file); // we are failing anyway; the first error is the one to report
      return this.fail(`starting segment ${seq} failed`, cause);
    }
    this.closedSegments.set(this.active.seq, this.active);
    this.active = new Segment(seq);
    this.activeFile = file;
    return null;
  }

  /** Enters the failed state (once) and rejects everything queued. */
  private fail(message: string, cause: unknown): WalFatalError {
    if (this.state.kind === 'failed') return this.state.error;
    const error = new WalFatalError(`${message}: ${describeError(cause)}`, { cause });
    this.state = { kind: 'failed', error };
    const pending = this.pending;
    this.pending = [];
    this.queue = [];
    for (const p of pending) p.reject(error);
    const onFatal = this.options.onFatal;
    if (onFatal !== undefined) {
      try {
        onFatal(error);
      } catch (callbackError) {
        queueMicrotask(() => {
          throw callbackError; // a bug in the callback must not be mistaken for a WAL state
        });
      }
    }
    return error;
  }

  private async tryIo(op: () => Promise<void>, what: string): Promise<void> {
    try {
      await op();
    } catch (cause) {
      throw writeError(`${what} failed`, cause);
    }
  }

  private pathOf(seq: number): string {
    return joinPath(this.options.dir, segmentFileName(seq));
  }
}

function settle(p: Pending): void {
  try {
    p.onDurable?.();
  } catch (error) {
    p.reject(error);
    return;
  }
  p.resolve();
}

function flushStats(chunks: readonly Chunk[], pending: readonly Pending[]): FlushStats {
  let records = 0;
  let bytes = 0;
  for (const p of pending) records += p.records;
  for (const chunk of chunks) bytes += chunk.bytes;
  return { appends: pending.length, records, bytes, segments: chunks.length };
}

/** Errors with which a file system refuses a write for want of room, not for a failed device. */
function isRefusedWrite(cause: unknown): boolean {
  const code = errnoCode(cause);
  return code === 'ENOSPC' || code === 'EDQUOT' || code === 'EFBIG';
}

function writeError(message: string, cause: unknown): WalWriteError {
  const code = errnoCode(cause);
  const full = `${message}: ${describeError(cause)}`;
  return code === 'ENOSPC' || code === 'EDQUOT' ? new WalDiskFullError(full, { cause }) : new WalWriteError(full, { cause });
}

async function closeQuietly(file: WalFile): Promise<void> {
  try {
    await file.close();
  } catch {
    // Only called on paths that already report a more important error.
  }
}

interface Replay {
  readonly segments: Segment[];
  readonly recovery: WalRecovery;
}

/** Scans segments in order; stops at the first corruption. */
async function replaySegments(fs: WalFs, dir: string, seqs: readonly number[], visit: ReplayVisitor): Promise<Replay> {
  const segments: Segment[] = [];
  let records = 0;
  let truncated: TornTail | null = null;
  let corruption: WalCorruption | null = null;
  for (let i = 0; i < seqs.length && corruption === null; i++) {
    const seq = seqs[i]!;
    const file = segmentFileName(seq);
    const bytes = await fs.readFile(joinPath(dir, file));
    const scan = scanSegment(bytes, i === seqs.length - 1);
    const segment = new Segment(seq);
    for (const { record, offset } of scan.records) {
      visit(record, { seq, offset });
      segment.note(record);
    }
    segment.bytes = scan.validBytes;
    segments.push(segment);
    records += scan.records.length;
    const reason = scan.reason ?? '';
    if (scan.status === 'corrupt') corruption = { segment: seq, file, offset: scan.validBytes, reason };
    if (scan.status === 'torn') {
      truncated = { segment: seq, file, offset: scan.validBytes, bytesDiscarded: bytes.length - scan.validBytes, reason };
    }
  }
  return { segments, recovery: { segments: seqs.length, records, truncated, corruption } };
}

/** Opens the last segment (cutting off a torn tail, durably) or creates the first one. */
async function openActiveSegment(
  fs: WalFs,
  dir: string,
  last: Segment | undefined,
  truncated: TornTail | null,
  segmentBytesMax: number,
): Promise<{ active: Segment; file: WalFile }> {
  if (last === undefined) {
    const active = new Segment(1);
    const file = await fs.openAppend(joinPath(dir, segmentFileName(active.seq)), segmentOpen(segmentBytesMax));
    await fs.syncDir(dir);
    return { active, file };
  }
  const file = await fs.openAppend(joinPath(dir, segmentFileName(last.seq)), segmentOpen(segmentBytesMax));
  if (truncated !== null) {
    assert(truncated.segment === last.seq, 'torn tail outside the last segment');
    await file.truncate(truncated.offset);
    await file.datasync();
  }
  return { active: last, file };
}
