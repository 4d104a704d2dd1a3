/** A queue state made by createQueueState keeps its hidden class (see state-shape.ts). */
import { describe, expect, it } from 'vitest';
import { createQueueState, parseQueueArguments } from '../src/machine/index.js';
import { CLOCK, liveThrough } from './state-shape.js';

describe('a queue state keeps its hidden class', () => {
  it('from creation through publishes, consumers, ticks, a redeclare and a purge', () => {
    const args = parseQueueArguments({});
    const untouched = createQueueState('q', args, CLOCK);
    const state = createQueueState('q', args, CLOCK);
    const tickedAt = liveThrough(untouched, state, 0, (same, after) => expect(same, `after ${after}`).toBe(true));
    // The consumer's timeout asked for a tick at a leader time: the change that used to move the state.
    expect(tickedAt).toBeGreaterThan(CLOCK);
  });
});
