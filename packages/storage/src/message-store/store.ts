/**
 * The node's message store (see api.ts for the contract, the package README for the files
 * and the durability rules).
 *
 * Writing: `put` decides a record's place (segment, offset) at once and copies its frame
 * into `PendingWrites`; one writer loop appends what is pending, one `writev` per batch, in
 * placing order, so "durable up to byte N of what was placed" is one number
 * (`durableBytes`), and `sync()` waits for it to pass what was placed when it was called.
 * The writer runs at most once per turn (`scheduleFlush`), or at once when a megabyte waits.
 *
 * Reading: from `PendingWrites` until the write returned, else from the segment file through
 * the read-ahead cache; every frame read from a file is checked (crc, record id).
 *
 * Reclaiming (only after `recovered()`): a sealed segment without a live record is deleted;
 * one mostly dead is compacted (compaction.ts), one at a time, once it has settled: no record
 * of it died while the store released `compactSettleBytes` of others. A queue consumed in
 * order empties its segments front to back, and a segment it is still emptying is deleted
 * without a copy; one whose live records stay (a slow queue's, an unacked one) settles.
 *
 * Single-threaded like the rest of the node: nothing here is shared with another thread, and
 * every method but the writer's and the compaction's steps runs to completion.
 */
import type { BodyHandle, MessageStoreApi, MessageStoreStats } from './api.js';
import { assert } from '../assert.js';
import {
  describeError,
  errnoCode,
  MessageStoreClosedError,
  MessageStoreDiskFullError,
  MessageStoreFatalError,
  MessageStoreWriteError,
  MessageTooLargeError,
} from '../errors.js';
import { joinPath, type WalFile } from '../wal-fs.js';
import { compactSegment, type CompactionHost } from './compaction.js';
import { HandleTable } from './handles.js';
import { PendingWrites, CHUNK_BYTES } from './pending-writes.js';
import { FrameReader } from './frame-reader.js';
import { encodeFrameInto, FRAME_OVERHEAD_BYTES, FRAME_PREFIX_BYTES, frameMismatch, SEGMENT_HEADER_BYTES, STORE_MESSAGE_BYTES_MAX } from './record-format.js';
import { RecoveryLookup } from './recovery-lookup.js';
import { closeQuietly, createSegmentFile, loadSegment, unlinkIfPresent, unlinkSegmentFiles, writeIndexFile, type LoadedSegment } from './segment-files.js';
import { SegmentRecords } from './segment-records.js';
import { INDEX_FILE, indexFileName, Segment, SEGMENT_FILE, SEGMENT_NUMBER_MAX } from './segments.js';
import { openStoreId, randomStoreId } from './store-id.js';
import { resolveOptions, type MessageStoreOptions, type StoreConfig } from './store-options.js';

/** Waiting bytes that start a write at once instead of at the end of the turn. */
const FLUSH_BYTES = CHUNK_BYTES;

interface SyncWaiter {
  /** Resolved once `durableBytes` reaches this. */
  readonly target: number;
  readonly resolve: () => void;
  readonly reject: (error: Error) => void;
}

interface RecentKey {
  readonly handle: number;
  readonly recordId: number;
}

export class MessageStore implements MessageStoreApi {
  private lifecycle: 'open' | 'closing' | 'closed' = 'open';
  private closing: Promise<void> | null = null;
  /** Set once; from then on nothing is reported durable again. */
  private fatal: MessageStoreFatalError | null = null;
  private readonly handles = new HandleTable();
  /** Sum of the live records' message bytes. */
  private liveMessageBytes = 0;
  /** Segments with files (or about to have one), ascending. */
  private readonly segments = new Map<number, Segment>();
  /** Where `put` places: this segment, at this offset. */
  private placing: Segment;
  private placeOffset = SEGMENT_HEADER_BYTES;
  private nextRecordId: number;
  private readonly pending = new PendingWrites();
  /** The file the writer appends to; null between sealing one segment and starting the next. */
  private writer: { readonly segment: Segment; readonly file: WalFile } | null;
  private writing = false;
  private flushScheduled = false;
  /** Set by `close` after its last flush: a run scheduled before it must not start a file. */
  private writerClosed = false;
  private idleWaiters: Array<() => void> = [];
  // Frame bytes placed by this process, in placing order. Invariant: durable <= written <= placed.
  private placedBytes = 0;
  private writtenBytes = 0;
  private durableBytes = 0;
  /** In ascending target order (placedBytes only grows). */
  private syncWaiters: SyncWaiter[] = [];
  /** The error of the last refused write, until a write succeeds (logged once per streak). */
  private writeFailure: MessageStoreWriteError | null = null;
  private readonly reader: FrameReader;
  /** Until `recovered()`: every record found at open, for `adopt`. */
  private lookup: RecoveryLookup | null;
  /** Index files without a segment (a crash between the two unlinks), removed at `recovered()`. */
  private readonly orphanIndexes: readonly number[];
  private readonly recent = new Map<string, RecentKey>();
  private readonly compactionQueue = new Set<number>();
  private compacting: Promise<void> | null = null;
  private readonly compactionHost: CompactionHost;
  private compactions = 0;
  private compactedBytes = 0;
  /** Frame bytes released since the store opened: the clock segments settle by. */
  private releasedFrameBytes = 0;
  /** Mostly dead sealed segments waiting to settle before they are compacted. */
  private readonly settling = new Set<number>();
  /** `releasedFrameBytes` at which `settling` is looked at again. */
  private nextSettleCheck = 0;
  /** Deletions in flight; `close` waits for them. */
  private readonly background = new Set<Promise<void>>();

