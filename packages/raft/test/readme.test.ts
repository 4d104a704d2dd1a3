/**
 * The README's usage example type-checks against the built package (as an application
 * importing @quorumq/raft sees it) and runs as written: the proposal is applied and committed.
 */
import { execFile } from 'node:child_process';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import ts from 'typescript';
import { expect, it } from 'vitest';

const packageDir = resolve(import.meta.dirname, '..');

function exampleBlock(): string {
  const readme = readFileSync(join(packageDir, 'README.md'), 'utf8');
  const section = readme.slice(readme.indexOf('## Usage'));
  const match = /```ts\n([\s\S]*?)```/.exec(section);
  if (match?.[1] === undefined) throw new Error('README has no ts example under "## Usage"');
  return match[1];
}

it('README: the Ready loop example compiles against @quorumq/raft and applies its proposal', async () => {
  // In the package directory, so that @quorumq/raft resolves as it does for a user.
  const base = join(packageDir, `.readme-example-${process.pid}`);
  const source = exampleBlock();
  writeFileSync(`${base}.ts`, source);
  try {
    const options: ts.CompilerOptions = {
      target: ts.ScriptTarget.ES2022,
      module: ts.ModuleKind.NodeNext,
      moduleResolution: ts.ModuleResolutionKind.NodeNext,
      lib: ['lib.es2022.d.ts'],
      types: ['node'],
      strict: true,
      noUncheckedIndexedAccess: true,
      noEmit: true,
      skipLibCheck: true,
    };
    const program = ts.createProgram([`${base}.ts`], options);
    const problems = ts.getPreEmitDiagnostics(program).map((d) => ts.flattenDiagnosticMessageText(d.messageText, '\n'));
    expect(problems).toEqual([]);

    const js = ts.transpileModule(source, { compilerOptions: { target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.ESNext } }).outputText;
    writeFileSync(`${base}.mjs`, js);
    const { stdout } = await promisify(execFile)(process.execPath, [`${base}.mjs`], { cwd: packageDir, timeout: 30_000 });
    expect(stdout.trim()).toBe("[ 'hello' ] true");
  } finally {
    rmSync(`${base}.ts`, { force: true });
    rmSync(`${base}.mjs`, { force: true });
  }
});
