import { describe, expect, test } from 'vitest';
import { Progress } from '../src/progress.js';

describe('Progress.maybeDecrTo', () => {
  test('in probe state, the answer to the last probe moves next back towards the hint', () => {
    const progress = new Progress(11, 4);
    progress.sentAppend(10, 0);
    expect(progress.isPaused()).toBe(true);
    expect(progress.maybeDecrTo(10, 4)).toBe(true);
    expect(progress.next).toBe(5);
    expect(progress.isPaused()).toBe(false);
    // A duplicate of the same rejection is stale now.
    expect(progress.maybeDecrTo(10, 4)).toBe(false);
    expect(progress.next).toBe(5);
  });

  test('a rejection at or below the match index never triggers another probe of the same index', () => {
    // Only a follower that lost entries it acknowledged can send it; answering it with the
    // same probe again would ping-pong forever (and multiply with duplicated messages).
    const progress = new Progress(1, 4);
    expect(progress.maybeUpdate(41)).toBe(true);
    progress.becomeProbe();
    expect(progress.next).toBe(42);
    progress.sentAppend(41, 0);
    expect(progress.maybeDecrTo(41, 0)).toBe(false);
    expect(progress.next).toBe(42);
    progress.becomeReplicate();
    expect(progress.maybeDecrTo(41, 0)).toBe(false);
    expect(progress.maybeDecrTo(40, 0)).toBe(false);
  });
});
