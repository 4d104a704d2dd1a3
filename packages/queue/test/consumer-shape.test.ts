/**
 * A consumer built by a later subscribe does not undo the code optimised for the first one
 * (Consumer in state.ts): V8 widened the recorded type of an object literal's Map field on
 * the literal's second run, and threw away every function optimised since that relied on it.
 * Checked with V8's own %GetOptimizationStatus on a function that reads consumers the way
 * the delivery path does, and %HaveSameMap for consumers restored from snapshots.
 */
import { setFlagsFromString } from 'node:v8';
import { describe, expect, it } from 'vitest';
import { createQueueState, decodeSnapshot, encodeSnapshot, parseQueueArguments, restore, snapshot, type ConsumerState } from '../src/machine/index.js';
import { CLOCK, haveSameMap, run } from './state-shape.js';

setFlagsFromString('--allow-natives-syntax');
const prepare = new Function('f', '%PrepareFunctionForOptimization(f);') as (f: unknown) => void;
const optimizeNext = new Function('f', '%OptimizeFunctionOnNextCall(f);') as (f: unknown) => void;
const status = new Function('f', 'return %GetOptimizationStatus(f);') as (f: unknown) => number;
setFlagsFromString('--no-allow-natives-syntax');
/** V8's "optimised by TurboFan" bit of %GetOptimizationStatus. */
const TURBOFANNED = 1 << 6;

const enqueue = (sequence: number) => ({ type: 'enqueue' as const, sizeBytes: 1024, exchange: '', routingKeys: ['q'], producerId: 'p', sequence });

describe('consumers keep the code optimised for them', () => {
  it('through a second subscribe, and restored from snapshots', () => {
    const state = createQueueState('q', parseQueueArguments({}), CLOCK);
    run(state, [enqueue(0), enqueue(1), { type: 'subscribe', consumerId: 'c1', prefetch: 1 }]);
    const first = state.consumers.get('c1')!;
    // Reads a consumer's Map field and counters, as creditOf and deliverTo do.
    const credit = new Function('c', 'return c.prefetch - c.unacked.size + c.nextDeliveryTag;') as (c: ConsumerState) => number;
    prepare(credit);
    for (let i = 0; i < 100; i++) credit(first);
    optimizeNext(credit);
    credit(first);
    expect(status(credit) & TURBOFANNED).toBe(TURBOFANNED);

    run(state, [{ type: 'cancel', consumerId: 'c1' }, { type: 'subscribe', consumerId: 'c2', prefetch: 1 }], 4);
    const second = state.consumers.get('c2')!;
    expect(credit(second)).toBe(1 - 1 + 2);
    expect(status(credit) & TURBOFANNED).toBe(TURBOFANNED);

    expect(haveSameMap(first, second)).toBe(true);
    expect(haveSameMap(first, restore(snapshot(state)).consumers.get('c2')!)).toBe(true);
    expect(haveSameMap(first, decodeSnapshot(encodeSnapshot(state)).consumers.get('c2')!)).toBe(true);
  });
});
