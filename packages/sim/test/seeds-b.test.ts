import { test } from 'vitest';
import { expectCleanSeeds } from './seeds.js';

test('seeds 250-499 run clean', async () => {
  await expectCleanSeeds(250, 250);
});
