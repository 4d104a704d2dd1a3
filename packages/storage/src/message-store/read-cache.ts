/**
 * The read-ahead cache: aligned chunks of segment files (`readAheadBytes` each, shorter at
 * the written end of a segment), least recently used evicted first, never more than
 * `bytesMax` bytes in all. A consumer draining a queue reads its messages in about the order
 * they were put, so one read of a chunk serves the hundreds of messages after it.
 *
 * A Map keeps insertion order: a hit moves its chunk to the end, eviction takes from the front.
 */
import { assert } from '../assert.js';

/** Chunk numbers below this fit beside a u32 segment number in one safe integer key. */
const CHUNKS_PER_SEGMENT_MAX = 2 ** 21;

export class ReadCache {
  private readonly chunks = new Map<number, Uint8Array>();
  /** Invariant: the sum of the cached chunks' lengths, and at most `bytesMax`. */
  private held = 0;
  /** Key of the last chunk in `chunks` (-1 if none): a hit on it need not move it. */
  private newest = -1;
  /** Whether anything was looked up since the last `dropIfUnused`. */
  private used = false;

  constructor(readonly bytesMax: number) {
    assert(Number.isSafeInteger(bytesMax) && bytesMax >= 0, () => `bad cache size ${bytesMax}`);
  }

  get bytes(): number {
    return this.held;
  }

  /** Chunk `chunk` of segment `segment`, now the most recently used; or undefined. */
  get(segment: number, chunk: number): Uint8Array | undefined {
    const key = keyOf(segment, chunk);
    this.used = true;
    const bytes = this.chunks.get(key);
    if (bytes === undefined || key === this.newest) return bytes;
    this.chunks.delete(key);
    this.chunks.set(key, bytes);
    this.newest = key;
    return bytes;
  }

  /** Caches a chunk (replacing an older copy), evicting others to stay within `bytesMax`. */
  set(segment: number, chunk: number, bytes: Uint8Array): void {
    this.delete(segment, chunk);
    if (bytes.byteLength > this.bytesMax) return;
    for (const [key, old] of this.chunks) {
      if (this.held + bytes.byteLength <= this.bytesMax) break;
      this.chunks.delete(key);
      this.held -= old.byteLength;
    }
    this.newest = keyOf(segment, chunk);
    this.chunks.set(this.newest, bytes);
    this.held += bytes.byteLength;
    assert(this.held <= this.bytesMax, 'read cache over its bound');
  }

  delete(segment: number, chunk: number): void {
    const key = keyOf(segment, chunk);
    const old = this.chunks.get(key);
    if (old === undefined) return;
    this.chunks.delete(key);
    this.held -= old.byteLength;
    if (key === this.newest) this.newest = -1;
  }

  /** Drops every chunk of a segment (deleted: its number is never used again). */
  dropSegment(segment: number): void {
    for (const [key, old] of this.chunks) {
      if (Math.floor(key / CHUNKS_PER_SEGMENT_MAX) !== segment) continue;
      this.chunks.delete(key);
      this.held -= old.byteLength;
      if (key === this.newest) this.newest = -1;
    }
  }

  /**
   * Empties the cache when nothing was looked up since the previous call (or since it was
   * made): the cache of a node whose consumers went quiet, or whose queues drained, is given
   * back instead of kept at its bound. Returns the bytes dropped.
   */
  dropIfUnused(): number {
    const dropped = this.used ? 0 : this.held;
    if (!this.used) this.clear();
    this.used = false;
    return dropped;
  }

  clear(): void {
    this.chunks.clear();
    this.held = 0;
    this.newest = -1;
  }
}

function keyOf(segment: number, chunk: number): number {
  assert(chunk < CHUNKS_PER_SEGMENT_MAX, () => `chunk ${chunk} of segment ${segment} out of range`);
  return segment * CHUNKS_PER_SEGMENT_MAX + chunk;
}
