/**
 * A node's V8 helper threads at the lowest CPU priority (Linux's SCHED_IDLE).
 *
 * Node starts V8's platform threads before any JavaScript runs: four workers (optimising
 * compilation, concurrent marking, parallel scavenges and compaction), the scheduler of
 * V8's delayed tasks and the inspector's signal thread. On a busy machine a node's event
 * loop, woken by a client's publish or a peer's append, was queued behind one of them: the
 * kernel (EEVDF) lets a running thread finish its slice, a few milliseconds, before the woken
 * one preempts it, even with the other CPU idle. Marked SCHED_IDLE, a helper yields at once
 * to any normal thread that wakes, and still has every CPU that nothing else wants. libuv's
 * pool (the WAL's pooled writes, LevelDB, the message store's files) keeps its priority.
 *
 * Measured with `../shared/compare/run.sh`'s shape (docs/architecture.md, "Performance"): the
 * slow operations at one in flight were the event loop of the leader, a follower or the
 * client waiting behind another process's helper thread for up to 4 ms with a CPU idle.
 *
 * A node finds these threads first (`findHelperThreads`, before anything else starts threads)
 * and lowers them only after its warm-up (warm-up.ts), just before it opens its own storage.
 * The warm-up keeps two cores busy with three nodes and a client: at SCHED_IDLE its
 * optimising compilation hardly ran, so much of the code was still unoptimised when real
 * traffic came. Lowered after it, in the first run at 256 in flight after a start: about a
 * fifth less CPU per message and an eighth more publishes a second (docs/architecture.md,
 * "Performance").
 *
 * The priority is set with util-linux's `chrt` (Node has no call for it). Where it is missing,
 * or on another system, the threads keep theirs and the node says so in its log; nothing else
 * changes. `idleHelperThreads: false` (QUORUMQ_IDLE_HELPER_THREADS=false) leaves them alone.
 */
import { execFile } from 'node:child_process';
import { readdir, readFile, stat } from 'node:fs/promises';

/** A thread of this process: its id and when it started (clock ticks since boot). */
export interface ThreadStart {
  readonly tid: number;
  readonly start: number;
}

/** libuv's pool size: UV_THREADPOOL_SIZE as libuv reads it (atoi; 0 means 1; at most 1024), else 4. */
export function uvPoolSize(value: string | undefined): number {
  if (value === undefined) return 4;
  const n = Number.parseInt(value, 10);
  if (!Number.isFinite(n) || n === 0) return 1;
  return n < 0 || n > 1024 ? 1024 : n;
}

/**
 * V8's platform threads among a process's threads, taken once libuv's pool has started and
 * before anything else starts threads: every thread but the main one (`pid`) and the pool's
 * `poolSize`, which libuv starts after them (ordered by start time, then id). Empty when the
 * count does not add up.
 */
export function platformThreads(pid: number, threads: readonly ThreadStart[], poolSize: number): number[] {
  const others = threads.filter((thread) => thread.tid !== pid).sort((a, b) => a.start - b.start || a.tid - b.tid);
  const count = others.length - poolSize;
  if (count <= 0 || count > PLATFORM_THREADS_MAX) return [];
  return others.slice(0, count).map((thread) => thread.tid);
}

/** More platform threads than this means something else started threads: leave them all. */
const PLATFORM_THREADS_MAX = 64;

/** The start time (field 22) of a `/proc/.../stat` line; the name before it may hold spaces and parentheses. */
export function threadStartTime(stat: string): number {
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  // Fields from the third (state) on: starttime is the 22nd field overall.
  return Number(fields[22 - 3]);
}

export type HelperThreadsOutcome =
  | { readonly kind: 'idle'; readonly threads: number }
  | { readonly kind: 'unchanged'; readonly reason: string };

export type HelperThreadsFound =
  | { readonly kind: 'found'; readonly tids: readonly number[] }
  | { readonly kind: 'unchanged'; readonly reason: string };

/**
 * This process's V8 platform threads (or why they cannot be told apart), changing nothing.
 * Never throws. Call before anything starts threads of its own (LevelDB, a warm-up's nodes).
 */
export async function findHelperThreads(env: NodeJS.ProcessEnv = process.env): Promise<HelperThreadsFound> {
  if (process.platform !== 'linux') return { kind: 'unchanged', reason: `not on Linux (${process.platform})` };
  try {
    await stat('/'); // libuv starts its pool on its first job: after this, every pool thread exists.
    const threads: ThreadStart[] = [];
    for (const name of await readdir('/proc/self/task')) {
      const text = await readFile(`/proc/self/task/${name}/stat`, 'utf8').catch(() => null);
      if (text !== null) threads.push({ tid: Number(name), start: threadStartTime(text) });
    }
    const tids = platformThreads(process.pid, threads, uvPoolSize(env.UV_THREADPOOL_SIZE));
    if (tids.length === 0) return { kind: 'unchanged', reason: `cannot tell V8's threads among ${threads.length}` };
    return { kind: 'found', tids };
  } catch (error) {
    return { kind: 'unchanged', reason: error instanceof Error ? error.message : String(error) };
  }
}

/** Puts threads found by findHelperThreads at SCHED_IDLE. Never throws. */
export async function idleThreads(found: HelperThreadsFound): Promise<HelperThreadsOutcome> {
  if (found.kind === 'unchanged') return found;
  let lowered = 0;
  for (const tid of found.tids) {
    const error = await chrtIdle(tid);
    if (error !== null) return { kind: 'unchanged', reason: lowered === 0 ? error : `${error} (${lowered} of ${found.tids.length} set before)` };
    lowered += 1;
  }
  return { kind: 'idle', threads: lowered };
}

/** Puts this process's V8 platform threads at SCHED_IDLE at once (findHelperThreads, then idleThreads). Never throws. */
export async function idleHelperThreads(env: NodeJS.ProcessEnv = process.env): Promise<HelperThreadsOutcome> {
  return idleThreads(await findHelperThreads(env));
}

/** Sets one thread to SCHED_IDLE: null, or what went wrong. */
function chrtIdle(tid: number): Promise<string | null> {
  return new Promise((resolve) => {
    execFile('chrt', ['--idle', '--pid', '0', String(tid)], { timeout: 5000 }, (error, _stdout, stderr) => {
      if (error === null) resolve(null);
      else if ((error as NodeJS.ErrnoException).code === 'ENOENT') resolve('chrt (util-linux) is not installed');
      else resolve(`chrt --idle --pid 0 ${tid}: ${stderr.trim() || error.message}`);
    });
  });
}
