/**
 * Message id -> store handle for one replica, in id order, in two typed arrays (12 bytes a
 * slot) instead of a Map entry (several times that): a 1M-message backlog costs ~12-18 MB
 * here. Ids arrive in increasing order (they grow with the log), so adding is an append and
 * finding is a binary search; a removed id leaves a hole, skipped from the front at once
 * (in-order consumption) and squeezed out once holes outnumber the live slots.
 */
const NONE = -1;
const CAPACITY_MIN = 64;

export class IdHandleIndex {
  private ids = new Float64Array(CAPACITY_MIN);
  private handles = new Int32Array(CAPACITY_MIN);
  /** Slots in use are [head, tail); a hole has handle NONE. */
  private head = 0;
  private tail = 0;
  private live = 0;

  get size(): number {
    return this.live;
  }

  /** The handle of `id`, or undefined. */
  get(id: number): number | undefined {
    const at = this.find(id);
    return at < 0 ? undefined : this.handles[at]!;
  }

  /** Adds `id` (or replaces its handle); returns the handle it replaced, or undefined. */
  set(id: number, handle: number): number | undefined {
    if (this.tail === this.head || id > this.ids[this.tail - 1]!) {
      this.append(id, handle);
      return undefined;
    }
    const at = this.lowerBound(id);
    if (at < this.tail && this.ids[at] === id) {
      const previous = this.handles[at]!;
      this.handles[at] = handle;
      if (previous === NONE) {
        this.live++;
        return undefined;
      }
      return previous;
    }
    // Not in increasing order (no replica does this): insert in place.
    this.append(0, NONE);
    this.ids.copyWithin(at + 1, at, this.tail - 1);
    this.handles.copyWithin(at + 1, at, this.tail - 1);
    this.ids[at] = id;
    this.handles[at] = handle;
    this.live++;
    return undefined;
  }

  /** Removes `id`; returns its handle, or undefined when it was not there. */
  delete(id: number): number | undefined {
    const at = this.find(id);
    if (at < 0) return undefined;
    const handle = this.handles[at]!;
    this.handles[at] = NONE;
    this.live--;
    while (this.head < this.tail && this.handles[this.head] === NONE) this.head++;
    if (this.live === 0) {
      this.head = 0;
      this.tail = 0;
      if (this.ids.length > CAPACITY_MIN) this.resize(CAPACITY_MIN);
    } else if (this.tail - this.head - this.live > this.live + 1024) {
      this.squeeze();
    } else if (this.tail - this.head < this.ids.length / 4 && this.ids.length > CAPACITY_MIN) {
      this.resize(Math.max(CAPACITY_MIN, 2 * (this.tail - this.head)));
    }
    return handle;
  }

  /** The live ids in order (the index must not change while this is iterated). */
  *keys(): IterableIterator<number> {
    for (let at = this.head; at < this.tail; at++) if (this.handles[at] !== NONE) yield this.ids[at]!;
  }

  /** The smallest live id, or undefined. */
  first(): number | undefined {
    return this.live === 0 ? undefined : this.ids[this.head];
  }

  /** Calls `each` for every live id in order; `each` must not change the index. */
  forEach(each: (id: number, handle: number) => void): void {
    for (let at = this.head; at < this.tail; at++) {
      const handle = this.handles[at]!;
      if (handle !== NONE) each(this.ids[at]!, handle);
    }
  }

  /** The largest live id, or undefined. */
  last(): number | undefined {
    if (this.live === 0) return undefined;
    let at = this.tail - 1;
    while (this.handles[at] === NONE) at--;
    return this.ids[at];
  }

