import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, test } from 'vitest';
import { RaftNode, createRandom } from '../src/index.js';
import { TestCluster } from './cluster.js';

const SOURCE_DIR = join(import.meta.dirname, '..', 'src');

/** Everything that would make the core depend on the world instead of its inputs. */
const FORBIDDEN: ReadonlyArray<[RegExp, string]> = [
  [/\bDate\b/, 'the clock (Date)'],
  [/\bperformance\s*\./, 'the clock (performance)'],
  [/\bprocess\s*\./, 'the process'],
  [/\bMath\.random\b/, 'unseeded randomness'],
  [/\bcrypto\b/, 'randomness (crypto)'],
  [/\bset(Timeout|Interval|Immediate)\b|\bqueueMicrotask\b/, 'timers'],
  [/\bawait\b|\basync\b|\bPromise\b/, 'asynchrony'],
  [/from\s+['"](node:|fs|path|os|net|http|child_process|worker_threads)/, 'Node modules'],
  [/\brequire\s*\(/, 'dynamic loading'],
];

describe('the Raft core is pure', () => {
  const files = readdirSync(SOURCE_DIR).filter((name) => name.endsWith('.ts'));

  test('its source has files to check', () => {
    expect(files).toContain('raft.ts');
    expect(files).toContain('log.ts');
  });

  for (const file of files) {
    test(`${file} uses no clock, timers, randomness, I/O or asynchrony`, () => {
      const source = readFileSync(join(SOURCE_DIR, file), 'utf8')
        .replace(/\/\*[\s\S]*?\*\//g, '')
        .replace(/\/\/.*$/gm, '');
      const found = FORBIDDEN.filter(([pattern]) => pattern.test(source)).map(([, what]) => what);
      expect(found, `${file} reaches for ${found.join(', ')}`).toEqual([]);
    });
  }

  test('the same seed and inputs give the same messages, byte for byte', () => {
    const run = (): string => {
      const cluster = new TestCluster(['a', 'b', 'c'], {}, 42);
      for (let i = 0; i < 60; i++) {
        cluster.tickAll();
        cluster.stabilize();
        const leader = cluster.leader();
        if (leader !== null && i % 3 === 0) cluster.propose(leader, `m${i}`);
      }
      return JSON.stringify(cluster.delivered, (_key, value: unknown) => (value instanceof Uint8Array ? [...value] : value));
    };
    const first = run();
    expect(first.length).toBeGreaterThan(1000);
    expect(run()).toBe(first);
  });

  test('different seeds give different election timing', () => {
    const timeouts = [1, 2, 3, 4, 5].map((seed) => {
      const node = new RaftNode(
        { id: 'a', random: createRandom(seed), initialConfig: { voters: ['a', 'b', 'c'], learners: [] } },
        { hardState: { term: 0, vote: null, commit: 0 }, snapshot: null, entries: [] },
      );
      let ticks = 0;
      while (node.currentRole === 'follower' && ticks < 100) {
        node.tick();
        ticks++;
      }
      return ticks;
    });
    expect(new Set(timeouts).size).toBeGreaterThan(1);
    for (const ticks of timeouts) {
      expect(ticks).toBeGreaterThanOrEqual(10);
      expect(ticks).toBeLessThan(20);
    }
  });
});
