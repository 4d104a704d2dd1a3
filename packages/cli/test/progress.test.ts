/** The admin verbs' progress display (progress.ts) and their waits (wait.ts). */
import { describe, expect, it } from 'vitest';

import { Progress, bar } from '../src/progress.js';
import { WaitTimeout, waitUntil } from '../src/wait.js';

function stream(isTTY: boolean): { isTTY: boolean; text: string; write(text: string): boolean } {
  return {
    isTTY,
    text: '',
    write(text: string) {
      this.text += text;
      return true;
    },
  };
}

describe('Progress', () => {
  it('draws a bar', () => {
    expect(bar(0, 4, 8)).toBe('[........]');
    expect(bar(2, 4, 8)).toBe('[####....]');
    expect(bar(5, 4, 8)).toBe('[########]');
    expect(bar(0, 0, 8)).toBe('[########]');
  });

  it('on a terminal, redraws one line in place and ends it on finish', () => {
    const out = stream(true);
    const progress = new Progress({ stream: out, width: 4 });
    progress.update(0, 2, 'moved 0 of 2 replicas');
    progress.update(0, 2, 'moved 0 of 2 replicas');
    progress.update(1, 2, 'moved 1 of 2 replicas');
    progress.finish();
    expect(out.text).toBe('\r[....] moved 0 of 2 replicas\x1b[K\r[##..] moved 1 of 2 replicas\x1b[K\n');
  });

  it('elsewhere, writes one line per change, no bar and no control characters', () => {
    const out = stream(false);
    const progress = new Progress({ stream: out });
    progress.update(0, 2, 'moved 0 of 2 replicas');
    progress.update(0, 2, 'moved 0 of 2 replicas');
    progress.update(1, 2, 'moved 1 of 2 replicas');
    progress.note('a note');
    progress.finish();
    expect(out.text).toBe('moved 0 of 2 replicas\nmoved 1 of 2 replicas\na note\n');
  });

  it('elsewhere, with minIntervalMs, holds back fast changes and writes the last one on finish', () => {
    const out = stream(false);
    let now = 0;
    const progress = new Progress({ stream: out, minIntervalMs: 1000, now: () => now });
    progress.update(1, 100, '1/100');
    now = 10;
    progress.update(2, 100, '2/100');
    now = 20;
    progress.update(3, 100, '3/100');
    now = 1500;
    progress.update(50, 100, '50/100');
    now = 1600;
    progress.update(100, 100, '100/100');
    progress.finish();
    expect(out.text).toBe('1/100\n50/100\n100/100\n');
  });
});

describe('waitUntil', () => {
  it('returns once the check answers true, retrying its failures', async () => {
    let calls = 0;
    await waitUntil('three calls', 5000, async () => {
      calls += 1;
      if (calls === 1) throw new Error('node restarting');
      return calls >= 3 ? true : 'not yet';
    }, 1);
    expect(calls).toBe(3);
  });

  it('times out with what it waited for, the last state and the last error', async () => {
    const never = waitUntil('n4 to vote', 100, async () => 'n4 is a learner', 10);
    await expect(never).rejects.toThrow(WaitTimeout);
    await expect(never).rejects.toThrow('timed out after 100 ms waiting for n4 to vote (n4 is a learner)');
    let first = true;
    const failing = waitUntil('n4 to vote', 100, async () => {
      if (first) {
        first = false;
        return 'n4 is a learner';
      }
      throw new Error('UNAVAILABLE');
    }, 10);
    await expect(failing).rejects.toThrow('(n4 is a learner; last error: UNAVAILABLE)');
  });

  it('gives up at the deadline even while a check hangs', async () => {
    const started = Date.now();
    await expect(waitUntil('a hung call', 100, () => new Promise<true>(() => undefined))).rejects.toThrow('timed out after 100 ms waiting for a hung call');
    expect(Date.now() - started).toBeLessThan(2000);
  });
});