  private constructor(
    private readonly config: StoreConfig,
    readonly storeId: string,
    loaded: readonly LoadedSegment[],
    lookup: RecoveryLookup,
    first: Segment,
    firstFile: WalFile,
    orphanIndexes: readonly number[],
  ) {
    this.reader = new FrameReader(config);
    this.lookup = lookup;
    // Every record found may be adopted: one allocation instead of growing step by step.
    this.handles.reserve(lookup.size);
    this.orphanIndexes = orphanIndexes;
    for (const found of loaded) {
      const segment = new Segment(found.number, 'sealed', found.recordIdFloor, null);
      segment.fileBytes = found.fileBytes;
      this.segments.set(found.number, segment);
    }
    first.fileBytes = SEGMENT_HEADER_BYTES;
    this.segments.set(first.number, first);
    this.placing = first;
    this.writer = { segment: first, file: firstFile };
    this.nextRecordId = first.recordIdFloor;
    this.compactionHost = this.makeCompactionHost();
  }

  /**
   * Opens (or creates) the store in `dir`: loads every segment's index (or scans the
   * segment), and starts a new segment for this process's writes. Nothing is deleted until
   * `recovered()`.
   */
  static async open(options: MessageStoreOptions): Promise<MessageStore> {
    const config = resolveOptions(options);
    const { fs, dir, logger } = config;
    await fs.mkdirp(dir);
    const names = await fs.list(dir);
    const segmentNumbers = numbersOf(names, SEGMENT_FILE).sort((a, b) => a - b);
    const indexNumbers = new Set(numbersOf(names, INDEX_FILE));
    const storeId = await openStoreId(fs, dir, segmentNumbers.length > 0, options.newStoreId ?? randomStoreId);
    const loaded: LoadedSegment[] = [];
    for (const number of segmentNumbers) loaded.push(await loadSegment(fs, dir, number, indexNumbers.has(number), logger));
    const lookup = RecoveryLookup.build(loaded.map((found) => ({ segment: found.number, records: found.records })));
    let recordIdFloor = Math.max(1, lookup.maxRecordId + 1);
    for (const found of loaded) recordIdFloor = Math.max(recordIdFloor, found.recordIdFloor);
    // A scanned segment gets its index now, so the next open need not scan it again (one
    // without records is deleted at recovered()). The index's directory entry is made
    // durable by the new segment's directory sync just below.
    for (const found of loaded) {
      if (!found.scanned || found.records.count === 0) continue;
      try {
        await writeIndexFile(fs, dir, found.number, { segmentBytes: found.validBytes, records: found.records });
      } catch (error) {
        logger.warn(`message store ${dir}: writing the index of segment ${found.number} failed (${describeError(error)}); it is scanned again at the next open`);
      }
    }
    const firstNumber = (segmentNumbers[segmentNumbers.length - 1] ?? 0) + 1;
    assert(firstNumber <= SEGMENT_NUMBER_MAX, 'out of segment numbers');
    const first = new Segment(firstNumber, 'open', recordIdFloor, new SegmentRecords());
    const file = await createSegmentFile(fs, dir, firstNumber, recordIdFloor);
    const orphans = [...indexNumbers].filter((number) => !segmentNumbers.includes(number));
    return new MessageStore(config, storeId, loaded, lookup, first, file, orphans);
  }

