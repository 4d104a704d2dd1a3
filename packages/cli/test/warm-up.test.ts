import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, expect, it } from 'vitest';

import { warmUp } from '../src/warm-up.js';

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

function dataDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'quorumq-warm-up-test-'));
  dirs.push(dir);
  return dir;
}

it('runs publishes and consumes through a cluster of three nodes in this process, then removes its directory (and what a killed one left)', async () => {
  const parent = dataDir();
  const dir = join(parent, 'warm-up');
  // What a node killed during its warm-up leaves behind.
  mkdirSync(join(dir, 'w1', 'wal'), { recursive: true });
  writeFileSync(join(dir, 'w1', 'wal', 'left-over'), 'x');
  const outcome = await warmUp({ dir, windowPublishes: 300, singlePublishes: 20 });
  expect(outcome).toMatchObject({ kind: 'warmed' });
  if (outcome.kind !== 'warmed') return;
  expect(outcome.ms).toBeGreaterThan(0);
  expect(outcome.cpuMs).toBeGreaterThan(0);
  expect(readdirSync(parent)).toEqual([]);
}, 60_000);

it('reports a warm-up it cannot run instead of throwing, and one that takes too long is abandoned and cleaned up', async () => {
  const blocked = join(dataDir(), 'a-file');
  writeFileSync(blocked, 'not a directory');
  const refused = await warmUp({ dir: join(blocked, 'warm-up') });
  expect(refused).toMatchObject({ kind: 'skipped' });
  expect(refused.kind === 'skipped' ? refused.reason : '').toMatch(/ENOTDIR/);

  const parent = dataDir();
  const slow = await warmUp({ dir: join(parent, 'warm-up'), timeoutMs: 1 });
  expect(slow).toMatchObject({ kind: 'skipped', reason: 'it took over 1 ms' });
  expect(readdirSync(parent)).toEqual([]);
}, 60_000);
