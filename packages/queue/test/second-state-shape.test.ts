/**
 * A second queue's state leaves the code optimised for the first. States were object literals
 * (createQueueState), and the second literal of the state's shape made V8 throw away the
 * optimised apply path of the queues already running (see QueueStateRecord in state.ts), and
 * it was not optimised again while more states were made. Checked with V8's own
 * %GetOptimizationStatus (see state-shape.ts).
 */
import { setFlagsFromString } from 'node:v8';
import { describe, expect, it } from 'vitest';
import { apply, createQueueState, parseQueueArguments, type Command } from '../src/machine/index.js';
import { CLOCK, haveSameMap, run } from './state-shape.js';

setFlagsFromString('--allow-natives-syntax');
const prepare = new Function('f', '%PrepareFunctionForOptimization(f);') as (f: unknown) => void;
const optimizeNext = new Function('f', '%OptimizeFunctionOnNextCall(f);') as (f: unknown) => void;
const status = new Function('f', 'return %GetOptimizationStatus(f);') as (f: unknown) => number;
// Installs what V8's compiler threads finished (a function may also have tiered up on its own).
const finalize = new Function('%FinalizeOptimization();') as () => void;
setFlagsFromString('--no-allow-natives-syntax');
/** V8's "optimised by TurboFan" bit of %GetOptimizationStatus. */
const TURBOFANNED = 1 << 6;

const enqueues = (from: number, n: number): Command[] => Array.from({ length: n }, (_, i) => ({ type: 'enqueue', sizeBytes: 1024, exchange: '', routingKeys: ['q'], producerId: 'p', sequence: from + i }));

describe('more queues keep the code optimised for the first', () => {
  it('apply stays optimised as further states are made', () => {
    const args = parseQueueArguments({});
    const state = createQueueState('q', args, CLOCK);
    run(state, enqueues(0, 100));
    prepare(apply);
    run(state, enqueues(100, 2), 101);
    optimizeNext(apply);
    run(state, enqueues(102, 2), 103);
    finalize();
    expect(status(apply) & TURBOFANNED).toBe(TURBOFANNED);

    const others = ['q2', 'q3', 'q4'].map((name) => createQueueState(name, args, CLOCK));

    expect(status(apply) & TURBOFANNED).toBe(TURBOFANNED);
    for (const other of others) expect(haveSameMap(state, other)).toBe(true);
    run(state, enqueues(104, 2), 105);
    expect(state.messages.size).toBe(106);
  });
});
