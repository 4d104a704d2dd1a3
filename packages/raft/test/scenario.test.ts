/**
 * Runs every scenario script in testdata/ (see scenario.ts). With REWRITE=1 the expected
 * outputs are regenerated instead of checked; review the diff before accepting it.
 */
import { readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, test } from 'vitest';
import { formatScenario, parseScenario, runScenario } from './scenario.js';

const dir = join(fileURLToPath(new URL('.', import.meta.url)), 'testdata');
const files = readdirSync(dir).filter((f) => f.endsWith('.txt')).sort();
const rewrite = process.env['REWRITE'] === '1';

describe('scenario scripts', () => {
  test('there are scripts to run', () => {
    expect(files.length).toBeGreaterThanOrEqual(9);
  });

  for (const file of files) {
    test(file, () => {
      const path = join(dir, file);
      const text = readFileSync(path, 'utf8');
      const cases = parseScenario(text);
      const outputs = runScenario(cases);
      if (rewrite) {
        writeFileSync(path, formatScenario(cases, outputs));
        return;
      }
      cases.forEach((c, i) => {
        expect(outputs[i]!.join('\n'), `${file}:${c.line}: ${c.command}`).toBe(c.expected.join('\n'));
      });
      // A script whose file would change on rewrite (e.g. formatting) is not accepted either.
      expect(formatScenario(cases, outputs)).toBe(text);
    });
  }
});
