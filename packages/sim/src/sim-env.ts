import type { Random } from '@quorumq/raft';
import type { NodeEnv, Timer } from '@quorumq/server/core';

import type { Scheduler } from './scheduler.js';

/**
 * A simulated node's surroundings: simulated time, timers that are simulator events, and ids
 * and seeds from the run's seed. A node that crashed (`alive` false) runs none of its timers.
 */
export function simEnv(scheduler: Scheduler, label: string, random: Random, alive: () => boolean): NodeEnv {
  let turn: Array<() => void> = [];
  let ids = 0;
  const incarnation = random.nextInt(0x7fffffff).toString(36);
  const endOfTurn = (run: () => void): void => {
    // One event per node and turn, as one immediate per turn on a real node.
    if (turn.length === 0) {
      scheduler.after(0, `turn ${label}`, () => {
        const runs = turn;
        turn = [];
        if (alive()) for (const r of runs) r();
      });
    }
    turn.push(run);
  };
  return {
    now: () => scheduler.now,
    after(ms: number, run: () => void): Timer {
      let cancelled = false;
      scheduler.after(Math.max(0, Math.ceil(ms)), `timer ${label}`, () => {
        if (!cancelled && alive()) run();
      });
      return { cancel: () => (cancelled = true) };
    },
    endOfTurn,
    // A turn here is one simulator event: what `soon` runs on a real node in the turn or at its end.
    soon: endOfTurn,
    uniqueId: () => `${incarnation}-${++ids}`,
    seed: () => random.nextInt(0x7fffffff),
  };
}
