import { describe, expect, it } from 'vitest';

import { PublishWindow } from '../src/publish-window.js';

const nextTurn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

describe('the publish window', () => {
  it('starts at most perTurn items a turn and window in flight, in order, and asks to stop reading while window wait', async () => {
    const started: number[] = [];
    const finish: Array<() => void> = [];
    const backlog: boolean[] = [];
    const window = new PublishWindow<number>(
      (item) => {
        started.push(item);
        return new Promise<void>((resolve) => finish.push(resolve));
      },
      { perTurn: 3, window: 5, onBacklog: (b) => backlog.push(b) },
    );
    window.push(Array.from({ length: 12 }, (_, i) => i));
    // This turn: perTurn of them; 9 wait, more than the window: stop reading.
    expect(started).toEqual([0, 1, 2]);
    expect(backlog).toEqual([true]);
    expect(window.size).toBe(12);
    await nextTurn();
    // The next turn: up to the window.
    expect(started).toEqual([0, 1, 2, 3, 4]);
    await nextTurn();
    expect(started).toHaveLength(5);
    // Two settle: two more start, in a later turn; 5 still wait, the window's worth.
    finish.splice(0, 2).forEach((f) => f());
    await nextTurn();
    await nextTurn();
    expect(started).toEqual([0, 1, 2, 3, 4, 5, 6]);
    expect(backlog).toEqual([true]);
    // All settle as they start: the rest go, and reading resumes.
    while (started.length < 12 || finish.length > 0) {
      finish.splice(0).forEach((f) => f());
      await nextTurn();
    }
    await nextTurn();
    expect(started).toEqual(Array.from({ length: 12 }, (_, i) => i));
    expect(backlog).toEqual([true, false]);
    expect(window.size).toBe(0);
  });

  it('a small batch starts whole in the turn it arrived', () => {
    const started: number[] = [];
    const window = new PublishWindow<number>(
      async (item) => {
        started.push(item);
      },
      { perTurn: 1024, window: 4096, onBacklog: () => expect.fail('no backlog') },
    );
    window.push([1, 2, 3]);
    expect(started).toEqual([1, 2, 3]);
  });
});
