/**
 * For the hidden-class tests (machine-state-shape*.test.ts): a queue's state keeps one hidden
 * class in V8 for its whole life. When a number field first holds a small integer and later a
 * leader time or a scaled log index, V8 moves the object to a new hidden class and discards the
 * optimised code of every function that had seen the old one: the broker's publish path was
 * compiled again at the start of each run after a consumer had come (`tickAt` went from -1 to a
 * time at the first subscribe). V8 generalises a field once per process, so each test file
 * checks one way a state is made. The comparison is V8's own (`%HaveSameMap`), allowed for the
 * one function compiled here.
 */
import { setFlagsFromString } from 'node:v8';
import { apply, type Command, type QueueState } from '../src/machine/index.js';

setFlagsFromString('--allow-natives-syntax');
export const haveSameMap = new Function('a', 'b', 'return %HaveSameMap(a, b);') as (a: object, b: object) => boolean;
/** V8's %PrepareFunctionForOptimization, %OptimizeFunctionOnNextCall and %GetOptimizationStatus. */
export const prepareForOptimization = new Function('f', '%PrepareFunctionForOptimization(f);') as (f: unknown) => void;
export const optimizeOnNextCall = new Function('f', '%OptimizeFunctionOnNextCall(f);') as (f: unknown) => void;
export const optimizationStatus = new Function('f', 'return %GetOptimizationStatus(f);') as (f: unknown) => number;
/** Installs what V8's compiler threads finished (a function may also have tiered up on its own). */
export const finalizeOptimization = new Function('%FinalizeOptimization();') as () => void;
setFlagsFromString('--no-allow-natives-syntax');
/** V8's "optimised by TurboFan" bit of %GetOptimizationStatus. */
export const TURBOFANNED = 1 << 6;
export const isOptimised = (f: unknown): boolean => (optimizationStatus(f) & TURBOFANNED) !== 0;

/** What the server passes: a leader clock in ms and indexes times its entry span (4096). */
export const CLOCK = 1_764_900_000_000;
const ENTRY_SPAN = 4096;

/** Applies `commands` as the entries from `from` on. */
export function run(state: QueueState, commands: readonly Command[], from = 1): void {
  commands.forEach((command, i) => {
    const index = from + i;
    apply({ index: index * ENTRY_SPAN, term: 3, now: CLOCK + index * 7 }, command, state);
  });
}

const enqueue = (producerId: string, sequence: number): Command => ({
  type: 'enqueue',
  sizeBytes: 1024,
  exchange: '',
  routingKeys: ['q'],
  producerId,
  sequence,
});

/** `n` publishes of 1 KiB from producer p, sequences from `from` on. */
export const publishes = (from: number, n: number): Command[] => Array.from({ length: n }, (_, i) => enqueue('p', from + i));

/** A run's commands: publishes, a consumer that acks and goes, ticks, a redeclare and a purge. */
export const LIFE: readonly Command[] = [
  enqueue('p1', 0),
  enqueue('p1', 1),
  { type: 'subscribe', consumerId: 'c1', prefetch: 256 },
  { type: 'ack', consumerId: 'c1', deliveryTag: 2, multiple: true },
  { type: 'tick' },
  { type: 'cancel', consumerId: 'c1' },
  { type: 'declare' },
  { type: 'purge' },
  enqueue('p2', 0),
  { type: 'subscribe', consumerId: 'c2', prefetch: 1 },
  { type: 'ack', consumerId: 'c2', deliveryTag: 1 },
  { type: 'get', ackMode: 'auto' },
  { type: 'tick' },
];

/** Applies LIFE from `from` on one command at a time, checking `state` against `untouched` after each; returns the largest `tickAt` seen. */
export function liveThrough(untouched: QueueState, state: QueueState, from: number, check: (same: boolean, after: string) => void): number {
  let tickedAt = -1;
  for (let i = from; i < LIFE.length; i++) {
    run(state, [LIFE[i]!], i + 1);
    tickedAt = Math.max(tickedAt, state.tickAt);
    check(haveSameMap(untouched, state), LIFE[i]!.type);
  }
  return tickedAt;
}
