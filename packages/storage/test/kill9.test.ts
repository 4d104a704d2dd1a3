import { spawn } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LevelKvStore } from '../src/level-kv.js';
import { NodeStorage } from '../src/node-storage.js';
import { NodeWalFs } from '../src/node-wal-fs.js';
import { buildStorageForChild } from './build-for-child.js';
import { removeTempDirs, tempDir, textOf } from './helpers.js';

const writer = join(dirname(fileURLToPath(import.meta.url)), 'fixtures', 'kill9-writer.mjs');
const GROUPS = 8;
const ROUNDS = 5;
const RUN_BEFORE_KILL_MS_MIN = 150;
const RUN_BEFORE_KILL_MS_SPREAD = 400;
const CHILD_READY_TIMEOUT_MS = 20_000;

/** Same as payload() in kill9-writer.mjs. */
function payload(group: string, index: number): string {
  return `${group}:${index}:${'p'.repeat((index * 37) % 300)}`;
}

interface ChildRun {
  /** Per group: the highest index whose persist resolved. */
  acked: Map<string, number>;
  lines: number;
  stderr: string;
}

/** Runs the writer until `killAfterMs` after it is ready, then SIGKILLs it. */
function runAndKill(storageIndex: string, dataDir: string, term: number, killAfterMs: number): Promise<ChildRun> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [writer, storageIndex, dataDir, String(GROUPS), String(term)], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const acked = new Map<string, number>();
    let buffered = '';
    let stderr = '';
    let lines = 0;
    let killTimer: NodeJS.Timeout | undefined;
    const readyTimer = setTimeout(() => child.kill('SIGKILL'), CHILD_READY_TIMEOUT_MS);
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.stdout.on('data', (chunk: Buffer) => {
      buffered += chunk.toString();
      const complete = buffered.split('\n');
      buffered = complete.pop()!; // an incomplete last line proves nothing
      for (const line of complete) {
        if (line === 'ready') {
          clearTimeout(readyTimer);
          killTimer = setTimeout(() => child.kill('SIGKILL'), killAfterMs);
          continue;
        }
        const [group, index] = line.split(' ');
        acked.set(group!, Math.max(acked.get(group!) ?? 0, Number(index)));
        lines++;
      }
    });
    child.on('error', reject);
    child.on('exit', (code, signal) => {
      clearTimeout(readyTimer);
      clearTimeout(killTimer);
      if (signal !== 'SIGKILL') reject(new Error(`writer exited with ${code}/${signal}: ${stderr}`));
      else resolve({ acked, lines, stderr });
    });
  });
}

/** Deterministic pseudo-random delays, so a failure can be replayed. */
function delays(seed: number, count: number): number[] {
  const out: number[] = [];
  let x = seed;
  for (let i = 0; i < count; i++) {
    x = (x * 1103515245 + 12345) % 2 ** 31;
    out.push(RUN_BEFORE_KILL_MS_MIN + (x % RUN_BEFORE_KILL_MS_SPREAD));
  }
  return out;
}

const TEST_TIMEOUT_MS = 120_000;

describe('kill -9', { timeout: TEST_TIMEOUT_MS }, () => {
  let storageIndex: string;
  beforeAll(async () => {
    storageIndex = await buildStorageForChild();
  }, TEST_TIMEOUT_MS);
  afterAll(removeTempDirs);

  it('never loses an acknowledged entry and always recovers a contiguous prefix', async () => {
    const dataDir = await tempDir('kill9');
    const everAcked = new Map<string, number>();
    let totalAcks = 0;
    for (const [round, killAfterMs] of delays(20_240_601, ROUNDS).entries()) {
      const run = await runAndKill(storageIndex, dataDir, round + 1, killAfterMs);
      expect(run.lines, `round ${round}: the writer acknowledged nothing\n${run.stderr}`).toBeGreaterThan(0);
      totalAcks += run.lines;
      for (const [group, index] of run.acked) everAcked.set(group, Math.max(everAcked.get(group) ?? 0, index));
      const storage = await NodeStorage.open({
        dir: join(dataDir, 'wal'),
        fs: new NodeWalFs(),
        kv: await LevelKvStore.open(join(dataDir, 'kv')),
        logger: { warn: () => {} },
      });
      expect(storage.corruption).toBeNull();
      for (let g = 0; g < GROUPS; g++) {
        const group = `group-${g}`;
        const state = storage.restoreGroup(group);
        const snapshotIndex = state.snapshot?.meta.index ?? 0;
        if (state.snapshot !== null) expect(textOf(state.snapshot.data)).toBe(`${group}@${snapshotIndex}`);
        state.entries.forEach((entry, i) => {
          expect(entry.index, `${group}: contiguous after the snapshot`).toBe(snapshotIndex + 1 + i);
          expect(textOf(entry.data)).toBe(payload(group, entry.index));
        });
        const lastIndex = snapshotIndex + state.entries.length;
        expect(lastIndex, `${group}: acknowledged ${everAcked.get(group)}, recovered ${lastIndex}`).toBeGreaterThanOrEqual(
          everAcked.get(group) ?? 0,
        );
        expect(state.hardState.commit).toBeLessThanOrEqual(lastIndex);
        expect(state.hardState.commit).toBeGreaterThanOrEqual(everAcked.get(group) ?? 0);
      }
      await storage.close();
    }
    expect(totalAcks).toBeGreaterThan(ROUNDS * GROUPS);
  });
});
