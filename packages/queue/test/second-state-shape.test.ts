/**
 * A second queue's state leaves the code optimised for the first. States were object literals
 * (createQueueState), and the second literal of the state's shape made V8 throw away the
 * optimised apply path of the queues already running (see QueueStateRecord in state.ts), and
 * it was not optimised again while more states were made. Checked with V8's own
 * %GetOptimizationStatus (see state-shape.ts).
 */
import { describe, expect, it } from 'vitest';
import { apply, createQueueState, parseQueueArguments } from '../src/machine/index.js';
import { CLOCK, finalizeOptimization, haveSameMap, isOptimised, optimizeOnNextCall, prepareForOptimization, publishes, run } from './state-shape.js';


describe('more queues keep the code optimised for the first', () => {
  it('apply stays optimised as further states are made', () => {
    const args = parseQueueArguments({});
    const state = createQueueState('q', args, CLOCK);
    run(state, publishes(0, 100));
    prepareForOptimization(apply);
    run(state, publishes(100, 2), 101);
    optimizeOnNextCall(apply);
    run(state, publishes(102, 2), 103);
    finalizeOptimization();
    expect(isOptimised(apply)).toBe(true);

    const others = ['q2', 'q3', 'q4'].map((name) => createQueueState(name, args, CLOCK));

    expect(isOptimised(apply)).toBe(true);
    for (const other of others) expect(haveSameMap(state, other)).toBe(true);
    run(state, publishes(104, 2), 105);
    expect(state.messages.size).toBe(106);
  });
});
