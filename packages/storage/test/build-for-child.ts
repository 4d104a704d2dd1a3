import { mkdir, readdir, readFile, symlink, writeFile } from 'node:fs/promises';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { tempDir } from './helpers.js';

const packageDir = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const repoNodeModules = resolve(packageDir, '..', '..', 'node_modules');

/**
 * Transpiles packages/storage/src to plain ESM in a temp dir for child processes, so the
 * kill -9 test runs the current source without depending on a (possibly stale or missing)
 * `dist/`. Type checking is tsc's job, not this test's. Returns the path of index.js.
 */
export async function buildStorageForChild(): Promise<string> {
  const out = await tempDir('child-build');
  for (const file of await sourceFiles(join(packageDir, 'src'))) {
    const source = await readFile(file, 'utf8');
    const { outputText } = ts.transpileModule(source, {
      fileName: file,
      compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022 },
    });
    const target = join(out, relative(join(packageDir, 'src'), file)).replace(/\.ts$/, '.js');
    await mkdir(dirname(target), { recursive: true });
    await writeFile(target, outputText);
  }
  await writeFile(join(out, 'package.json'), JSON.stringify({ type: 'module' }));
  await symlink(repoNodeModules, join(out, 'node_modules'), 'dir');
  return join(out, 'index.js');
}

async function sourceFiles(dir: string): Promise<string[]> {
  const out: string[] = [];
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) out.push(...(await sourceFiles(path)));
    else if (entry.name.endsWith('.ts') && !entry.name.endsWith('.d.ts')) out.push(path);
  }
  return out;
}