  // ------------------------------------------------------------------ references

  put(bytes: Uint8Array, key?: string): BodyHandle {
    this.assertOpen('put');
    if (key !== undefined) {
      const shared = this.sharedByKey(key, bytes.byteLength);
      if (shared !== null) return shared;
    }
    if (bytes.byteLength > STORE_MESSAGE_BYTES_MAX) {
      throw new MessageTooLargeError(
        `a message of ${bytes.byteLength} bytes exceeds the message store's limit of ${STORE_MESSAGE_BYTES_MAX} bytes; lower max_message_bytes`,
      );
    }
    const recordId = this.nextRecordId++;
    const { segment, offset } = this.placeFrame(recordId, bytes.byteLength, (frame) => encodeFrameInto(frame, recordId, bytes));
    const handle = this.handles.allocate(recordId, segment.number, offset, bytes.byteLength);
    this.liveMessageBytes += bytes.byteLength;
    if (key !== undefined) this.remember(key, handle, recordId);
    return handle;
  }

  adopt(recordId: number): BodyHandle | null {
    this.assertOpen('adopt');
    const lookup = this.lookup;
    assert(lookup !== null, 'adopt() after recovered()');
    const at = lookup.find(recordId);
    if (at < 0) return null;
    const adopted = lookup.handle(at);
    if (adopted >= 0) {
      this.handles.retain(adopted);
      return adopted;
    }
    const segment = lookup.segment(at);
    const messageBytes = lookup.messageBytes(at);
    const handle = this.handles.allocate(recordId, segment, lookup.offset(at), messageBytes);
    this.liveMessageBytes += messageBytes;
    this.segmentOf(segment).addLive(FRAME_OVERHEAD_BYTES + messageBytes);
    lookup.setHandle(at, handle);
    return handle;
  }

  retain(handle: BodyHandle): void {
    this.assertLive(handle);
    this.handles.retain(handle);
  }

  release(handle: BodyHandle): void {
    this.assertLive(handle);
    const recordId = this.handles.recordId(handle);
    const segmentNumber = this.handles.segment(handle);
    const messageBytes = this.handles.messageBytes(handle);
    if (!this.handles.release(handle)) return;
    this.liveMessageBytes -= messageBytes;
    const segment = this.segmentOf(segmentNumber);
    segment.removeLive(FRAME_OVERHEAD_BYTES + messageBytes);
    this.releasedFrameBytes += FRAME_OVERHEAD_BYTES + messageBytes;
    segment.lastDeathAt = this.releasedFrameBytes;
    this.lookup?.forget(recordId, handle);
    segment.compactionFailed = false; // something changed: worth another try
    this.maybeReclaim(segment);
    if (this.settling.size > 0 && this.releasedFrameBytes >= this.nextSettleCheck) this.checkSettling();
  }

  recordId(handle: BodyHandle): number {
    this.assertLive(handle);
    return this.handles.recordId(handle);
  }

  size(handle: BodyHandle): number {
    this.assertLive(handle);
    return this.handles.messageBytes(handle);
  }

  recovered(): void {
    assert(this.lookup !== null, 'recovered() called twice');
    this.lookup = null;
    this.handles.trim();
    if (this.lifecycle !== 'open') return;
    // What the segments found at open went through is not known: their live records outlived
    // a restart, so the mostly dead ones count as settled.
    for (const segment of this.segments.values()) segment.lastDeathAt = -this.config.compactSettleBytes;
    const dead = [...this.segments.values()].filter((segment) => segment.state === 'sealed' && segment.liveRecords === 0);
    if (dead.length > 0 || this.orphanIndexes.length > 0) this.deleteSegments(dead, this.orphanIndexes);
    for (const segment of this.segments.values()) this.maybeReclaim(segment);
  }

  /** One more reference to the live record last put under `key`, if it has the same size. */
  private sharedByKey(key: string, messageBytes: number): BodyHandle | null {
    const recent = this.recent.get(key);
    if (recent === undefined) return null;
    const { handle } = recent;
    if (!this.handles.isLive(handle) || this.handles.recordId(handle) !== recent.recordId || this.handles.messageBytes(handle) !== messageBytes) {
      return null;
    }
    this.handles.retain(handle);
    return handle;
  }

