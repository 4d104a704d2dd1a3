/** The topology runs as a replicated state machine: it must depend on its inputs only. */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, test } from 'vitest';

const SOURCE_DIR = join(import.meta.dirname, '..', 'src', 'topology');

/** Everything that would make the topology depend on the world instead of its commands. */
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
  [/\bas any\b/, 'unchecked casts'],
];

describe('the topology is pure', () => {
  const files = readdirSync(SOURCE_DIR).filter((name) => name.endsWith('.ts'));

  test('its source has files to check', () => {
    expect(files).toEqual(expect.arrayContaining(['topology.ts', 'route.ts', 'topic-trie.ts']));
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
});
