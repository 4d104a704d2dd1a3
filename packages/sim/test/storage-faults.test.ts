import { expect, test } from 'vitest';
import { runSeed } from '../src/index.js';

// Storage faults on a minority (one node per seed: bit flips in WAL records and snapshot
// files, truncated segments and snapshot files, lost snapshot files, on top of lost
// unsynced writes and torn tails): the damaged node repairs from its peers and every seed
// stays clean. (recoveringVotes in planted-bugs.test.ts shows the checkers see it when not.)
test('seeds with storage faults on one node stay clean', { timeout: 120_000 }, async () => {
  let faults = 0;
  const failed: string[] = [];
  for (let seed = 0; seed < 40; seed++) {
    const result = await runSeed({ seed });
    faults += result.faults.storageFaults;
    if (!result.ok) failed.push(`seed ${seed}: ${result.violation?.message ?? ''}`);
  }
  expect(failed).toEqual([]);
  expect(faults).toBeGreaterThan(5);
});
