/**
 * Paces the publishes of one PublishStream. A batch may hold up to `maxPublishesPerBatch`
 * publishes, and handling them all in the turn that decoded them held the event loop for
 * seconds: Raft missed its heartbeats, a new leader was elected and overwrote the entries,
 * and all but the first few thousand publishes of a 100,000 batch timed out. Instead, at most
 * `perTurn` publishes start in one event-loop turn (they still share one Raft entry per queue,
 * see EntryBatcher), at most `window` are in flight at once, and the stream stops reading
 * (`onBacklog(true)`) while `window` or more wait, so a client cannot queue without bound.
 * Publishes start in the order they arrived.
 */
export interface PublishWindowOptions {
  /** Publishes started in one event-loop turn at most. */
  readonly perTurn: number;
  /** Publishes started and not yet settled at most. */
  readonly window: number;
  /** Called with true when the stream should stop reading, false when it may read again. */
  readonly onBacklog: (backlogged: boolean) => void;
}

/** Publishes started in one event-loop turn at most. */
export const PUBLISHES_PER_TURN = 1024;
/** Publishes of one stream in flight at most (one Raft entry's worth). */
export const PUBLISH_WINDOW = 4096;

export class PublishWindow<T> {
  private waiting: T[] = [];
  private head = 0;
  private running = 0;
  private scheduled = false;
  private backlogged = false;
  private readonly pumpNow = (): void => {
    this.scheduled = false;
    this.pump();
  };

  /** `run` starts one item; its promise settles when the item is done (it must not reject). */
  constructor(
    private readonly run: (item: T) => Promise<void>,
    private readonly options: PublishWindowOptions,
  ) {}

  /** Items waiting or running. */
  get size(): number {
    return this.waiting.length - this.head + this.running;
  }

  /** Queues items; as many as the pacing allows start now, in this turn. */
  push(items: readonly T[]): void {
    for (const item of items) this.waiting.push(item);
    this.pump();
  }

  private pump(): void {
    let started = 0;
    while (this.head < this.waiting.length && started < this.options.perTurn && this.running < this.options.window) {
      const item = this.waiting[this.head++] as T;
      started += 1;
      this.running += 1;
      void this.run(item).then(() => {
        this.running -= 1;
        this.schedule();
      });
    }
    if (this.head === this.waiting.length) {
      this.waiting = [];
      this.head = 0;
    } else if (this.running < this.options.window) {
      this.schedule();
    }
    const backlogged = this.waiting.length - this.head >= this.options.window;
    if (backlogged !== this.backlogged) {
      this.backlogged = backlogged;
      this.options.onBacklog(backlogged);
    }
  }

  /** Starts more in a later turn (never in the turn that settled or queued the last ones). */
  private schedule(): void {
    if (this.scheduled || this.head === this.waiting.length) return;
    this.scheduled = true;
    setImmediate(this.pumpNow);
  }
}
