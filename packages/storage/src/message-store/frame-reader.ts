/**
 * Reading frames from segment files, synchronously: through the read-ahead cache (aligned
 * chunks of `readAheadBytes`; a frame across two chunks is assembled from both), or alone
 * for a frame larger than a chunk. Never past a segment's `fileBytes` (what the writer
 * confirmed written): beyond it may lie the leftovers of a failed write.
 */
import { ReadCache } from './read-cache.js';
import { SegmentReaders } from './segment-readers.js';
import type { StoreConfig } from './store-options.js';

const READERS_OPEN_MAX = 64;

export class FrameReader {
  private readonly cache: ReadCache;
  private readonly readers: SegmentReaders;
  private readonly chunkBytes: number;

  constructor(config: StoreConfig) {
    this.cache = new ReadCache(config.cacheBytes);
    this.readers = new SegmentReaders(config.fs, config.dir, READERS_OPEN_MAX);
    this.chunkBytes = config.readAheadBytes;
  }

  get cacheBytes(): number {
    return this.cache.bytes;
  }

  /** A frame too large for the cache is read by itself, into a buffer of its own. */
  readsAlone(frameBytes: number): boolean {
    return frameBytes > this.chunkBytes || this.chunkBytes > this.cache.bytesMax;
  }

  /**
   * The bytes of a frame of segment `segment` (of which `fileBytes` are written): a view of a
   * cached chunk, or its own buffer when `readsAlone`. Throws on an I/O error or a short read.
   */
  read(segment: number, fileBytes: number, offset: number, frameBytes: number): Uint8Array {
    if (offset + frameBytes > fileBytes) throw new Error(`the frame ends past the ${fileBytes} bytes written to its segment`);
    if (this.readsAlone(frameBytes)) return this.readRange(segment, offset, frameBytes);
    const first = Math.floor(offset / this.chunkBytes);
    const last = Math.floor((offset + frameBytes - 1) / this.chunkBytes);
    const head = this.chunk(segment, fileBytes, first, Math.min(offset + frameBytes, (first + 1) * this.chunkBytes));
    const start = offset - first * this.chunkBytes;
    if (first === last) return head.subarray(start, start + frameBytes);
    // Across two chunks (a frame is never larger than one here).
    const tail = this.chunk(segment, fileBytes, last, offset + frameBytes);
    const frame = Buffer.allocUnsafe(frameBytes);
    frame.set(head.subarray(start), 0);
    frame.set(tail.subarray(0, frameBytes - (head.byteLength - start)), head.byteLength - start);
    return frame;
  }

  /** Up to `length` bytes at `offset`, outside the cache (compaction's sequential reads). */
  readRange(segment: number, offset: number, length: number): Uint8Array {
    const bytes = this.readers.get(segment).readSync(offset, length);
    if (bytes.byteLength < length) throw new Error(`short read: ${bytes.byteLength} of ${length} bytes at ${offset}`);
    return bytes;
  }

  /** Drops a segment's cached chunks (suspect, or deleted), and with `closeFile` its descriptor. */
  forget(segment: number, closeFile = false): void {
    this.cache.dropSegment(segment);
    if (closeFile) this.readers.close(segment);
  }

  /** See ReadCache.dropIfUnused. */
  dropCacheIfUnused(): number {
    return this.cache.dropIfUnused();
  }

  close(): void {
    this.readers.closeAll();
    this.cache.clear();
  }

  /** Chunk `index` of a segment, read (again) unless the cached one reaches `neededEnd`. */
  private chunk(segment: number, fileBytes: number, index: number, neededEnd: number): Uint8Array {
    const start = index * this.chunkBytes;
    const cached = this.cache.get(segment, index);
    if (cached !== undefined && start + cached.byteLength >= neededEnd) return cached;
    const bytes = this.readers.get(segment).readSync(start, Math.min(this.chunkBytes, fileBytes - start));
    if (start + bytes.byteLength < neededEnd) throw new Error(`short read: ${bytes.byteLength} bytes at ${start}, the file ends before ${neededEnd}`);
    this.cache.set(segment, index, bytes);
    return bytes;
  }
}
