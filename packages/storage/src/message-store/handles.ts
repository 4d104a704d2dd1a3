/**
 * The handle table: one slot per live record, in typed-array columns, so that a million
 * queued messages cost a few typed arrays instead of a million objects. A handle is a slot
 * number. Per slot: record id (f64), segment (u32), frame offset (u32), message bytes (u32),
 * references (u32): HANDLE_SLOT_BYTES = 24 bytes. Free slots are chained through their
 * offset column (a free slot has no location), so the free list costs nothing.
 *
 * The columns are cut in pages of PAGE_SLOTS slots, made when a slot in them is first
 * needed and dropped once none of their slots is live, so the table's memory follows the
 * live records wherever their slots are. (With one array per column, a drained queue's last
 * few hundred messages, whose slots are the highest, kept a table sized for the peak: 240 MB
 * after a 10M backlog drained.) Growing makes a page and copies nothing. Empty pages are
 * dropped, and the free list rebuilt lowest slot first (so new records fill the bottom), by
 * a check after every PAGE_SLOTS releases (or an eighth of the slots handed out, if more:
 * O(1) a release, amortized), when the last live slot is released, and by `trim`. A slot of a
 * dropped page is handed out again once no other is free: the lowest dropped page is made anew.
 */
import { assert } from '../assert.js';

export const HANDLE_SLOT_BYTES = 8 + 4 + 4 + 4 + 4;
/** Slots per page: 16,384 (384 KiB of columns). */
const PAGE_BITS = 14;
export const PAGE_SLOTS = 1 << PAGE_BITS;
const SLOT_MASK = PAGE_SLOTS - 1;
/** Handles stay small integers (V8 keeps them unboxed). */
const SLOTS_MAX = 2 ** 31 - 1;
const NO_SLOT = 0xffffffff;

class Page {
  readonly recordIds = new Float64Array(PAGE_SLOTS);
  readonly segments = new Uint32Array(PAGE_SLOTS);
  /** A live slot's frame offset; a free slot's next free slot (NO_SLOT ends the list). */
  readonly offsets = new Uint32Array(PAGE_SLOTS);
  readonly lengths = new Uint32Array(PAGE_SLOTS);
  /** Invariant: 0 exactly for free slots. */
  readonly refcounts = new Uint32Array(PAGE_SLOTS);
  /** Live slots in this page. */
  live = 0;
}

export class HandleTable {
  /** Page n holds slots [n * PAGE_SLOTS, (n + 1) * PAGE_SLOTS); null once dropped. */
  private pages: Array<Page | null> = [];
  /** Dropped pages below the last one, highest first (the lowest is made anew first). */
  private dropped: number[] = [];
  private freeHead = NO_SLOT;
  /** Slots below this have been handed out at least once. */
  private highWater = 0;
  private liveSlots = 0;
  /** Releases since the last check for empty pages. */
  private releasesSinceCheck = 0;

  /** Slots in use. */
  get live(): number {
    return this.liveSlots;
  }

  /** Slots ever handed out (live and free), up to the highest page kept: the range `liveIn` scans. */
  get slots(): number {
    return this.highWater;
  }

  /** Bytes of the columns, what the table costs in memory. */
  get memoryBytes(): number {
    let pages = 0;
    for (const page of this.pages) if (page !== null) pages++;
    return pages * PAGE_SLOTS * HANDLE_SLOT_BYTES;
  }

  /** A slot with one reference. */
  allocate(recordId: number, segment: number, offset: number, messageBytes: number): number {
    if (this.freeHead === NO_SLOT && this.dropped.length > 0) this.remake(this.dropped.pop()!);
    let slot = this.freeHead;
    let page: Page;
    if (slot !== NO_SLOT) {
      page = this.pages[slot >>> PAGE_BITS]!;
      this.freeHead = page.offsets[slot & SLOT_MASK]!;
    } else {
      assert(this.highWater < SLOTS_MAX, 'the handle table is full');
      slot = this.highWater++;
      const at = slot >>> PAGE_BITS;
      if (at === this.pages.length) this.pages.push(new Page());
      page = this.pages[at]!;
    }
    const i = slot & SLOT_MASK;
    page.recordIds[i] = recordId;
    page.segments[i] = segment;
    page.offsets[i] = offset;
    page.lengths[i] = messageBytes;
    page.refcounts[i] = 1;
    page.live++;
    this.liveSlots++;
    return slot;
  }

  isLive(handle: number): boolean {
    if (!Number.isInteger(handle) || handle < 0 || handle >= this.highWater) return false;
    const page = this.pages[handle >>> PAGE_BITS];
    return page != null && page.refcounts[handle & SLOT_MASK]! > 0;
  }