  /**
   * An independent copy (two block copies, into `reuse`'s arrays when they have room): a
   * snapshot lists it a step at a time while this one changes.
   */
  copy(reuse?: IdHandleIndex | null): IdHandleIndex {
    const copy = new IdHandleIndex();
    const used = this.tail - this.head;
    if (reuse !== undefined && reuse !== null && reuse.ids.length >= used) {
      reuse.ids.set(this.ids.subarray(this.head, this.tail));
      reuse.handles.set(this.handles.subarray(this.head, this.tail));
      copy.ids = reuse.ids;
      copy.handles = reuse.handles;
    } else {
      // As long as this one's arrays: the next copies fit while this index does not grow.
      copy.ids = new Float64Array(this.ids.length);
      copy.handles = new Int32Array(this.ids.length);
      copy.ids.set(this.ids.subarray(this.head, this.tail));
      copy.handles.set(this.handles.subarray(this.head, this.tail));
    }
    copy.head = 0;
    copy.tail = this.tail - this.head;
    copy.live = this.live;
    return copy;
  }

  /** Positions to walk with `scan`: [0, end). */
  get end(): number {
    return this.tail - this.head;
  }

  /**
   * Calls `each` for the live ids at positions [from, to) in order (positions count from the
   * smallest id, holes included; see `end`); `each` must not change the index.
   */
  scan(from: number, to: number, each: (id: number, handle: number) => void): void {
    const end = this.head + Math.min(to, this.tail - this.head);
    for (let at = this.head + from; at < end; at++) {
      const handle = this.handles[at]!;
      if (handle !== NONE) each(this.ids[at]!, handle);
    }
  }

  /** The live ids in order, in a new array (for removing while walking). */
  liveIds(): number[] {
    const out = new Array<number>(this.live);
    let i = 0;
    this.forEach((id) => (out[i++] = id));
    return out;
  }

  /** Room for `count` ids in all without growing (a restore that knows how many come). */
  reserve(count: number): void {
    if (count > this.ids.length) this.resize(count);
  }

  clear(): void {
    this.head = 0;
    this.tail = 0;
    this.live = 0;
    this.resize(CAPACITY_MIN);
  }

  private append(id: number, handle: number): void {
    if (this.tail === this.ids.length) {
      const used = this.tail - this.head;
      if (this.head > 0 && used < this.ids.length / 2) this.moveToFront();
      else this.resize(Math.max(CAPACITY_MIN, Math.ceil(used * 1.5)));
    }
    this.ids[this.tail] = id;
    this.handles[this.tail] = handle;
    this.tail++;
    if (handle !== NONE) this.live++;
  }

  private find(id: number): number {
    const at = this.lowerBound(id);
    return at < this.tail && this.ids[at] === id && this.handles[at] !== NONE ? at : -1;
  }

  /** The first slot in [head, tail) whose id is >= `id`. */
  private lowerBound(id: number): number {
    let lo = this.head;
    let hi = this.tail;
    // In-order consumption looks at the front.
    if (lo < hi && this.ids[lo]! >= id) return lo;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.ids[mid]! < id) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  /** Drops the holes. */
  private squeeze(): void {
    let to = 0;
    for (let at = this.head; at < this.tail; at++) {
      const handle = this.handles[at]!;
      if (handle === NONE) continue;
      this.ids[to] = this.ids[at]!;
      this.handles[to] = handle;
      to++;
    }
    this.head = 0;
    this.tail = to;
    if (this.ids.length > CAPACITY_MIN && to < this.ids.length / 4) this.resize(Math.max(CAPACITY_MIN, 2 * to));
  }

  private moveToFront(): void {
    this.ids.copyWithin(0, this.head, this.tail);
    this.handles.copyWithin(0, this.head, this.tail);
    this.tail -= this.head;
    this.head = 0;
  }

  private resize(capacity: number): void {
    const used = this.tail - this.head;
    const ids = new Float64Array(Math.max(capacity, used));
    const handles = new Int32Array(ids.length);
    ids.set(this.ids.subarray(this.head, this.tail));
    handles.set(this.handles.subarray(this.head, this.tail));
    this.ids = ids;
    this.handles = handles;
    this.head = 0;
    this.tail = used;
  }
}
