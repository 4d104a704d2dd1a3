import { closeSync, constants, fstatSync, openSync, readSync, writeSync, writev as writevCallback, writevSync } from 'node:fs';
import { mkdir, open, readdir, readFile, unlink } from 'node:fs/promises';
import type { FileHandle } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';
import { assert } from './assert.js';
import type { StoreFs, StoreReadFile } from './message-store/store-fs.js';
import type { OpenOptions, WalFile } from './wal-fs.js';

/**
 * `WalFs` over the real file system (node:fs/promises), and the message store's `StoreFs`
 * (its synchronous reads through node:fs openSync/readSync).
 */
export class NodeWalFs implements StoreFs {
  async mkdirp(dir: string): Promise<void> {
    const created = await mkdir(dir, { recursive: true });
    if (created === undefined) return;
    const firstCreated = resolve(created);
    // Each directory we created is an entry in its parent: make those entries durable,
    // from the deepest up to the parent of the first one we created.
    for (let created = resolve(dir); ; created = dirname(created)) {
      await this.syncDir(dirname(created));
      if (created === firstCreated || dirname(created) === created) break;
    }
  }

  list(dir: string): Promise<string[]> {
    return readdir(dir);
  }

  readFile(path: string): Promise<Uint8Array> {
    return readFile(path);
  }

  /**
   * Opens with O_DSYNC: each write returns once its bytes (and the file's new length) are
   * on the disk, so `appendDurable` is one write system call, one trip through libuv's
   * thread pool, and one cache flush, instead of a write and then an fdatasync.
   */
  async openAppend(path: string, options: OpenOptions = {}): Promise<WalFile> {
    const limit = options.preallocate ?? 0;
    if (limit <= 0) return new NodeWalFile(await open(path, APPEND_DSYNC));
    const handle = await open(path, WRITE_DSYNC);
    try {
      return new PreallocatedWalFile(handle, (await handle.stat()).size, limit);
    } catch (error) {
      await handle.close();
      throw error;
    }
  }

  unlink(path: string): Promise<void> {
    return unlink(path);
  }

  openRead(path: string): StoreReadFile {
    return new NodeReadFile(openSync(path, 'r'));
  }

  async syncDir(dir: string): Promise<void> {
    const handle = await open(dir, 'r');
    try {
      await handle.sync();
    } finally {
      await handle.close();
    }
  }
}

/** The buffers (each with the offset to start from) that a write of `written` bytes left. */
function* unwritten(data: readonly Uint8Array[], written: number): Generator<[Uint8Array, number]> {
  let skip = written;
  for (const buf of data) {
    if (skip >= buf.byteLength) {
      skip -= buf.byteLength;
      continue;
    }
    yield [buf, skip];
    skip = 0;
  }
}

/** A write's byte count, or the error of one that made no progress. */
function progress(bytesWritten: number, offset: number): number {
  if (bytesWritten === 0) throw new Error(`write made no progress at offset ${offset}`);
  return bytesWritten;
}

function totalBytes(data: readonly Uint8Array[]): number {
  let total = 0;
  for (const buf of data) total += buf.byteLength;
  return total;
}

const APPEND_DSYNC = constants.O_WRONLY | constants.O_CREAT | constants.O_APPEND | constants.O_DSYNC;
/** Without O_APPEND: a preallocated file is written at its logical end, inside its runway. */
const WRITE_DSYNC = constants.O_WRONLY | constants.O_CREAT | constants.O_DSYNC;

class NodeWalFile implements WalFile {
  /** Writes through writevOnPool not finished yet, and what `close` waits on for them. */
  private poolWrites = 0;
  private poolWritesDone: (() => void) | null = null;

  constructor(private readonly handle: FileHandle) {}

  protected get fileHandle(): FileHandle {
    return this.handle;
  }

  write(data: Uint8Array): Promise<void> {
    return this.writev([data]);
  }

  async writev(data: readonly Uint8Array[]): Promise<void> {
    const total = totalBytes(data);
    // libuv already loops over short writes and IOV_MAX; a short count here means an
    // error (ENOSPC...) after some bytes went out. Writing the rest surfaces that error.
    const bytesWritten = await this.writevOnPool(data, null);
    if (bytesWritten < total) await this.writeRest(data, bytesWritten, null);
  }

  /** Writes all of `data` (`total` bytes) at `position`. */
  protected async writeAt(data: readonly Uint8Array[], total: number, position: number): Promise<void> {
    const bytesWritten = await this.writevOnPool(data, position);
    if (bytesWritten < total) await this.writeRest(data, bytesWritten, position);
  }

