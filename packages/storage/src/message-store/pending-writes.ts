/**
 * Frames put but not yet written: `put` copies a message's frame here at once (its place in
 * its segment is already decided), the writer hands the unwritten bytes of a segment to one
 * `writev`, and `read` serves a frame from here until that write returned.
 *
 * Frames are packed into chunks of CHUNK_BYTES (a larger frame gets a chunk of its own): no
 * allocation per put, and a chunk keeps filling while an earlier part of it is being
 * written, because `writev` took a view of only the bytes that were there. A chunk is
 * dropped once every byte of it is written and no frame can be added to it.
 *
 * Order: chunks are in file order (segment, then offset) and written in that order; a
 * failed write leaves its bytes unwritten, and the next `take` offers them again first.
 */
import { assert } from '../assert.js';

export const CHUNK_BYTES = 1024 * 1024;

/** Written chunks kept for the next ones (see PendingWrites.spare). */
export const SPARE_CHUNKS_MAX = 4;

class WriteChunk {
  /** Bytes of `buf` holding frames. */
  used = 0;
  /** Bytes handed to the write in flight or written: `used - taken` wait for the next take. */
  taken = 0;
  /** Bytes whose write returned. Invariant: written <= taken <= used <= buf.length. */
  written = 0;

  constructor(
    readonly segment: number,
    /** Offset in the segment file of `buf[0]`. */
    readonly fileOffset: number,
    readonly buf: Buffer,
  ) {}

  get fileEnd(): number {
    return this.fileOffset + this.used;
  }
}

/** The bytes one write must append to `segment` at `offset`. */
export interface WriteBatch {
  readonly segment: number;
  readonly offset: number;
  readonly bufs: readonly Uint8Array[];
  readonly bytes: number;
}

export class PendingWrites {
  private chunks: WriteChunk[] = [];
  /** Bytes put and not yet written (taken or not). */
  private unwritten = 0;
  /** Bytes put and not yet taken. */
  private untaken = 0;
  private inFlight: WriteBatch | null = null;
  /**
   * Buffers of chunks written to the end, for the next chunks. A chunk lives from its first
   * frame until its last is written, often across a few of V8's young-generation
   * collections, so a new 1 MiB buffer per chunk was promoted and then freed only by a full
   * collection; V8 starts one after 64 MB of such external memory. Nothing refers to a
   * written chunk's bytes: `find` serves only unwritten frames and the store copies what it
   * reads.
   */
  private spare: Buffer[] = [];
  /** Whether a frame was put since the last `dropSpareIfIdle`. */
  private putSinceCheck = false;

  /** Bytes of frames whose write has not returned yet. */
  get bytes(): number {
    return this.unwritten;
  }

  /** Bytes of the spare chunks kept for the next ones. */
  get spareBytes(): number {
    return this.spare.length * CHUNK_BYTES;
  }

  /**
   * Drops the spare chunks if nothing was put since the previous call (the store's idle
   * check, every few seconds: an idle store keeps no spare memory); returns the bytes dropped.
   */
  dropSpareIfIdle(): number {
    const idle = !this.putSinceCheck;
    this.putSinceCheck = false;
    if (!idle) return 0;
    const bytes = this.spareBytes;
    this.spare = [];
    return bytes;
  }

  /** Bytes waiting for a write to be started. */
  get waitingBytes(): number {
    return this.untaken;
  }

  /**
   * The space for a frame of `frameBytes` at `offset` of `segment`, to be filled by the
   * caller before the next `take`. Frames of one segment must come in file order, back to back.
   */
  reserve(segment: number, offset: number, frameBytes: number): Uint8Array {
    this.putSinceCheck = true;
    let chunk = this.chunks[this.chunks.length - 1];
    const fits = chunk !== undefined && chunk.segment === segment && chunk.fileEnd === offset && chunk.used + frameBytes <= chunk.buf.length;
    if (!fits) {
      assert(chunk === undefined || chunk.segment < segment || chunk.fileEnd <= offset, () => `frame at ${segment}:${offset} is not after the last one`);
      const buf = frameBytes <= CHUNK_BYTES ? this.spare.pop() : undefined;
      chunk = new WriteChunk(segment, offset, buf ?? Buffer.allocUnsafeSlow(Math.max(CHUNK_BYTES, frameBytes)));
      this.chunks.push(chunk);
    }
    assert(chunk !== undefined, 'no chunk');
    const view = chunk.buf.subarray(chunk.used, chunk.used + frameBytes);
    chunk.used += frameBytes;
    this.unwritten += frameBytes;
    this.untaken += frameBytes;
    return view;
  }

