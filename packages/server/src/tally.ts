/**
 * Metric updates made once per operation, kept as plain numbers and handed to prom-client when
 * the metric is read: each metric that uses one takes it in its `collect`, which prom-client
 * runs before every read of the metric (a scrape, `get()`), so what a scrape shows is exact.
 *
 * Why: at one operation in flight the leader's profile had prom-client's `inc` and `observe`
 * at about 8 µs per publish (label hashing, bucket search and its objects, each run cold
 * between the other processes' turns); a field addition costs nearly nothing. Observations
 * are buffered and handed over in a loop, where the code stays warm.
 */

/** A count added to on the hot path, handed to a counter at its `collect`. */
export class Tally {
  private pending = 0;

  add(n: number): void {
    this.pending += n;
  }

  /** What was added since the last take (for `counter.inc`). */
  take(): number {
    const n = this.pending;
    this.pending = 0;
    return n;
  }
}

/** Observations buffered before they reach a histogram (at its `collect`, or when this many are held). */
export const OBSERVATIONS_HELD = 256;

/** A histogram's observations on the hot path, handed over in batches. */
export class Observations {
  private readonly values = new Float64Array(OBSERVATIONS_HELD);
  private count = 0;

  constructor(private readonly observe: (value: number) => void) {}

  add(value: number): void {
    this.values[this.count++] = value;
    if (this.count === OBSERVATIONS_HELD) this.flush();
  }

  /** Hands every held observation to the histogram. */
  flush(): void {
    const n = this.count;
    this.count = 0;
    for (let i = 0; i < n; i++) this.observe(this.values[i]!);
  }
}
