/**
 * The simulator's clock and event queue. Events run in (time, sequence) order, so two
 * runs of the same seed execute the same events in the same order.
 */
export interface SimEvent {
  readonly time: number;
  readonly seq: number;
  readonly label: string;
  readonly run: () => void;
}

export class Scheduler {
  private heap: SimEvent[] = [];
  private nextSeq = 0;
  /** Simulated milliseconds since the start of the run. */
  now = 0;

  at(time: number, label: string, run: () => void): void {
    if (time < this.now) throw new RangeError(`event ${label} scheduled in the past (${time} < ${this.now})`);
    this.push({ time, seq: this.nextSeq++, label, run });
  }

  after(delayMs: number, label: string, run: () => void): void {
    this.at(this.now + delayMs, label, run);
  }

  /** Removes and returns the next event, advancing the clock to it. */
  pop(): SimEvent | undefined {
    const top = this.heap[0];
    if (top === undefined) return undefined;
    const last = this.heap.pop();
    if (last !== undefined && this.heap.length > 0) {
      this.heap[0] = last;
      this.siftDown(0);
    }
    this.now = top.time;
    return top;
  }

  peekTime(): number | undefined {
    return this.heap[0]?.time;
  }

  size(): number {
    return this.heap.length;
  }

  private push(event: SimEvent): void {
    this.heap.push(event);
    let i = this.heap.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!before(this.heap[i]!, this.heap[parent]!)) break;
      [this.heap[i], this.heap[parent]] = [this.heap[parent]!, this.heap[i]!];
      i = parent;
    }
  }

  private siftDown(start: number): void {
    let i = start;
    for (;;) {
      const left = 2 * i + 1;
      const right = left + 1;
      let smallest = i;
      if (left < this.heap.length && before(this.heap[left]!, this.heap[smallest]!)) smallest = left;
      if (right < this.heap.length && before(this.heap[right]!, this.heap[smallest]!)) smallest = right;
      if (smallest === i) return;
      [this.heap[i], this.heap[smallest]] = [this.heap[smallest]!, this.heap[i]!];
      i = smallest;
    }
  }
}

function before(a: SimEvent, b: SimEvent): boolean {
  return a.time < b.time || (a.time === b.time && a.seq < b.seq);
}
