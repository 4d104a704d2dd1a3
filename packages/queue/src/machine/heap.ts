import { assert } from './errors.js';

/**
 * A binary min-heap of (deadline, message id) pairs stored flat in one array. Entries
 * are removed lazily: the caller checks on pop that the message still has that deadline,
 * which keeps removal from the middle of the queue O(1).
 */
export class DeadlineHeap {
  constructor(private readonly pairs: number[] = []) {
    assert(pairs.length % 2 === 0, 'deadline heap holds pairs');
  }

  get size(): number {
    return this.pairs.length / 2;
  }

  /** The earliest deadline, or undefined when empty. */
  peekDeadline(): number | undefined {
    return this.pairs[0];
  }

  push(deadline: number, id: number): void {
    this.pairs.push(deadline, id);
    let child = this.size - 1;
    while (child > 0) {
      const parent = (child - 1) >> 1;
      if (this.deadlineAt(parent) <= deadline) break;
      this.swap(parent, child);
      child = parent;
    }
  }

  /** Removes the earliest entry and returns its message id. */
  pop(): number | undefined {
    if (this.size === 0) return undefined;
    const id = this.pairs[1];
    const lastId = this.pairs.pop();
    const lastDeadline = this.pairs.pop();
    assert(lastId !== undefined && lastDeadline !== undefined, 'deadline heap underflow');
    if (this.size > 0) {
      this.pairs[0] = lastDeadline;
      this.pairs[1] = lastId;
      this.siftDown();
    }
    return id;
  }

  clear(): void {
    this.pairs.length = 0;
  }

  toArray(): number[] {
    return [...this.pairs];
  }

  private siftDown(): void {
    let parent = 0;
    for (;;) {
      const left = parent * 2 + 1;
      const right = left + 1;
      let smallest = parent;
      if (left < this.size && this.deadlineAt(left) < this.deadlineAt(smallest)) smallest = left;
      if (right < this.size && this.deadlineAt(right) < this.deadlineAt(smallest)) smallest = right;
      if (smallest === parent) return;
      this.swap(parent, smallest);
      parent = smallest;
    }
  }

  private deadlineAt(slot: number): number {
    const deadline = this.pairs[slot * 2];
    assert(deadline !== undefined, 'deadline heap slot out of range');
    return deadline;
  }

  private swap(a: number, b: number): void {
    const p = this.pairs;
    const deadlineA = this.deadlineAt(a);
    const idA = p[a * 2 + 1];
    const idB = p[b * 2 + 1];
    assert(idA !== undefined && idB !== undefined, 'deadline heap slot out of range');
    p[a * 2] = this.deadlineAt(b);
    p[a * 2 + 1] = idB;
    p[b * 2] = deadlineA;
    p[b * 2 + 1] = idA;
  }
}