  /**
   * One `writev` on libuv's pool (`position` null: at the end, O_APPEND), through node:fs's
   * callback API on the handle's descriptor: the WAL's write of every flush, where
   * FileHandle.writev's promise machinery cost about 10 µs of the event loop's time and 2 KB
   * of garbage per write (docs/architecture.md). The handle does not count such a write as
   * its own operation, so `close` waits for them itself: a descriptor closed while a write
   * still waits for a pool thread could be reused by the next file opened.
   */
  private writevOnPool(data: readonly Uint8Array[], position: number | null): Promise<number> {
    this.poolWrites += 1;
    return new Promise<number>((resolve, reject) => {
      const done = (): void => {
        this.poolWrites -= 1;
        if (this.poolWrites === 0 && this.poolWritesDone !== null) {
          this.poolWritesDone();
          this.poolWritesDone = null;
        }
      };
      try {
        writevCallback(this.handle.fd, data as Uint8Array[], position, (error, bytesWritten) => {
          done();
          if (error === null) resolve(bytesWritten);
          else reject(error);
        });
      } catch (error) {
        // Refused before it started (a closed handle's descriptor is -1): nothing in flight.
        done();
        reject(error);
      }
    });
  }

  seal(): Promise<void> {
    return Promise.resolve();
  }

  datasync(): Promise<void> {
    return this.handle.datasync();
  }

  appendDurable(data: readonly Uint8Array[]): Promise<void> {
    // O_DSYNC (see openAppend): the write is durable when it returns.
    return this.writev(data);
  }

  appendDurableNow(data: readonly Uint8Array[]): boolean {
    this.writeNow(data, totalBytes(data), null);
    return true;
  }

  /** `writeAt` on the calling thread (`position` null: at the end, O_APPEND). */
  protected writeNow(data: readonly Uint8Array[], total: number, position: number | null): void {
    const fd = this.handle.fd;
    const written = position === null ? writevSync(fd, data) : writevSync(fd, data, position);
    if (written >= total) return;
    // As in writeRest: a short count means an error after some bytes; writing the rest surfaces it.
    let at = position === null ? null : position + written;
    for (const [buf, from] of unwritten(data, written)) {
      for (let offset = from; offset < buf.byteLength; ) {
        const n = writeSync(fd, buf, offset, buf.byteLength - offset, at);
        offset += progress(n, offset);
        if (at !== null) at += n;
      }
    }
  }

  truncate(length: number): Promise<void> {
    return this.handle.truncate(length);
  }

  async close(): Promise<void> {
    if (this.poolWrites > 0) await new Promise<void>((done) => (this.poolWritesDone = done));
    return this.handle.close();
  }

  /** Writes what a short write left (`position` null: at the end, O_APPEND). */
  private async writeRest(data: readonly Uint8Array[], alreadyWritten: number, position: number | null): Promise<void> {
    let at = position === null ? null : position + alreadyWritten;
    for (const [buf, from] of unwritten(data, alreadyWritten)) {
      for (let offset = from; offset < buf.byteLength; ) {
        const { bytesWritten } = await this.handle.write(buf, offset, buf.byteLength - offset, at);
        offset += progress(bytesWritten, offset);
        if (at !== null) at += bytesWritten;
      }
    }
  }
}

/** Zero-filled space a preallocated file keeps ahead of its writes (bytes added at a time). */
export const RUNWAY_BYTES = 1024 * 1024;
/** The runway is extended once less than this is left. */
export const RUNWAY_LOW_BYTES = 512 * 1024;
/**
 * Only writes smaller than this extend the runway. Small durable writes are where an
 * overwrite pays (one write instead of a write and a journal commit); large ones are few
 * per second and would double the bytes written for little.
 */
export const RUNWAY_WRITE_BYTES_MAX = 64 * 1024;
const ZEROS = new Uint8Array(RUNWAY_BYTES);

