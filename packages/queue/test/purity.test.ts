/**
 * The pure cores: the queue machine and the topology (this package) and the Raft core
 * (packages/raft/src) run as replicated state machines, so they may depend on their inputs
 * only. Their source is checked with the TypeScript compiler (see purity-scan.ts): no clock,
 * randomness, timers, process, I/O, asynchrony or imports from outside their own package.
 */
import { join, resolve } from 'node:path';
import { describe, expect, test } from 'vitest';
import { scanPurity, sourceFiles } from './purity-scan.js';

const PACKAGES = resolve(import.meta.dirname, '..', '..');

const CORES = [
  { name: 'the queue machine and the topology', root: join(PACKAGES, 'queue', 'src'), expected: ['machine/machine.ts', 'machine/tick.ts', 'topology/route.ts'] },
  { name: 'the Raft core', root: join(PACKAGES, 'raft', 'src'), expected: ['raft.ts', 'log.ts', 'random.ts'] },
];

describe('the pure cores use no clock, randomness, timers, process, I/O, asynchrony or outside imports', () => {
  for (const core of CORES) {
    test(`${core.name} (${core.root.slice(PACKAGES.length + 1)})`, () => {
      const files = sourceFiles(core.root);
      expect(files.map((f) => f.slice(core.root.length + 1))).toEqual(expect.arrayContaining(core.expected));
      expect(scanPurity(core.root, files)).toEqual([]);
    });
  }
});

describe('the purity check itself', () => {
  const root = join(PACKAGES, 'queue', 'src', '__purity_fixture__');
  const scan = (text: string, extra: Record<string, string> = {}) => {
    const contents = new Map([[join(root, 'a.ts'), text], ...Object.entries(extra).map(([name, body]) => [join(root, name), body] as [string, string])]);
    return scanPurity(root, [join(root, 'a.ts')], contents).map((v) => `${v.line}: ${v.what}`);
  };

  test('finds the clock, randomness, timers, the process and I/O', () => {
    const found = scan(
      [
        'export const a = Date.now();',
        'export const b = new Date();',
        'export const c = Math.random();',
        'export const d = performance.now();',
        'setTimeout(() => {}, 1);',
        'queueMicrotask(() => {});',
        'export const e = process.env;',
        'console.log(a);',
        "export const f = crypto.getRandomValues(new Uint8Array(1));",
        "export const g = Math['random']();",
        'export const h = globalThis.Date;',
      ].join('\n'),
    );
    expect(found).toEqual([
      '1: the clock (Date.now)',
      '2: the clock (new Date())',
      '3: randomness (Math.random)',
      '4: the clock (performance)',
      '5: timers (setTimeout)',
      '6: timers (queueMicrotask)',
      '7: the process',
      '8: I/O (console)',
      '9: randomness (crypto)',
      '10: randomness (Math.random)',
      '11: the global object (globalThis)',
    ]);
  });

  test('finds asynchrony, casts to any and imports from outside the package', () => {
    const found = scan(
      [
        "import { readFileSync } from 'node:fs';",
        "import type { Entry } from '@quorumq/raft';",
        "export { x } from '../../elsewhere.js';",
        "import { y } from './b.js';",
        'export async function f(): Promise<void> { await null; }',
        'export const z = (y as any) + (readFileSync as unknown as number);',
        "export const w = import('./b.js');",
        'export type E = Entry;',
      ].join('\n'),
      { 'b.ts': 'export const y = 1;' },
    );
    expect(found).toEqual([
      '1: an import of "node:fs" (only the package\'s own relative files)',
      '2: a type-only import of "@quorumq/raft" (only the package\'s own relative files)',
      '3: an import of "../../elsewhere.js" (only the package\'s own relative files)',
      '5: asynchrony (async)',
      '5: asynchrony (Promise)',
      '5: asynchrony (await)',
      '6: an unchecked cast (as any)',
      '7: loading code (import())',
    ]);
  });

  test('is not fooled by comments, strings, members, its own names or dates from an input', () => {
    const found = scan(
      [
        '// Date.now() and Math.random() in a comment',
        '/* setTimeout(f, 1); process.exit(1) */',
        "export const text = 'Date.now() new Date() performance.now()';",
        'export const meta = { now: 5, process: 1, random: 2 };',
        'export const t = meta.now + meta.process + meta.random;',
        'export const d = new Date(t).toISOString();',
        'export function f(process: { now: number }, console: string): number { return process.now + console.length; }',
        'export const setTimeout = (x: number): number => x;',
        'export const s = setTimeout(1);',
        "import { y } from './b.js';",
        'export const z = y;',
      ].join('\n'),
      { 'b.ts': 'export const y = 1;' },
    );
    expect(found).toEqual([]);
  });
});
