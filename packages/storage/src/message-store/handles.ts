/**
 * The handle table: one slot per live record, in typed-array columns, so that a million
 * queued messages cost a few typed arrays instead of a million objects. A handle is a slot
 * number. Per slot: record id (f64), segment (u32), frame offset (u32), message bytes (u32),
 * references (u32): HANDLE_SLOT_BYTES = 24 bytes. Free slots are chained through their
 * offset column (a free slot has no location), so the free list costs nothing.
 *
 * Capacity grows by half when full. It shrinks once the live slots are under a quarter of
 * it: the free slots above the highest live one are dropped and the free list is rebuilt
 * lowest first (so new records fill the bottom), checked after every capacity/8 releases
 * (O(1) a release, amortized) and when the last live slot is released. A drained node gives the table's memory back.
 */
import { assert } from '../assert.js';

export const HANDLE_SLOT_BYTES = 8 + 4 + 4 + 4 + 4;
const CAPACITY_MIN = 1024;
/** Handles stay small integers (V8 keeps them unboxed). */
const SLOTS_MAX = 2 ** 31 - 1;
const NO_SLOT = 0xffffffff;

export class HandleTable {
  private recordIds = new Float64Array(CAPACITY_MIN);
  private segments = new Uint32Array(CAPACITY_MIN);
  /** A live slot's frame offset; a free slot's next free slot (NO_SLOT ends the list). */
  private offsets = new Uint32Array(CAPACITY_MIN);
  private lengths = new Uint32Array(CAPACITY_MIN);
  /** Invariant: 0 exactly for free slots. */
  private refcounts = new Uint32Array(CAPACITY_MIN);
  private freeHead = NO_SLOT;
  /** Slots below this have been handed out at least once. */
  private highWater = 0;
  private liveSlots = 0;
  /** Releases since the last shrink check. */
  private releasesSinceCheck = 0;

  /** Slots in use. */
  get live(): number {
    return this.liveSlots;
  }

  /** Slots ever handed out (live and free): the range `liveIn` scans. */
  get slots(): number {
    return this.highWater;
  }

  /** Bytes of the columns, what the table costs in memory. */
  get memoryBytes(): number {
    return this.recordIds.length * HANDLE_SLOT_BYTES;
  }

  /** A slot with one reference. */
  allocate(recordId: number, segment: number, offset: number, messageBytes: number): number {
    let slot = this.freeHead;
    if (slot !== NO_SLOT) {
      this.freeHead = this.offsets[slot]!;
    } else {
      if (this.highWater === this.recordIds.length) this.grow();
      slot = this.highWater++;
    }
    this.recordIds[slot] = recordId;
    this.segments[slot] = segment;
    this.offsets[slot] = offset;
    this.lengths[slot] = messageBytes;
    this.refcounts[slot] = 1;
    this.liveSlots++;
    return slot;
  }

  isLive(handle: number): boolean {
    return Number.isInteger(handle) && handle >= 0 && handle < this.highWater && this.refcounts[handle]! > 0;
  }

  recordId(handle: number): number {
    return this.recordIds[handle]!;
  }

  segment(handle: number): number {
    return this.segments[handle]!;
  }

  offset(handle: number): number {
    return this.offsets[handle]!;
  }

  messageBytes(handle: number): number {
    return this.lengths[handle]!;
  }

  references(handle: number): number {
    return this.refcounts[handle]!;
  }

  retain(handle: number): void {
    assert(this.refcounts[handle]! < 0xffffffff, () => `handle ${handle} has too many references`);
    this.refcounts[handle]!++;
  }

  /** Drops one reference; true when it was the last (the slot is then free). */
  release(handle: number): boolean {
    const left = this.refcounts[handle]! - 1;
    this.refcounts[handle] = left;
    if (left > 0) return false;
    this.offsets[handle] = this.freeHead;
    this.freeHead = handle;
    this.liveSlots--;
    const capacity = this.recordIds.length;
    if (capacity > CAPACITY_MIN && this.liveSlots * 4 < capacity && (++this.releasesSinceCheck >= capacity >>> 3 || this.liveSlots === 0)) this.shrink();
    return true;
  }

  /** Drops the free slots above the highest live one, and the capacity they need no more. */
  private shrink(): void {
    this.releasesSinceCheck = 0;
    let top = this.highWater;
    while (top > 0 && this.refcounts[top - 1] === 0) top--;
    const capacity = Math.max(CAPACITY_MIN, Math.ceil(top * 1.5));
    if (capacity * 2 > this.recordIds.length) return;
    this.highWater = top;
    this.recordIds = this.recordIds.slice(0, capacity);
    this.segments = this.segments.slice(0, capacity);
    this.offsets = this.offsets.slice(0, capacity);
    this.lengths = this.lengths.slice(0, capacity);
    this.refcounts = this.refcounts.slice(0, capacity);
    // The free list again, lowest slot first.
    this.freeHead = NO_SLOT;
    for (let slot = top - 1; slot >= 0; slot--) {
      if (this.refcounts[slot] !== 0) continue;
      this.offsets[slot] = this.freeHead;
      this.freeHead = slot;
    }
  }

  /** Room for `count` slots in all without growing (the records found at open, before they are adopted). */
  reserve(count: number): void {
    const capacity = Math.min(SLOTS_MAX, count);
    if (capacity <= this.recordIds.length) return;
    this.resizeTo(capacity);
  }

  /** Gives back capacity (as a release would) once under a quarter of it is live: after the adoptions at open. */
  trim(): void {
    if (this.recordIds.length > CAPACITY_MIN && this.liveSlots * 4 < this.recordIds.length) this.shrink();
  }

  /** Points a live record at its new copy (compaction). */
  move(handle: number, segment: number, offset: number): void {
    this.segments[handle] = segment;
    this.offsets[handle] = offset;
  }

  /** The live handles whose record is in `segment`, in ascending frame offset. */
  liveIn(segment: number): Uint32Array {
    let count = 0;
    for (let slot = 0; slot < this.highWater; slot++) {
      if (this.refcounts[slot]! > 0 && this.segments[slot] === segment) count++;
    }
    const found = new Uint32Array(count);
    for (let slot = 0, i = 0; slot < this.highWater; slot++) {
      if (this.refcounts[slot]! > 0 && this.segments[slot] === segment) found[i++] = slot;
    }
    return found.sort((a, b) => this.offsets[a]! - this.offsets[b]!);
  }

  private grow(): void {
    const capacity = Math.min(SLOTS_MAX, Math.ceil(this.recordIds.length * 1.5));
    assert(capacity > this.recordIds.length, 'the handle table is full');
    this.resizeTo(capacity);
  }

  private resizeTo(capacity: number): void {
    this.recordIds = grown(this.recordIds, new Float64Array(capacity));
    this.segments = grown(this.segments, new Uint32Array(capacity));
    this.offsets = grown(this.offsets, new Uint32Array(capacity));
    this.lengths = grown(this.lengths, new Uint32Array(capacity));
    this.refcounts = grown(this.refcounts, new Uint32Array(capacity));
  }
}

function grown<T extends Float64Array | Uint32Array>(old: T, next: T): T {
  next.set(old);
  return next;
}
