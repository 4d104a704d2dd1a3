import { expect, test } from 'vitest';
import { runSeed } from '../src/index.js';

test('a seed replays exactly: same trace hash, same events, same outcome', { timeout: 60_000 }, async () => {
  for (const seed of [3, 17, 123]) {
    const first = await runSeed({ seed });
    const second = await runSeed({ seed });
    expect(second.traceHash).toBe(first.traceHash);
    expect(second.events).toBe(first.events);
    expect(second.faults).toEqual(first.faults);
    expect(second.acknowledged).toBe(first.acknowledged);
  }
});

test('different seeds take different paths', async () => {
  const a = await runSeed({ seed: 1 });
  const b = await runSeed({ seed: 2 });
  expect(a.traceHash).not.toBe(b.traceHash);
});

test('the trace of a seed is the same whether or not it is printed', async () => {
  const lines: string[] = [];
  const traced = await runSeed({ seed: 5, trace: (line) => lines.push(line) });
  const silent = await runSeed({ seed: 5 });
  expect(traced.traceHash).toBe(silent.traceHash);
  expect(lines.length).toBeGreaterThanOrEqual(traced.events);
});