  private remember(key: string, handle: number, recordId: number): void {
    if (this.config.recentKeys === 0) return;
    this.recent.delete(key);
    this.recent.set(key, { handle, recordId });
    if (this.recent.size > this.config.recentKeys) {
      const oldest = this.recent.keys().next();
      if (oldest.done !== true) this.recent.delete(oldest.value);
    }
  }

  // ------------------------------------------------------------------ reading

  read(handle: BodyHandle): Uint8Array | undefined {
    this.assertLive(handle);
    assert(this.lifecycle !== 'closed', 'read() after close()');
    const segment = this.handles.segment(handle);
    const offset = this.handles.offset(handle);
    const messageBytes = this.handles.messageBytes(handle);
    const recordId = this.handles.recordId(handle);
    const frameBytes = FRAME_OVERHEAD_BYTES + messageBytes;
    const unwritten = this.pending.find(segment, offset, frameBytes);
    if (unwritten !== undefined) return copyOf(unwritten.subarray(FRAME_OVERHEAD_BYTES));
    let frame: Uint8Array;
    try {
      const fileBytes = this.segments.get(segment)?.fileBytes;
      if (fileBytes === undefined) throw new Error(`segment ${segment} is deleted`);
      frame = this.reader.read(segment, fileBytes, offset, frameBytes);
    } catch (error) {
      this.config.logger.warn(`message store: record ${recordId} (segment ${segment}, offset ${offset}) cannot be read: ${describeError(error)}`);
      return undefined;
    }
    const mismatch = frameMismatch(frame, recordId, messageBytes);
    if (mismatch !== null) {
      // Whatever was cached around it is suspect too; the next read goes to the file again.
      this.reader.forget(segment);
      this.config.logger.warn(`message store: record ${recordId} (segment ${segment}, offset ${offset}) is damaged: ${mismatch}`);
      return undefined;
    }
    // A frame from the cache is a view of a cached chunk: the caller gets its own copy, which
    // does not keep the chunk alive after its eviction.
    return this.reader.readsAlone(frameBytes) ? frame.subarray(FRAME_OVERHEAD_BYTES) : copyOf(frame.subarray(FRAME_OVERHEAD_BYTES));
  }

  // ------------------------------------------------------------------ writing

  /**
   * Gives a frame its place: the rest of the placing segment, or a new segment when it does
   * not fit (a frame larger than a segment gets one of its own). `fill` writes the frame.
   * The record counts as live in its segment from here on.
   */
  private placeFrame(recordId: number, messageBytes: number, fill: (frame: Uint8Array) => void): { segment: Segment; offset: number } {
    const frameBytes = FRAME_OVERHEAD_BYTES + messageBytes;
    if (this.placeOffset > SEGMENT_HEADER_BYTES && this.placeOffset + frameBytes > this.config.segmentBytes) this.startPlacing();
    const segment = this.placing;
    const offset = this.placeOffset;
    assert(segment.records !== null && segment.state === 'open', () => `placing in segment ${segment.number} (${segment.state})`);
    fill(this.pending.reserve(segment.number, offset, frameBytes));
    segment.records.push(recordId, offset, messageBytes);
    segment.addLive(frameBytes);
    this.placeOffset += frameBytes;
    this.placedBytes += frameBytes;
    this.kickWriter();
    return { segment, offset };
  }

  private startPlacing(): void {
    const number = this.placing.number + 1;
    assert(number <= SEGMENT_NUMBER_MAX, 'out of segment numbers');
    this.placing = new Segment(number, 'open', this.nextRecordId, new SegmentRecords(this.placing.records?.count ?? 0));
    this.segments.set(number, this.placing);
    this.placeOffset = SEGMENT_HEADER_BYTES;
  }

  /** Starts the writer now if a megabyte waits, else once at the end of this turn. */
  private kickWriter(): void {
    if (this.writing || this.fatal !== null) return;
    if (this.pending.waitingBytes >= FLUSH_BYTES) {
      void this.runWriter();
      return;
    }
    this.scheduleWriter();
  }

  private scheduleWriter(): void {
    if (this.flushScheduled) return;
    this.flushScheduled = true;
    this.config.scheduleFlush(() => {
      this.flushScheduled = false;
      void this.runWriter();
    });
  }

