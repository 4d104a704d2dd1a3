/**
 * Every record found in the segment files at open, sorted by record id, for `adopt` until
 * `recovered()` drops it: 24 bytes per record on disk (record id f64, segment u32, offset
 * u32, message bytes u32, handle i32), in typed arrays.
 *
 * A record id can be in two files after a crash during compaction (the copy was written, the
 * old segment not yet deleted). Both copies hold the same bytes under a checked crc; the
 * lookup keeps the one in the newest file, so the old segment is the one left with nothing
 * live.
 */
import { assert } from '../assert.js';
import type { SegmentRecords } from './segment-records.js';

export interface FoundSegment {
  readonly segment: number;
  readonly records: SegmentRecords;
}

export class RecoveryLookup {
  private lastFound = -1;

  private constructor(
    private readonly recordIds: Float64Array,
    private readonly segments: Uint32Array,
    private readonly offsets: Uint32Array,
    private readonly lengths: Uint32Array,
    /** The handle of an adopted record, -1 while nobody adopted it. */
    private readonly handles: Int32Array,
  ) {}

  /** Builds the lookup from the records of each segment, `found` in ascending segment order. */
  static build(found: readonly FoundSegment[]): RecoveryLookup {
    let total = 0;
    for (const { records } of found) total += records.count;
    const ids = new Float64Array(total);
    const segs = new Uint32Array(total);
    const offs = new Uint32Array(total);
    const lens = new Uint32Array(total);
    let at = 0;
    let sorted = true;
    for (const { segment, records } of found) {
      for (let i = 0; i < records.count; i++, at++) {
        ids[at] = records.recordId(i);
        segs[at] = segment;
        offs[at] = records.offset(i);
        lens[at] = records.messageBytes(i);
        if (at > 0 && ids[at]! <= ids[at - 1]!) sorted = false;
      }
    }
    if (sorted) return new RecoveryLookup(ids, segs, offs, lens, new Int32Array(total).fill(-1));
    // Compaction copies old records among new ones, so the files are not in id order. Sort
    // positions by id, newest segment first among equal ids, then keep the first of each id.
    const order = sortedPositions(ids, segs);
    let unique = 0;
    for (let i = 0; i < total; i++) if (i === 0 || ids[order[i]!] !== ids[order[i - 1]!]) unique++;
    const lookup = new RecoveryLookup(
      new Float64Array(unique),
      new Uint32Array(unique),
      new Uint32Array(unique),
      new Uint32Array(unique),
      new Int32Array(unique).fill(-1),
    );
    for (let i = 0, j = 0; i < total; i++) {
      const k = order[i]!;
      if (i > 0 && ids[k] === ids[order[i - 1]!]) continue;
      lookup.recordIds[j] = ids[k]!;
      lookup.segments[j] = segs[k]!;
      lookup.offsets[j] = offs[k]!;
      lookup.lengths[j] = lens[k]!;
      j++;
    }
    return lookup;
  }

  get size(): number {
    return this.recordIds.length;
  }

  /** The largest record id found, 0 when none. */
  get maxRecordId(): number {
    return this.recordIds.length === 0 ? 0 : this.recordIds[this.recordIds.length - 1]!;
  }

  /** Position of `recordId` in the lookup, or -1. Adoptions come in id order: the one after the last found is tried first. */
  find(recordId: number): number {
    const next = this.lastFound + 1;
    if (next < this.recordIds.length && this.recordIds[next] === recordId) return (this.lastFound = next);
    let low = 0;
    let high = this.recordIds.length - 1;
    while (low <= high) {
      const mid = (low + high) >>> 1;
      const id = this.recordIds[mid]!;
      if (id === recordId) return (this.lastFound = mid);
      if (id < recordId) low = mid + 1;
      else high = mid - 1;
    }
    return -1;
  }

  segment(at: number): number {
    return this.segments[at]!;
  }

  offset(at: number): number {
    return this.offsets[at]!;
  }

  messageBytes(at: number): number {
    return this.lengths[at]!;
  }

  /** The handle adopting the record at `at`, or -1. */
  handle(at: number): number {
    return this.handles[at]!;
  }

  setHandle(at: number, handle: number): void {
    assert(handle >= -1 && handle <= 0x7fffffff, () => `bad handle ${handle}`);
    this.handles[at] = handle;
  }

  /** The record of `handle` died: a later adopt of its id gets a fresh handle. */
  forget(recordId: number, handle: number): void {
    const at = this.find(recordId);
    if (at >= 0 && this.handles[at] === handle) this.handles[at] = -1;
  }
}

/**
 * Positions 0..n-1 ordered by id, the higher segment first among equal ids. The files are
 * ascending runs (each compaction starts a new run in the segment it copies into), so this
 * merges the runs pairwise (natural merge sort): O(n log runs) instead of a comparator sort
 * of every position.
 */
function sortedPositions(ids: Float64Array, segs: Uint32Array): Uint32Array {
  const n = ids.length;
  const bounds: number[] = [0];
  for (let i = 1; i < n; i++) if (!(ids[i - 1]! < ids[i]!)) bounds.push(i);
  bounds.push(n);
  let from = new Uint32Array(n);
  for (let i = 0; i < n; i++) from[i] = i;
  let to = new Uint32Array(n);
  let runs = bounds;
  while (runs.length > 2) {
    const next: number[] = [0];
    for (let r = 0; r + 1 < runs.length; r += 2) {
      const lo = runs[r]!;
      const mid = runs[r + 1]!;
      const hi = r + 2 < runs.length ? runs[r + 2]! : mid;
      mergeInto(ids, segs, from, to, lo, mid, hi);
      next.push(hi);
    }
    const swap = from;
    from = to;
    to = swap;
    runs = next;
  }
  return from;
}

/** Merges the sorted position runs from[lo, mid) and from[mid, hi) into to[lo, hi). */
function mergeInto(ids: Float64Array, segs: Uint32Array, from: Uint32Array, to: Uint32Array, lo: number, mid: number, hi: number): void {
  let i = lo;
  let j = mid;
  let k = lo;
  while (i < mid && j < hi) {
    const a = from[i]!;
    const b = from[j]!;
    const idA = ids[a]!;
    const idB = ids[b]!;
    if (idB < idA || (idB === idA && segs[b]! > segs[a]!)) {
      to[k++] = b;
      j++;
    } else {
      to[k++] = a;
      i++;
    }
  }
  while (i < mid) to[k++] = from[i++]!;
  while (j < hi) to[k++] = from[j++]!;
}
