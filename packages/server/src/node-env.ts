/**
 * What a node takes from its surroundings: the clock, timers, the end of the current turn,
 * fresh ids and seeds. The node's parts use nothing else for time or randomness, so the
 * simulator runs the same code on simulated time (packages/sim, `simEnv`) and replays a
 * failure from its seed; a real node runs on `systemEnv`.
 */
import { randomInt, randomUUID } from 'node:crypto';

export interface Timer {
  /** Stops the timer; a timer that already ran is unaffected. */
  cancel(): void;
}

export interface NodeEnv {
  /** Milliseconds since the epoch (a real node: Date.now()). */
  now(): number;
  /** Runs `run` once, `ms` from now. A timer never keeps the process alive by itself. */
  after(ms: number, run: () => void): Timer;
  /**
   * Runs `run` at the end of this turn, after the microtasks queued in it: the Ready loops
   * kicked within one turn start together, so their messages leave in one batch per peer.
   */
  endOfTurn(run: () => void): void;
  /**
   * Runs `run` soon: on a real node, after the microtasks queued so far in this callback when
   * it is the first such batch of this event-loop turn, else at the end of the turn (as
   * `endOfTurn`). Node's HTTP/2 sends what was written in a turn at the start of its check
   * phase, before the callbacks of setImmediate: what a Ready loop started by `endOfTurn`
   * writes leaves a whole turn later. The first batch goes at once (one operation in flight:
   * each hop is a turn sooner), the others of a busy turn still share one Ready.
   */
  soon(run: () => void): void;
  /** A fresh id, unique across the cluster (consumers, moves). */
  uniqueId(): string;
  /** A seed for a Raft group's randomized election timeouts. */
  seed(): number;
}

let endOfTurn: Array<() => void> = [];

function runEndOfTurn(): void {
  const runs = endOfTurn;
  endOfTurn = [];
  for (const run of runs) run();
}

let soonRuns: Array<() => void> = [];
/** Whether a batch of `soon` ran or is queued in this turn (cleared by an immediate). */
let soonThisTurn = false;

function runSoon(): void {
  const runs = soonRuns;
  soonRuns = [];
  for (const run of runs) run();
}

function turnOver(): void {
  soonThisTurn = false;
}

/** A real node's surroundings: the system clock, Node's timers, crypto randomness. */
export const systemEnv: NodeEnv = {
  now: () => Date.now(),
  after(ms, run) {
    const timer = setTimeout(run, Math.max(0, Math.min(ms, 2 ** 31 - 1)));
    timer.unref();
    return { cancel: () => clearTimeout(timer) };
  },
  endOfTurn(run) {
    // One immediate for everything this turn asked for.
    if (endOfTurn.length === 0) setImmediate(runEndOfTurn);
    endOfTurn.push(run);
  },
  soon(run) {
    if (soonRuns.length > 0) {
      soonRuns.push(run);
    } else if (soonThisTurn) {
      systemEnv.endOfTurn(run);
    } else {
      soonThisTurn = true;
      setImmediate(turnOver);
      soonRuns.push(run);
      queueMicrotask(runSoon);
    }
  },
  uniqueId: () => randomUUID(),
  seed: () => randomInt(0x7fffffff),
};

/** Resolves `ms` from now on the env's clock. */
export function sleep(env: NodeEnv, ms: number): Promise<void> {
  return new Promise((resolve) => env.after(ms, resolve));
}

/** Runs `run` every `ms` on the env's clock until the returned timer is cancelled. */
export function every(env: NodeEnv, ms: number, run: () => void): Timer {
  let current: Timer | null = null;
  let stopped = false;
  const schedule = (): void => {
    current = env.after(ms, () => {
      if (stopped) return;
      run();
      if (!stopped) schedule();
    });
  };
  schedule();
  return {
    cancel: () => {
      stopped = true;
      current?.cancel();
    },
  };
}