  /**
   * Writes what is pending and datasyncs for waiting syncs, until there is nothing to do or
   * a write is refused (then retried at the next put or sync). Never throws.
   */
  private async runWriter(): Promise<void> {
    if (this.writing || this.writerClosed) return;
    this.writing = true;
    let refused: MessageStoreWriteError | null = null;
    try {
      while (this.fatal === null) {
        // A sync whose records are all written does not wait for more writes.
        if (this.syncIsDue()) {
          await this.datasyncWriter();
          continue;
        }
        if (refused !== null) break;
        const batch = this.pending.take();
        if (batch === null) break;
        refused = await this.writeBatch(batch);
      }
    } catch (bug) {
      this.failFatal('unexpected error in the writer', bug);
    } finally {
      this.writing = false;
    }
    if (refused !== null) this.rejectUnwritten(refused);
    else if (this.fatal === null && (this.pending.waitingBytes > 0 || this.syncWaiters.length > 0)) this.scheduleWriter();
    const waiters = this.idleWaiters;
    this.idleWaiters = [];
    for (const wake of waiters) wake();
  }

  private syncIsDue(): boolean {
    const first = this.syncWaiters[0];
    return first !== undefined && first.target <= this.writtenBytes;
  }

  /** Appends one batch (starting its segment first if needed); the error if it was refused. */
  private async writeBatch(batch: { segment: number; offset: number; bufs: readonly Uint8Array[]; bytes: number }): Promise<MessageStoreWriteError | null> {
    if (this.writer === null || this.writer.segment.number !== batch.segment) {
      const refused = await this.startWriting(batch.segment);
      if (refused !== null || this.fatal !== null) {
        this.pending.failed();
        return refused;
      }
    }
    const writer = this.writer;
    assert(writer !== null && writer.segment.fileBytes === batch.offset, () => `batch at ${batch.segment}:${batch.offset} does not continue the file`);
    try {
      await writer.file.writev(batch.bufs);
    } catch (cause) {
      return this.writeFailed(writer.file, batch, cause);
    }
    writer.segment.fileBytes += batch.bytes;
    this.writtenBytes += batch.bytes;
    this.pending.written();
    this.writeFailure = null;
    return null;
  }

  /**
   * A refused write (no room) is cut away and left pending, to be written at the same offset
   * later. Any other failure leaves the file's state unknown: fatal.
   */
  private async writeFailed(file: WalFile, batch: { segment: number; offset: number; bytes: number }, cause: unknown): Promise<MessageStoreWriteError | null> {
    const what = `writing ${batch.bytes} bytes to segment ${batch.segment} at offset ${batch.offset}`;
    if (!isRefusedWrite(cause)) {
      this.pending.failed();
      this.failFatal(`${what} failed`, cause);
      return null;
    }
    try {
      await file.truncate(batch.offset);
    } catch (truncateCause) {
      this.pending.failed();
      this.failFatal(`${what} failed (${describeError(cause)}) and truncating back to ${batch.offset} failed`, truncateCause);
      return null;
    }
    this.pending.failed();
    return this.refusedWrite(`${what} failed`, cause);
  }

  /**
   * Moves the writer to segment `number`: seals the one it wrote (datasync, index) and
   * creates the next. Returns the error when the new file cannot be created (retried later).
   */
  private async startWriting(number: number): Promise<MessageStoreWriteError | null> {
    const previous = this.writer;
    if (previous !== null) {
      assert(previous.segment.number < number, () => `the writer cannot go back from ${previous.segment.number} to ${number}`);
      this.writer = null;
      await this.seal(previous);
      if (this.fatal !== null) return null;
    }
    const segment = this.segmentOf(number);
    try {
      const file = await createSegmentFile(this.config.fs, this.config.dir, number, segment.recordIdFloor);
      segment.fileBytes = SEGMENT_HEADER_BYTES;
      this.writer = { segment, file };
      return null;
    } catch (cause) {
      // Nothing in it was acknowledged: creating it again later is safe, whatever the error.
      return this.refusedWrite(`starting segment ${number} failed`, cause);
    }
  }

  /** Makes a written segment durable and writes its index. False when the datasync failed (fatal). */
  private async seal(writer: { readonly segment: Segment; readonly file: WalFile }): Promise<boolean> {
    const { segment, file } = writer;
    try {
      await file.datasync();
    } catch (cause) {
      this.failFatal(`fdatasync of segment ${segment.number} failed`, cause);
      return false;
    }
    this.markDurable(this.writtenBytes);
    await closeQuietly(file);
    const records = segment.records;
    assert(records !== null, () => `segment ${segment.number} sealed twice`);
    try {
      await writeIndexFile(this.config.fs, this.config.dir, segment.number, { segmentBytes: segment.fileBytes, records });
    } catch (error) {
      this.config.logger.warn(
        `message store ${this.config.dir}: writing the index of segment ${segment.number} failed (${describeError(error)}); the next open scans the segment instead`,
      );
    }
    segment.records = null;
    segment.state = 'sealed';
    this.maybeReclaim(segment);
    return true;
  }

