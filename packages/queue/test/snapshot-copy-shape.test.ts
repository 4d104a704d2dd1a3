/**
 * A queue's first snapshot leaves the apply path optimised. The snapshot encodes a copy of the
 * state (cloneState), and the copy used to be built as an object literal of the state's shape,
 * with nested records made by spreads, a ready level's deque given a `head` it already had, and
 * the message store's unwritten fields stored again: V8 then stopped treating those fields as
 * written once and threw away the optimised code of `apply`, `enqueue`, `createHeader`,
 * `admit`, the message store's `insert` and more, on every node, a few hundred milliseconds
 * into a run. Checked with V8's own %GetOptimizationStatus (see state-shape.ts).
 */
import { setFlagsFromString } from 'node:v8';
import { describe, expect, it } from 'vitest';
import { apply, createQueueState, encodeSnapshotLater, parseQueueArguments, type Command } from '../src/machine/index.js';
import { CLOCK, run } from './state-shape.js';

setFlagsFromString('--allow-natives-syntax');
const prepare = new Function('f', '%PrepareFunctionForOptimization(f);') as (f: unknown) => void;
const optimizeNext = new Function('f', '%OptimizeFunctionOnNextCall(f);') as (f: unknown) => void;
const status = new Function('f', 'return %GetOptimizationStatus(f);') as (f: unknown) => number;
// Installs what V8's compiler threads finished (a function may also have tiered up on its own).
const finalize = new Function('%FinalizeOptimization();') as () => void;
setFlagsFromString('--no-allow-natives-syntax');
/** V8's "optimised by TurboFan" bit of %GetOptimizationStatus. */
const TURBOFANNED = 1 << 6;
const optimised = (f: unknown): boolean => (status(f) & TURBOFANNED) !== 0;

const enqueues = (from: number, n: number): Command[] => Array.from({ length: n }, (_, i) => ({ type: 'enqueue', sizeBytes: 1024, exchange: '', routingKeys: ['q'], producerId: 'p', sequence: from + i }));

describe("a queue's snapshot copy keeps the optimised apply path", () => {
  it('apply and the message store stay optimised through the first snapshot', () => {
    const state = createQueueState('q', parseQueueArguments({}), CLOCK);
    // Publishes only, as a run's first seconds: fields such as the store's free list are never written.
    run(state, enqueues(0, 1000));
    const insert = state.messages.insert;
    prepare(apply);
    prepare(insert);
    run(state, enqueues(1000, 2), 1001);
    optimizeNext(apply);
    optimizeNext(insert);
    run(state, enqueues(1002, 2), 1003);
    finalize();
    expect(optimised(apply)).toBe(true);
    expect(optimised(insert)).toBe(true);

    const encoding = encodeSnapshotLater(state);
    while (encoding.step(100_000) === null);

    expect(optimised(apply)).toBe(true);
    expect(optimised(insert)).toBe(true);
    run(state, enqueues(1004, 2), 1005);
    expect(state.messages.size).toBe(1006);
  });
});
