import { assert } from './errors.js';

/**
 * A growable ring buffer of message ids (numbers). Ready messages are kept as ids
 * only, so a backlog costs 8 bytes per message here plus its header elsewhere. It shrinks
 * back as it empties (a drained backlog gives its memory back).
 */
const MIN_CAPACITY = 16;

export class IdDeque {
  private buffer: Float64Array;
  private head = 0;
  private count = 0;

  constructor(capacity = 16) {
    assert(capacity > 0, 'deque capacity must be positive');
    this.buffer = new Float64Array(capacity);
  }

  get length(): number {
    return this.count;
  }

  pushBack(id: number): void {
    if (this.count === this.buffer.length) this.grow();
    this.buffer[(this.head + this.count) % this.buffer.length] = id;
    this.count += 1;
  }

  pushFront(id: number): void {
    if (this.count === this.buffer.length) this.grow();
    this.head = (this.head - 1 + this.buffer.length) % this.buffer.length;
    this.buffer[this.head] = id;
    this.count += 1;
  }

  peekFront(): number | undefined {
    return this.count === 0 ? undefined : this.buffer[this.head];
  }

  popFront(): number | undefined {
    if (this.count === 0) return undefined;
    const id = this.buffer[this.head];
    this.head = (this.head + 1) % this.buffer.length;
    this.count -= 1;
    if (this.buffer.length > MIN_CAPACITY && this.count * 4 < this.buffer.length) this.resize(Math.max(MIN_CAPACITY, this.count * 2));
    return id;
  }

  clear(): void {
    this.head = 0;
    this.count = 0;
    if (this.buffer.length > MIN_CAPACITY) this.buffer = new Float64Array(MIN_CAPACITY);
  }

  toArray(): number[] {
    const ids: number[] = [];
    for (let i = 0; i < this.count; i += 1) {
      const id = this.buffer[(this.head + i) % this.buffer.length];
      assert(id !== undefined, 'deque slot out of range');
      ids.push(id);
    }
    return ids;
  }

  /** The ids front to back, copied in at most two block copies. */
  toFloat64Array(): Float64Array {
    const out = new Float64Array(this.count);
    this.copyRange(0, this.count, out);
    return out;
  }

  /** The ids at positions `from` to `to - 1` from the front into `out`, in at most two block copies (snapshots). */
  copyRange(from: number, to: number, out: Float64Array): void {
    assert(from >= 0 && from <= to && to <= this.count, 'deque range out of bounds');
    const start = (this.head + from) % this.buffer.length;
    const firstPart = Math.min(to - from, this.buffer.length - start);
    out.set(this.buffer.subarray(start, start + firstPart));
    out.set(this.buffer.subarray(0, to - from - firstPart), firstPart);
  }

  /** An independent copy (one block copy of the ids, into `reuse`'s buffer when it has room). */
  clone(reuse?: IdDeque): IdDeque {
    const copy = new IdDeque(1);
    const spare = reuse?.buffer;
    if (spare !== undefined && spare.length >= this.count && this.count > 0) {
      this.copyRange(0, this.count, spare.subarray(0, this.count));
      copy.buffer = spare;
    } else {
      // As long as this one's buffer: the next copies fit while this deque does not grow.
      copy.buffer = new Float64Array(Math.max(1, this.buffer.length));
      this.copyRange(0, this.count, copy.buffer.subarray(0, this.count));
    }
    // `head` is left as built (0): a first store to a field V8 saw written only when its
    // object was built makes it treat the field as changing, and throws away the optimised
    // code that relied on it (see QueueStateRecord in state.ts).
    copy.count = this.count;
    return copy;
  }

  /** A deque of `ids`, front to back, using the array itself as its buffer (no copy: the caller gives it up). */
  static adopt(ids: Float64Array): IdDeque {
    if (ids.length < MIN_CAPACITY) return IdDeque.fromArray(ids);
    const deque = new IdDeque(1);
    deque.buffer = ids;
    deque.count = ids.length;
    return deque;
  }

  static fromArray(ids: ArrayLike<number>): IdDeque {
    const deque = new IdDeque(Math.max(MIN_CAPACITY, ids.length));
    deque.buffer.set(ids);
    deque.count = ids.length;
    return deque;
  }

  private grow(): void {
    this.resize(this.buffer.length * 2);
  }

  private resize(capacity: number): void {
    const next = new Float64Array(capacity);
    next.set(this.toFloat64Array());
    this.buffer = next;
    this.head = 0;
  }
}
