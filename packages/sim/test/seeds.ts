import { expect } from 'vitest';
import { runSeed } from '../src/index.js';
import type { SimResult } from '../src/index.js';

/** Runs seeds [from, from + count) and expects every one of them to be clean. */
export async function expectCleanSeeds(from: number, count: number): Promise<SimResult[]> {
  const results: SimResult[] = [];
  const failures: string[] = [];
  for (let seed = from; seed < from + count; seed++) {
    const result = await runSeed({ seed });
    results.push(result);
    if (!result.ok) failures.push(`seed ${seed}: ${result.violation?.message ?? 'unknown'}`);
  }
  expect(failures).toEqual([]);
  return results;
}
