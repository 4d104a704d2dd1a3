/** A queue state restored from a snapshot keeps its hidden class (see state-shape.ts). */
import { describe, expect, it } from 'vitest';
import { createQueueState, decodeSnapshot, encodeSnapshot, parseQueueArguments, restore, snapshot } from '../src/machine/index.js';
import { CLOCK, LIFE, haveSameMap, liveThrough, run } from './state-shape.js';

describe('a restored queue state keeps its hidden class', () => {
  it('restored from a snapshot taken before any consumer, plain or binary', () => {
    const source = createQueueState('q', parseQueueArguments({}), CLOCK);
    run(source, LIFE.slice(0, 2));
    expect(source.tickAt).toBe(-1);
    const plain = restore(snapshot(source));
    const binary = decodeSnapshot(encodeSnapshot(source));
    expect(haveSameMap(plain, binary)).toBe(true);
    const tickedAt = liveThrough(restore(snapshot(source)), plain, 2, (same, after) => expect(same, `after ${after}`).toBe(true));
    expect(tickedAt).toBeGreaterThan(CLOCK);
    expect(haveSameMap(binary, plain)).toBe(true);
  });
});