  private async datasyncWriter(): Promise<void> {
    const upTo = this.writtenBytes;
    const writer = this.writer;
    // Without a writer everything written is in sealed segments, durable already.
    if (writer !== null) {
      try {
        await writer.file.datasync();
      } catch (cause) {
        this.failFatal(`fdatasync of segment ${writer.segment.number} failed`, cause);
        return;
      }
    }
    this.markDurable(upTo);
  }

  private markDurable(upTo: number): void {
    this.durableBytes = Math.max(this.durableBytes, upTo);
    while (this.syncWaiters.length > 0 && this.syncWaiters[0]!.target <= this.durableBytes) this.syncWaiters.shift()!.resolve();
  }

  private refusedWrite(message: string, cause: unknown): MessageStoreWriteError {
    const full =
      `message store ${this.config.dir}: ${message}: ${describeError(cause)}. ` +
      'The records stay in memory and a later flush writes them; until then sync() rejects, so no snapshot may reference them.';
    const error = isDiskFull(cause) ? new MessageStoreDiskFullError(full, { cause }) : new MessageStoreWriteError(full, { cause });
    if (this.writeFailure === null) this.config.logger.warn(full);
    this.writeFailure = error;
    return error;
  }

  /** Rejects the syncs whose records are not all written. */
  private rejectUnwritten(error: MessageStoreWriteError): void {
    const keep: SyncWaiter[] = [];
    for (const waiter of this.syncWaiters) {
      if (waiter.target <= this.writtenBytes) keep.push(waiter);
      else waiter.reject(error);
    }
    this.syncWaiters = keep;
  }

  private failFatal(message: string, cause: unknown): void {
    if (this.fatal !== null) return;
    this.fatal = new MessageStoreFatalError(
      `message store ${this.config.dir}: ${message}: ${describeError(cause)}. ` +
        'What reached the disk since the last sync is unknown, so the store reports nothing durable any more: restart the node (its WAL brings the records back).',
      { cause },
    );
    this.config.logger.warn(this.fatal.message);
    const waiters = this.syncWaiters;
    this.syncWaiters = [];
    for (const waiter of waiters) waiter.reject(this.fatal);
  }

  sync(): Promise<void> {
    if (this.fatal !== null) return Promise.reject(this.fatal);
    if (this.lifecycle === 'closed') return Promise.reject(new MessageStoreClosedError('sync() after close()'));
    const target = this.placedBytes;
    if (target <= this.durableBytes) return Promise.resolve();
    return new Promise((resolve, reject) => {
      this.syncWaiters.push({ target, resolve, reject });
      this.scheduleWriter();
    });
  }

  // ------------------------------------------------------------------ reclaiming

  /** Deletes or queues for compaction a sealed segment that deserves it (after `recovered()`). */
  private maybeReclaim(segment: Segment): void {
    if (this.lookup !== null || this.lifecycle !== 'open' || segment.state !== 'sealed') return;
    if (segment.liveRecords === 0) {
      this.deleteSegments([segment], []);
      return;
    }
    if (!this.mostlyDead(segment)) return;
    if (this.settled(segment)) {
      this.settling.delete(segment.number);
      this.compactionQueue.add(segment.number);
      this.maybeStartCompaction();
    } else {
      this.settling.add(segment.number);
    }
  }

  private mostlyDead(segment: Segment): boolean {
    return (
      segment.state === 'sealed' &&
      segment.liveRecords > 0 &&
      !segment.compactionFailed &&
      segment.liveFrameBytes < this.config.compactBelow * segment.fileBytes
    );
  }

  /** No record of it died while the store released `compactSettleBytes` of others. */
  private settled(segment: Segment): boolean {
    return this.releasedFrameBytes - segment.lastDeathAt >= this.config.compactSettleBytes;
  }

  private worthCompacting(segment: Segment): boolean {
    return this.mostlyDead(segment) && this.settled(segment);
  }

