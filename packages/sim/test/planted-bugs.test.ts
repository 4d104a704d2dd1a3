import { describe, expect, test } from 'vitest';
import { runSeed } from '../src/index.js';
import type { SimBug, SimResult } from '../src/index.js';

const SEEDS_MAX = 1000;

/** The first seed whose run fails one of `properties` (a bug may also break liveness first). */
async function firstCaught(bug: SimBug, properties: readonly string[]): Promise<SimResult | null> {
  for (let seed = 0; seed < SEEDS_MAX; seed++) {
    const result = await runSeed({ seed, bugs: new Set([bug]) });
    if (result.violation !== null && properties.includes(result.violation.property)) return result;
  }
  return null;
}

// Proof that the checkers can fail: each planted bug must be caught within 1,000 seeds,
// by a safety check rather than by the cluster merely getting stuck (but for the one
// liveness bug, which only the quiet failover after the heal can show).
describe('planted bugs are caught', { timeout: 300_000 }, () => {
  const cases: Array<[SimBug, readonly string[]]> = [
    ['commitPreviousTermByCount', ['LeaderCompleteness', 'StateMachineSafety', 'AcknowledgedNotLost', 'LogMatching']],
    ['voteWithoutLogCheck', ['LeaderCompleteness', 'StateMachineSafety', 'AcknowledgedNotLost', 'LogMatching']],
    ['ackBeforeFsync', ['LeaderCompleteness', 'StateMachineSafety', 'AcknowledgedNotLost', 'LogMatching']],
    ['readIndexWithoutQuorum', ['LinearizableRead']],
    // Storage also refuses a vote that changes within a term; either defence counts.
    ['forgetVoteOnRestart', ['ElectionSafety', 'LeaderCompleteness', 'StateMachineSafety', 'Invariant']],
    // A replica repaired after storage damage (one node's files are damaged while it is down)
    // votes as if intact: it helps elect a leader missing entries it had acknowledged.
    ['recoveringVotes', ['LeaderCompleteness', 'StateMachineSafety', 'AcknowledgedNotLost', 'LogMatching', 'ElectionSafety']],
    // A liveness bug: quiet followers never learn that their leader's node died.
    ['ignorePeerSilence', ['Liveness']],
  ];
  for (const [bug, properties] of cases) {
    test(bug, async () => {
      const failure = await firstCaught(bug, properties);
      expect(failure, `${bug} was not caught by ${properties.join('/')} within ${SEEDS_MAX} seeds`).not.toBeNull();
      // The failing seed replays to the same failure.
      const replay = await runSeed({ seed: failure!.seed, bugs: new Set([bug]) });
      expect(replay.violation).toEqual(failure!.violation);
      expect(replay.traceHash).toBe(failure!.traceHash);
    });
  }
});
