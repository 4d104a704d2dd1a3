import { expect, test } from 'vitest';
import { expectCleanSeeds } from './seeds.js';

// 500 seeds run in two files so that both cores work on them.
test('seeds 0-249 run clean, with faults actually injected', { timeout: 300_000 }, async () => {
  const results = await expectCleanSeeds(0, 250);
  const sum = (pick: (r: (typeof results)[number]) => number): number => results.reduce((s, r) => s + pick(r), 0);
  expect(sum((r) => r.faults.crashes)).toBeGreaterThan(100);
  expect(sum((r) => r.faults.partitions)).toBeGreaterThan(100);
  expect(sum((r) => r.faults.dropped)).toBeGreaterThan(1000);
  expect(sum((r) => r.faults.duplicated)).toBeGreaterThan(1000);
  expect(sum((r) => r.faults.tornWrites)).toBeGreaterThan(0);
  expect(sum((r) => r.faults.lostUnsyncedBytes)).toBeGreaterThan(0);
  expect(sum((r) => r.acknowledged)).toBeGreaterThan(10_000);
  expect(sum((r) => r.faults.transfers)).toBeGreaterThan(100);
  expect(sum((r) => r.faults.membershipChanges)).toBeGreaterThan(100);
  expect(sum((r) => r.readsServed)).toBeGreaterThan(5_000);
  expect(results.filter((r) => r.groupCount > 1).length).toBeGreaterThan(100);
  expect(results.filter((r) => r.nodeCount === 5).length).toBeGreaterThan(50);
  expect(results.filter((r) => r.nodeCount === 3).length).toBeGreaterThan(50);
});
