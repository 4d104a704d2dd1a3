/**
 * A queue's first snapshot leaves the apply path optimised. The snapshot encodes a copy of the
 * state (cloneState), and the copy used to be built as an object literal of the state's shape,
 * with nested records made by spreads, a ready level's deque given a `head` it already had, and
 * the message store's unwritten fields stored again: V8 then stopped treating those fields as
 * written once and threw away the optimised code of `apply`, `enqueue`, `createHeader`,
 * `admit`, the message store's `insert` and more, on every node, a few hundred milliseconds
 * into a run. Checked with V8's own %GetOptimizationStatus (see state-shape.ts).
 */
import { describe, expect, it } from 'vitest';
import { apply, createQueueState, encodeSnapshotLater, parseQueueArguments } from '../src/machine/index.js';
import { CLOCK, finalizeOptimization, isOptimised, optimizeOnNextCall, prepareForOptimization, publishes, run } from './state-shape.js';


describe("a queue's snapshot copy keeps the optimised apply path", () => {
  it('apply and the message store stay optimised through the first snapshot', () => {
    const state = createQueueState('q', parseQueueArguments({}), CLOCK);
    // Publishes only, as a run's first seconds: fields such as the store's free list are never written.
    run(state, publishes(0, 1000));
    const insert = state.messages.insert;
    prepareForOptimization(apply);
    prepareForOptimization(insert);
    run(state, publishes(1000, 2), 1001);
    optimizeOnNextCall(apply);
    optimizeOnNextCall(insert);
    run(state, publishes(1002, 2), 1003);
    finalizeOptimization();
    expect(isOptimised(apply)).toBe(true);
    expect(isOptimised(insert)).toBe(true);

    const encoding = encodeSnapshotLater(state);
    while (encoding.step(100_000) === null);

    expect(isOptimised(apply)).toBe(true);
    expect(isOptimised(insert)).toBe(true);
    run(state, publishes(1004, 2), 1005);
    expect(state.messages.size).toBe(1006);
  });
});
