import { test } from 'vitest';
import { expectCleanSeeds } from './seeds.js';

test('seeds 250-499 run clean', { timeout: 300_000 }, async () => {
  await expectCleanSeeds(250, 250);
});