/**
 * A WAL segment that keeps zero-filled space (its runway) written ahead of its data, so that
 * the small durable writes of a WAL overwrite blocks the file already has: on ext4, an
 * O_DSYNC write that extends a file also commits the file system's journal (the new length),
 * and every process writing on that file system queues on that journal; an overwrite is one
 * write of data. Measured with three writers of 1,100-byte O_DSYNC writes at once: 155
 * against 196 µs at the median, 290 against 400 µs at p99 (docs/architecture.md).
 *
 * Writes go at `end`, the end of the data, by position. The runway is written (zeros, O_DSYNC:
 * durable with the file's length) in the background once less than RUNWAY_LOW_BYTES is left,
 * never under a write in flight: a write reaching beyond the runway waits for an extension
 * in progress. After a crash the runway reads back as a zero-filled tail, which recovery
 * takes as the end of the last segment and cuts off; `seal` (before the WAL starts the next
 * segment) and `close` cut it off first, so a segment that is not the last ends with its data.
 * An extension that fails (a full disk) only stops the runway: writes then extend the file as
 * they would without one.
 */
class PreallocatedWalFile extends NodeWalFile {
  private allocated: number;
  private writing = false;
  private extending: Promise<void> | null = null;
  private preallocating = true;

  constructor(
    handle: FileHandle,
    private end: number,
    /** The runway never takes the file past this length. */
    private readonly limit: number,
  ) {
    super(handle);
    this.allocated = end;
  }

  /** One write at a time (the WAL's flushes are sequential): each goes where the last ended. */
  override async writev(data: readonly Uint8Array[]): Promise<void> {
    assert(!this.writing, 'overlapping writes to a preallocated WAL segment');
    this.writing = true;
    try {
      await this.writeAndExtend(data);
    } finally {
      this.writing = false;
    }
  }

  /** Writes on the calling thread, unless zeros are being written where the data would go. */
  override appendDurableNow(data: readonly Uint8Array[]): boolean {
    const total = totalBytes(data);
    if (this.writing || (this.extending !== null && this.end + total > this.allocated)) return false;
    this.writeNow(data, total, this.end);
    this.wrote(total);
    return true;
  }

  private async writeAndExtend(data: readonly Uint8Array[]): Promise<void> {
    const total = totalBytes(data);
    // Never write where zeros are being written.
    if (this.extending !== null && this.end + total > this.allocated) await this.extending;
    await this.writeAt(data, total, this.end);
    this.wrote(total);
  }

  /** `total` bytes were written at the end: moves it, and starts extending the runway if it runs low. */
  private wrote(total: number): void {
    this.end += total;
    if (this.end > this.allocated) this.allocated = this.end;
    if (
      this.preallocating &&
      this.extending === null &&
      total < RUNWAY_WRITE_BYTES_MAX &&
      this.allocated - this.end < RUNWAY_LOW_BYTES &&
      this.allocated < this.limit
    ) {
      this.extending = this.extend().finally(() => (this.extending = null));
    }
  }

  override async truncate(length: number): Promise<void> {
    await this.extending;
    await super.truncate(length);
    this.end = length;
    this.allocated = length;
  }

  override async datasync(): Promise<void> {
    await this.extending;
    await super.datasync();
  }

  override async seal(): Promise<void> {
    this.preallocating = false;
    await this.extending;
    if (this.allocated === this.end) return;
    await super.truncate(this.end);
    this.allocated = this.end;
    await super.datasync();
  }

  override async close(): Promise<void> {
    try {
      await this.seal();
    } finally {
      await super.close();
    }
  }

  private async extend(): Promise<void> {
    const from = this.allocated;
    const bytes = Math.min(RUNWAY_BYTES, this.limit - from);
    try {
      let written = 0;
      while (written < bytes) {
        const { bytesWritten } = await this.fileHandle.write(ZEROS, 0, bytes - written, from + written);
        if (bytesWritten === 0) throw new Error('runway write made no progress');
        written += bytesWritten;
      }
      this.allocated = from + bytes;
    } catch {
      // A full disk or a failing one: writes go on extending the file (and meet the error
      // themselves, where the WAL handles it). Zeros partly written past `allocated` are
      // overwritten by later writes, cut by `seal`, or read as the end after a crash.
      this.preallocating = false;
    }
  }
}

class NodeReadFile implements StoreReadFile {
  constructor(private readonly fd: number) {}

  size(): number {
    return fstatSync(this.fd).size;
  }

  readSync(position: number, length: number): Uint8Array {
    const buf = Buffer.allocUnsafe(length);
    let got = 0;
    // readSync may return fewer bytes than asked before the end of the file; 0 is the end.
    while (got < length) {
      const n = readSync(this.fd, buf, got, length - got, position + got);
      if (n === 0) break;
      got += n;
    }
    return got === length ? buf : buf.subarray(0, got);
  }

  close(): void {
    try {
      closeSync(this.fd);
    } catch {
      // Nothing was written through this descriptor: there is nothing a failed close can lose.
    }
  }
}
