/**
 * V8's helper threads at SCHED_IDLE (helper-threads.ts): which threads are V8's, and, in a
 * fresh node process, that exactly those end up idle while the main thread and libuv's pool
 * (the threads that read and write files) keep the normal policy.
 */
import { platformThreads, threadStartTime, uvPoolSize } from '@quorumq/cli';
import { execFileSync } from 'node:child_process';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';

const MODULE = pathToFileURL(resolve(import.meta.dirname, '..', 'dist', 'helper-threads.js')).href;
const SCHED_OTHER = 0;
const SCHED_IDLE = 5;

describe('which threads are V8 platform threads', () => {
  it('reads UV_THREADPOOL_SIZE as libuv does', () => {
    expect(uvPoolSize(undefined)).toBe(4);
    expect(uvPoolSize('16')).toBe(16);
    expect(uvPoolSize('0')).toBe(1);
    expect(uvPoolSize('nonsense')).toBe(1);
    expect(uvPoolSize('5000')).toBe(1024);
    expect(uvPoolSize('-3')).toBe(1024);
  });

  it('takes every thread but the main one and the pool, which starts last (by start time, then id)', () => {
    const threads = [
      { tid: 100, start: 10 }, // main
      { tid: 120, start: 12 }, // pool
      { tid: 101, start: 10 },
      { tid: 121, start: 12 }, // pool
      { tid: 103, start: 10 },
      { tid: 102, start: 10 },
    ];
    expect(platformThreads(100, threads, 2)).toEqual([101, 102, 103]);
    // A thread id that wrapped around still sorts by start time.
    expect(platformThreads(100, [...threads.slice(0, 4), { tid: 5, start: 11 }], 2)).toEqual([101, 5]);
    expect(platformThreads(100, [{ tid: 100, start: 1 }, { tid: 120, start: 2 }], 4)).toEqual([]);
  });

  it('reads the start time of a thread whose name holds spaces and parentheses', () => {
    const fields = Array.from({ length: 50 }, (_, i) => String(i + 3)); // field n holds n
    expect(threadStartTime(`1234 (odd (name) x) ${fields.join(' ')}`)).toBe(22);
  });
});

/** Runs the module's idleHelperThreads in a fresh node, then reads back every thread's policy and whether it read files. */
function inFreshNode(env: NodeJS.ProcessEnv): { outcome: { kind: string; threads?: number }; threads: Array<{ tid: number; main: boolean; policy: number; read: number }> } {
  const script = `
    import { readdirSync, readFileSync } from 'node:fs';
    import { readFile } from 'node:fs/promises';
    const { idleHelperThreads } = await import(${JSON.stringify(MODULE)});
    const outcome = await idleHelperThreads(process.env);
    const before = new Map(readdirSync('/proc/self/task').map((t) => [t, rchar(t)]));
    await Promise.all(Array.from({ length: 400 }, () => readFile('/proc/self/stat')));
    function rchar(t) { return Number(/rchar: (\\d+)/.exec(readFileSync('/proc/self/task/' + t + '/io', 'utf8'))[1]); }
    function policy(t) { const s = readFileSync('/proc/self/task/' + t + '/stat', 'utf8'); return Number(s.slice(s.lastIndexOf(')') + 2).split(' ')[41 - 3]); }
    const threads = readdirSync('/proc/self/task').map((t) => ({ tid: Number(t), main: Number(t) === process.pid, policy: policy(t), read: rchar(t) - (before.get(t) ?? 0) }));
    process.stdout.write(JSON.stringify({ outcome, threads }));
  `;
  return JSON.parse(execFileSync(process.execPath, ['--input-type=module', '-e', script], { env: { ...process.env, ...env }, encoding: 'utf8' })) as ReturnType<typeof inFreshNode>;
}

describe.runIf(process.platform === 'linux')('in a fresh node process', () => {
  it.each([[{}, 4], [{ UV_THREADPOOL_SIZE: '2' }, 2]] as const)('with %o, V8 threads go idle; the main thread and the %i pool threads stay normal', (env, pool) => {
    const { outcome, threads } = inFreshNode(env);
    expect(outcome.kind).toBe('idle');
    const idle = threads.filter((t) => t.policy === SCHED_IDLE);
    expect(idle.length).toBe(outcome.threads);
    expect(idle.length).toBeGreaterThanOrEqual(4); // V8's four workers at least
    expect(threads.find((t) => t.main)!.policy).toBe(SCHED_OTHER);
    expect(threads.filter((t) => !t.main && t.policy === SCHED_OTHER)).toHaveLength(pool);
    // The threads that did the file reads (libuv's pool) are normal ones.
    const readers = threads.filter((t) => !t.main && t.read > 0);
    expect(readers.length).toBeGreaterThan(0);
    for (const reader of readers) expect(reader.policy).toBe(SCHED_OTHER);
  });

  it('finding the threads changes none; lowering them later (after a warm-up) lowers exactly those found', () => {
    const script = `
      import { readdirSync, readFileSync } from 'node:fs';
      const { findHelperThreads, idleThreads } = await import(${JSON.stringify(MODULE)});
      function policy(t) { const s = readFileSync('/proc/self/task/' + t + '/stat', 'utf8'); return Number(s.slice(s.lastIndexOf(')') + 2).split(' ')[41 - 3]); }
      const policies = () => Object.fromEntries(readdirSync('/proc/self/task').map((t) => [t, policy(t)]));
      const found = await findHelperThreads(process.env);
      const afterFind = policies();
      const outcome = await idleThreads(found);
      process.stdout.write(JSON.stringify({ found, afterFind, outcome, afterIdle: policies() }));
    `;
    const { found, afterFind, outcome, afterIdle } = JSON.parse(execFileSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8' })) as {
      found: { kind: string; tids: number[] };
      afterFind: Record<string, number>;
      outcome: { kind: string; threads: number };
      afterIdle: Record<string, number>;
    };
    expect(found.kind).toBe('found');
    expect(found.tids.length).toBeGreaterThanOrEqual(4);
    expect(Object.values(afterFind).every((policy) => policy === SCHED_OTHER)).toBe(true);
    expect(outcome).toEqual({ kind: 'idle', threads: found.tids.length });
    const idle = Object.entries(afterIdle).filter(([, policy]) => policy === SCHED_IDLE).map(([tid]) => Number(tid));
    expect(idle.sort()).toEqual([...found.tids].sort());
  });

  it('without chrt, says so and changes no thread', () => {
    const { outcome, threads } = inFreshNode({ PATH: '/nonexistent' });
    expect(outcome).toEqual({ kind: 'unchanged', reason: 'chrt (util-linux) is not installed' });
    for (const thread of threads) expect(thread.policy).toBe(SCHED_OTHER);
  });
});