  /** Queues the settling segments that settled; forgets those no longer mostly dead. */
  private checkSettling(): void {
    this.nextSettleCheck = this.releasedFrameBytes + Math.max(1, Math.floor(this.config.compactSettleBytes / 8));
    for (const number of this.settling) {
      const segment = this.segments.get(number);
      if (segment === undefined || !this.mostlyDead(segment)) {
        this.settling.delete(number);
      } else if (this.settled(segment)) {
        this.settling.delete(number);
        this.compactionQueue.add(number);
      }
    }
    this.maybeStartCompaction();
  }

  private maybeStartCompaction(): void {
    if (this.compacting !== null || this.lifecycle !== 'open' || this.lookup !== null) return;
    for (const number of this.compactionQueue) {
      this.compactionQueue.delete(number);
      const segment = this.segments.get(number);
      if (segment === undefined || !this.worthCompacting(segment)) continue;
      this.compacting = this.compact(segment).finally(() => {
        this.compacting = null;
        this.maybeStartCompaction();
      });
      return;
    }
  }

  /** Never throws. */
  private async compact(segment: Segment): Promise<void> {
    // Not inside the release() that asked for it: a compaction reads and copies a lot.
    await this.yieldTurn();
    if (this.lifecycle !== 'open' || !this.worthCompacting(segment)) return;
    segment.state = 'compacting';
    const outcome = await compactSegment(this.compactionHost, segment.number).catch(
      (bug: unknown) => ({ kind: 'failed', reason: describeError(bug) }) as const,
    );
    segment.state = 'sealed';
    if (outcome.kind === 'failed') {
      segment.compactionFailed = true;
      this.config.logger.warn(
        `message store ${this.config.dir}: compacting segment ${segment.number} failed: ${outcome.reason}; it is tried again when one of its records dies`,
      );
      return;
    }
    if (outcome.kind === 'stopped') return;
    assert(segment.liveRecords === 0, () => `segment ${segment.number} still has ${segment.liveRecords} live records after its compaction`);
    this.compactions++;
    this.compactedBytes += segment.fileBytes - outcome.copiedBytes;
    this.deleteSegments([segment], []);
  }

  private makeCompactionHost(): CompactionHost {
    return {
      handles: this.handles,
      readAheadBytes: this.config.readAheadBytes,
      readSegment: (number, offset, length) => {
        const segment = this.segmentOf(number);
        return this.reader.readRange(number, offset, Math.min(length, segment.fileBytes - offset));
      },
      placeCopy: (frame) => {
        const recordId = Buffer.from(frame.buffer, frame.byteOffset, frame.byteLength).readDoubleLE(FRAME_PREFIX_BYTES);
        const placed = this.placeFrame(recordId, frame.byteLength - FRAME_OVERHEAD_BYTES, (target) => target.set(frame));
        return { segment: placed.segment.number, offset: placed.offset };
      },
      dropCopy: (number, frameBytes) => {
        const segment = this.segmentOf(number);
        segment.removeLive(frameBytes);
        this.maybeReclaim(segment);
      },
      moveToCopy: (handle, from, number, offset) => {
        this.segmentOf(from).removeLive(FRAME_OVERHEAD_BYTES + this.handles.messageBytes(handle));
        this.handles.move(handle, number, offset);
      },
      sync: () => this.sync(),
      yieldTurn: () => this.yieldTurn(),
      stopping: () => this.lifecycle !== 'open',
    };
  }

  /**
   * Forgets segments at once (no handle points at them) and removes their files in the
   * background, then syncs the directory. A failure is logged: the next open finds the
   * files, with no live record, and deletes them at its `recovered()`.
   */
  private deleteSegments(segments: readonly Segment[], orphanIndexes: readonly number[]): void {
    for (const segment of segments) {
      assert(segment.liveRecords === 0 && segment !== this.placing && segment !== this.writer?.segment, () => `segment ${segment.number} is not deletable`);
      segment.state = 'deleted';
      this.segments.delete(segment.number);
      this.settling.delete(segment.number);
      this.reader.forget(segment.number, true);
    }
    const { fs, dir, logger } = this.config;
    const task = (async () => {
      try {
        for (const segment of segments) await unlinkSegmentFiles(fs, dir, segment.number);
        for (const number of orphanIndexes) await unlinkIfPresent(fs, joinPath(dir, indexFileName(number)));
        await fs.syncDir(dir);
      } catch (error) {
        const numbers = segments.map((segment) => segment.number).join(', ');
        logger.warn(`message store ${dir}: deleting segments ${numbers} failed (${describeError(error)}); the next open deletes them`);
      }
    })();
    this.background.add(task);
    void task.finally(() => this.background.delete(task));
  }

