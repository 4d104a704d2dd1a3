import { test } from 'vitest';
import { expectCleanSeeds } from './seeds.js';

test('seeds 250-499 run clean', { timeout: 300_000 }, async () => {
  await expectCleanSeeds(250, 250);
});

// Seeds that once failed: with membership changes, a replica lagging behind a change refused
// the messages of a leader no configuration in its log named (liveness); the directory of
// members outside the log (the broker's metadata) now lets it hear them.
test('seeds 810 and 1043 run clean', { timeout: 60_000 }, async () => {
  for (const seed of [810, 1043]) await expectCleanSeeds(seed, 1);
});