  recordId(handle: number): number {
    return this.pages[handle >>> PAGE_BITS]!.recordIds[handle & SLOT_MASK]!;
  }

  segment(handle: number): number {
    return this.pages[handle >>> PAGE_BITS]!.segments[handle & SLOT_MASK]!;
  }

  offset(handle: number): number {
    return this.pages[handle >>> PAGE_BITS]!.offsets[handle & SLOT_MASK]!;
  }

  messageBytes(handle: number): number {
    return this.pages[handle >>> PAGE_BITS]!.lengths[handle & SLOT_MASK]!;
  }

  references(handle: number): number {
    return this.pages[handle >>> PAGE_BITS]!.refcounts[handle & SLOT_MASK]!;
  }

  retain(handle: number): void {
    const page = this.pages[handle >>> PAGE_BITS]!;
    const i = handle & SLOT_MASK;
    assert(page.refcounts[i]! < 0xffffffff, () => `handle ${handle} has too many references`);
    page.refcounts[i]!++;
  }

  /** Drops one reference; true when it was the last (the slot is then free). */
  release(handle: number): boolean {
    const page = this.pages[handle >>> PAGE_BITS]!;
    const i = handle & SLOT_MASK;
    const left = page.refcounts[i]! - 1;
    page.refcounts[i] = left;
    if (left > 0) return false;
    page.offsets[i] = this.freeHead;
    this.freeHead = handle;
    page.live--;
    this.liveSlots--;
    if (++this.releasesSinceCheck >= Math.max(PAGE_SLOTS, this.highWater >>> 3) || this.liveSlots === 0) this.dropEmptyPages();
    return true;
  }

  /** Room for `count` slots without growing: nothing to do, pages are made as they are needed. */
  reserve(count: number): void {
    assert(count <= SLOTS_MAX, () => `${count} handles are more than the table holds`);
  }

  /** Drops the pages with no live slot now (after the adoptions at open; when the store is idle). */
  trim(): void {
    this.dropEmptyPages();
  }

  /** Points a live record at its new copy (compaction). */
  move(handle: number, segment: number, offset: number): void {
    const page = this.pages[handle >>> PAGE_BITS]!;
    page.segments[handle & SLOT_MASK] = segment;
    page.offsets[handle & SLOT_MASK] = offset;
  }

  /** The live handles whose record is in `segment`, in ascending frame offset. */
  liveIn(segment: number): Uint32Array {
    const found: number[] = [];
    this.pages.forEach((page, at) => {
      if (page === null || page.live === 0) return;
      const base = at << PAGE_BITS;
      const end = Math.min(PAGE_SLOTS, this.highWater - base);
      for (let i = 0; i < end; i++) if (page.refcounts[i]! > 0 && page.segments[i] === segment) found.push(base + i);
    });
    return Uint32Array.from(found).sort((a, b) => this.offset(a) - this.offset(b));
  }

  /** Drops every page with no live slot, lowers the top to the highest page kept, and rebuilds the free list lowest first. */
  private dropEmptyPages(): void {
    this.releasesSinceCheck = 0;
    let droppedAny = false;
    for (let at = 0; at < this.pages.length; at++) {
      const page = this.pages[at];
      if (page != null && page.live === 0) {
        this.pages[at] = null;
        droppedAny = true;
      }
    }
    if (!droppedAny) return;
    while (this.pages.length > 0 && this.pages[this.pages.length - 1] === null) this.pages.pop();
    this.highWater = Math.min(this.highWater, this.pages.length << PAGE_BITS);
    this.dropped = [];
    for (let at = this.pages.length - 1; at >= 0; at--) if (this.pages[at] === null) this.dropped.push(at);
    this.freeHead = NO_SLOT;
    for (let at = this.pages.length - 1; at >= 0; at--) {
      const page = this.pages[at];
      if (page == null) continue;
      const end = Math.min(PAGE_SLOTS, this.highWater - (at << PAGE_BITS));
      for (let i = end - 1; i >= 0; i--) {
        if (page.refcounts[i] !== 0) continue;
        page.offsets[i] = this.freeHead;
        this.freeHead = (at << PAGE_BITS) + i;
      }
    }
  }

  /** Makes dropped page `at` anew, all its slots free (ahead of the free list, lowest first). */
  private remake(at: number): void {
    const page = new Page();
    this.pages[at] = page;
    for (let i = PAGE_SLOTS - 1; i >= 0; i--) {
      page.offsets[i] = this.freeHead;
      this.freeHead = (at << PAGE_BITS) + i;
    }
  }
}