  // ------------------------------------------------------------------ lifecycle

  dropCacheIfUnused(): number {
    this.handles.trim();
    return this.reader.dropCacheIfUnused() + this.pending.dropSpareIfIdle();
  }

  stats(): MessageStoreStats {
    let diskBytes = 0;
    let segments = 0;
    for (const segment of this.segments.values()) {
      if (segment.fileBytes === 0) continue; // placed in, its file not created yet
      diskBytes += segment.fileBytes;
      segments++;
    }
    return {
      liveRecords: this.handles.live,
      liveBytes: this.liveMessageBytes,
      diskBytes,
      segments,
      cacheBytes: this.reader.cacheBytes,
      pendingWriteBytes: this.pending.bytes,
      compactions: this.compactions,
      compactedBytes: this.compactedBytes,
    };
  }

  /**
   * Resolves once nothing is being written, compacted or deleted (and nothing waits to be):
   * for tests and benchmarks, which need the store at rest. Not part of `MessageStoreApi`.
   */
  async idle(): Promise<void> {
    for (;;) {
      if (this.compacting !== null) await this.compacting;
      else if (this.background.size > 0) await Promise.all([...this.background]);
      else if (this.writing || this.flushScheduled) await new Promise<void>((resolve) => this.idleWaiters.push(resolve));
      else if (this.pending.waitingBytes > 0 && this.fatal === null && this.writeFailure === null) await this.runWriter();
      else return;
    }
  }

  close(): Promise<void> {
    this.closing ??= this.closeOnce();
    return this.closing;
  }

  private async closeOnce(): Promise<void> {
    this.lifecycle = 'closing';
    await this.compacting;
    await Promise.all([...this.background]);
    while (this.writing) await new Promise<void>((resolve) => this.idleWaiters.push(resolve));
    await this.runWriter();
    this.writerClosed = true;
    const writer = this.writer;
    this.writer = null;
    if (writer !== null && this.fatal === null && this.pending.bytes === 0) {
      // A clean close seals the last segment too, so the next open need not scan it.
      if (await this.seal(writer)) await this.syncDirQuietly();
    } else if (writer !== null) {
      await closeQuietly(writer.file);
    }
    if (this.pending.bytes > 0) this.config.logger.warn(`message store ${this.config.dir}: closed with ${this.pending.bytes} bytes never written`);
    const closed = new MessageStoreClosedError('the message store closed before these records were durable');
    for (const waiter of this.syncWaiters.splice(0)) waiter.reject(this.fatal ?? closed);
    this.reader.close();
    this.lifecycle = 'closed';
  }

  private async syncDirQuietly(): Promise<void> {
    try {
      await this.config.fs.syncDir(this.config.dir);
    } catch (error) {
      this.config.logger.warn(`message store ${this.config.dir}: syncing the directory failed (${describeError(error)})`);
    }
  }

  private yieldTurn(): Promise<void> {
    return new Promise((resolve) => this.config.scheduleFlush(resolve));
  }

  private segmentOf(number: number): Segment {
    const segment = this.segments.get(number);
    assert(segment !== undefined, () => `no segment ${number}`);
    return segment;
  }

  private assertOpen(what: string): void {
    if (this.lifecycle !== 'open') throw new MessageStoreClosedError(`${what}() on a closed message store (${this.config.dir})`);
  }

  private assertLive(handle: BodyHandle): void {
    assert(this.handles.isLive(handle), () => `handle ${handle} is not live (released, or never handed out)`);
  }
}

/** A copy in a buffer of its own (Buffer#slice would be a view). */
function copyOf(bytes: Uint8Array): Buffer {
  const copy = Buffer.allocUnsafe(bytes.byteLength);
  copy.set(bytes);
  return copy;
}

function numbersOf(names: readonly string[], pattern: RegExp): number[] {
  return names.flatMap((name) => {
    const match = pattern.exec(name);
    return match === null ? [] : [Number(match[1])];
  });
}

/** Errors with which a file system refuses a write for want of room, not for a failed device. */
function isRefusedWrite(cause: unknown): boolean {
  const code = errnoCode(cause);
  return code === 'ENOSPC' || code === 'EDQUOT' || code === 'EFBIG';
}

function isDiskFull(cause: unknown): boolean {
  const code = errnoCode(cause);
  return code === 'ENOSPC' || code === 'EDQUOT';
}
