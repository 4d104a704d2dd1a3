/**
 * Progress of a long-running admin verb (`queues move`, the membership verbs), on stderr only:
 * stdout stays clean for `--json` and pipes. On a terminal one line is redrawn in place (a
 * bar, then the label); elsewhere (a pipe, a log file, CI) each change of the label is one
 * line of its own, so that the progress reads in order afterwards.
 */

/** What the progress writes to: process.stderr, or a test's stand-in. */
export interface ProgressStream {
  readonly isTTY?: boolean;
  write(text: string): unknown;
}

export interface ProgressOptions {
  /** Default: process.stderr. */
  readonly stream?: ProgressStream;
  /**
   * Off a terminal, at most one line per this many ms (the last state is printed by
   * `finish` all the same): for progress that changes very often, like a move's count.
   */
  readonly minIntervalMs?: number;
  /** The bar's width in characters. */
  readonly width?: number;
  /** The clock (tests). */
  readonly now?: () => number;
}

/** `[#######.......]`: `done` of `total` (a full bar when total is 0). */
export function bar(done: number, total: number, width = 30): string {
  const ratio = total <= 0 ? 1 : Math.min(1, Math.max(0, done / total));
  const filled = Math.round(ratio * width);
  return `[${'#'.repeat(filled)}${'.'.repeat(width - filled)}]`;
}

export class Progress {
  private readonly stream: ProgressStream;
  private readonly tty: boolean;
  private readonly minIntervalMs: number;
  private readonly width: number;
  private readonly now: () => number;
  /** The last line shown (terminal) or written (elsewhere). */
  private shown = '';
  /** Off a terminal: the latest line, when the interval held it back. */
  private pending: string | null = null;
  private lastWriteAt = -Infinity;
  /** On a terminal: a line is drawn and not yet ended. */
  private drawn = false;

  constructor(options: ProgressOptions = {}) {
    this.stream = options.stream ?? process.stderr;
    this.tty = this.stream.isTTY === true;
    this.minIntervalMs = options.minIntervalMs ?? 0;
    this.width = options.width ?? 30;
    this.now = options.now ?? Date.now;
  }

  /** Shows `done` of `total` with `label` (e.g. "moved 2 of 5 replicas"). */
  update(done: number, total: number, label: string): void {
    if (this.tty) {
      const line = `${bar(done, total, this.width)} ${label}`;
      if (line === this.shown) return;
      // \x1b[K clears what a longer previous line left on the right.
      this.stream.write(`\r${line}\x1b[K`);
      this.shown = line;
      this.drawn = true;
      return;
    }
    if (label === this.shown) {
      this.pending = null;
      return;
    }
    if (this.now() - this.lastWriteAt < this.minIntervalMs) {
      this.pending = label;
      return;
    }
    this.writeLine(label);
  }

  /** A message of its own (e.g. a warning), on its own line, not erased by the next update. */
  note(text: string): void {
    if (this.tty && this.drawn) {
      this.stream.write('\n');
      this.drawn = false;
      this.shown = '';
    }
    this.stream.write(`${text}\n`);
  }

  /** Ends the progress: the terminal line is kept; elsewhere a state held back is written. */
  finish(): void {
    if (this.tty) {
      if (this.drawn) this.stream.write('\n');
      this.drawn = false;
      return;
    }
    if (this.pending !== null) this.writeLine(this.pending);
  }

  private writeLine(label: string): void {
    this.stream.write(`${label}\n`);
    this.shown = label;
    this.pending = null;
    this.lastWriteAt = this.now();
  }
}