  /** The frame at `offset` of `segment` while its write has not returned, else undefined. */
  find(segment: number, offset: number, frameBytes: number): Uint8Array | undefined {
    // Binary search for the last chunk starting at or before (segment, offset).
    let low = 0;
    let high = this.chunks.length - 1;
    let found: WriteChunk | undefined;
    while (low <= high) {
      const mid = (low + high) >>> 1;
      const chunk = this.chunks[mid]!;
      if (chunk.segment < segment || (chunk.segment === segment && chunk.fileOffset <= offset)) {
        found = chunk;
        low = mid + 1;
      } else {
        high = mid - 1;
      }
    }
    if (found === undefined || found.segment !== segment || offset + frameBytes > found.fileEnd) return undefined;
    const start = offset - found.fileOffset;
    // Written frames are read from the file (and its cache); writes end on frame boundaries.
    if (start < found.written) return undefined;
    return found.buf.subarray(start, start + frameBytes);
  }

  /**
   * Hands out every byte not yet taken of the first segment that has any, for one write.
   * One batch at a time: `written()` or `failed()` must come before the next `take`.
   */
  take(): WriteBatch | null {
    assert(this.inFlight === null, 'a write batch is already in flight');
    const first = this.chunks.findIndex((chunk) => chunk.taken < chunk.used);
    if (first < 0) return null;
    const segment = this.chunks[first]!.segment;
    const offset = this.chunks[first]!.fileOffset + this.chunks[first]!.taken;
    const bufs: Uint8Array[] = [];
    let bytes = 0;
    for (let i = first; i < this.chunks.length && this.chunks[i]!.segment === segment; i++) {
      const chunk = this.chunks[i]!;
      assert(chunk.fileOffset + chunk.taken === offset + bytes, () => `gap before ${segment}:${chunk.fileOffset + chunk.taken}`);
      bufs.push(chunk.buf.subarray(chunk.taken, chunk.used));
      bytes += chunk.used - chunk.taken;
      chunk.taken = chunk.used;
    }
    this.untaken -= bytes;
    this.inFlight = { segment, offset, bufs, bytes };
    return this.inFlight;
  }

  /** The batch from `take` was written: its bytes are on the file now, readable there. */
  written(): void {
    const batch = this.inFlight;
    assert(batch !== null, 'no write batch in flight');
    this.inFlight = null;
    for (const chunk of this.chunks) {
      if (chunk.segment === batch.segment) chunk.written = chunk.taken;
    }
    this.unwritten -= batch.bytes;
    // A chunk is done once written to the end, unless frames can still be added to it.
    const last = this.chunks[this.chunks.length - 1];
    const kept: WriteChunk[] = [];
    for (const chunk of this.chunks) {
      if (chunk.written < chunk.used || (chunk === last && chunk.used < chunk.buf.length)) kept.push(chunk);
      else if (chunk.buf.length === CHUNK_BYTES && this.spare.length < SPARE_CHUNKS_MAX) this.spare.push(chunk.buf);
    }
    this.chunks = kept;
  }

  /** The batch from `take` failed: its bytes stay here, and the next `take` offers them first. */
  failed(): void {
    const batch = this.inFlight;
    assert(batch !== null, 'no write batch in flight');
    this.inFlight = null;
    for (const chunk of this.chunks) {
      if (chunk.segment === batch.segment) chunk.taken = chunk.written;
    }
    this.untaken += batch.bytes;
  }
}
