/**
 * The flags a node process starts with: added to the parent's own (a flag of the same name
 * given there wins), and the same in the container image and the Kubernetes manifest.
 */
import { NODE_PROCESS_FLAGS, V8_POOL_SIZE_DEFAULT, localNodeFlags, nodeProcessArgs, v8PoolSize } from '@quorumq/cli';
import { availableParallelism } from 'node:os';
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';

const root = resolve(import.meta.dirname, '..', '..', '..');

describe('nodeProcessArgs', () => {
  const pool = '--v8-pool-size=2';
  it('adds the node flags and a V8 pool for the machine after the parent process flags', () => {
    expect(NODE_PROCESS_FLAGS).toEqual(['--expose-gc', '--initial-old-space-size=256', '--bytecode-size-allowance-per-tick=1100']);
    expect(localNodeFlags(2)).toEqual([...NODE_PROCESS_FLAGS, pool]);
    expect(nodeProcessArgs([], 2)).toEqual([...NODE_PROCESS_FLAGS, pool]);
    expect(nodeProcessArgs(['--enable-source-maps'], 2)).toEqual(['--enable-source-maps', ...NODE_PROCESS_FLAGS, pool]);
    expect(nodeProcessArgs([])).toEqual(localNodeFlags(availableParallelism()));
  });

  it('adds no flag the parent already has under the same name, whatever its value or spelling', () => {
    expect(nodeProcessArgs(['--expose-gc'], 2)).toEqual(['--expose-gc', '--initial-old-space-size=256', '--bytecode-size-allowance-per-tick=1100', pool]);
    expect(nodeProcessArgs(['--initial-old-space-size=1024'], 2)).toEqual(['--initial-old-space-size=1024', '--expose-gc', '--bytecode-size-allowance-per-tick=1100', pool]);
    expect(nodeProcessArgs(['--initial_old_space_size=64', '--expose_gc', '--bytecode_size_allowance_per_tick=150', '--v8_pool_size=3'], 2)).toEqual([
      '--initial_old_space_size=64',
      '--expose_gc',
      '--bytecode_size_allowance_per_tick=150',
      '--v8_pool_size=3',
    ]);
    // A different flag that shares a prefix is not the same flag.
    expect(nodeProcessArgs(['--initial-old-space-size-x=1'], 2)).toEqual(['--initial-old-space-size-x=1', ...NODE_PROCESS_FLAGS, pool]);
  });

  it("gives V8 one worker thread per CPU, at least one and at most Node's default of four", () => {
    expect([0, 1, 2, 3, 4, 8, 64].map(v8PoolSize)).toEqual([1, 1, 2, 3, 4, 4, 4]);
    expect(V8_POOL_SIZE_DEFAULT).toBe(4);
  });
});

describe('the node flags outside the CLI', () => {
  it('the container image starts its node with them', () => {
    const cmd = readFileSync(join(root, 'cluster/Dockerfile'), 'utf8')
      .split('\n')
      .find((line) => line.startsWith('CMD '));
    const argv = JSON.parse(cmd!.slice('CMD '.length)) as string[];
    expect(argv.slice(0, 1 + NODE_PROCESS_FLAGS.length)).toEqual(['node', ...NODE_PROCESS_FLAGS]);
    expect(argv.slice(1 + NODE_PROCESS_FLAGS.length, 3 + NODE_PROCESS_FLAGS.length)).toEqual(['packages/cli/dist/main.js', 'node']);
  });

  it('the Kubernetes manifest starts its nodes with them', () => {
    const documents = parseAllDocuments(readFileSync(join(root, 'cluster/kubernetes/quorumq.yaml'), 'utf8')).map((d) => d.toJS() as Record<string, unknown> | null);
    // eslint-disable-next-line @typescript-eslint/no-explicit-any
    const set = documents.find((d) => d?.['kind'] === 'StatefulSet') as any;
    const command = set.spec.template.spec.containers.find((c: { name: string }) => c.name === 'quorumq').command as string[];
    expect(command).toEqual(['node', ...NODE_PROCESS_FLAGS, 'packages/cli/dist/main.js', 'node']);
  });
});
