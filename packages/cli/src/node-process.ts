import { availableParallelism } from 'node:os';

/**
 * The flags a node process is started with (by `quorumq cluster`, LocalCluster, the container
 * image and the Kubernetes manifest):
 *
 * - `--expose-gc` lets an idle node that has worked collect its garbage before it gives free
 *   heap memory back to the system (see the server's idle-memory.ts).
 * - `--initial-old-space-size=256` lets V8's old generation reach 256 MB before its first full
 *   collections. A node under load promotes what lives across a few turns (log entries, held
 *   bodies, a queue's growing state); from V8's default start it ran a full collection every
 *   100-300 ms at 256 in flight with 25-40 MB live, with marking steps of up to 17 ms on the
 *   event loop (`--trace-gc`). A smaller `--max-old-space-size` still bounds the heap. Measured in alternating
 *   runs of `../shared/compare/run.sh`'s shape and `npm run bench:backlog` (see
 *   docs/architecture.md, "Performance"): more throughput and less CPU per message at about
 *   the same peak memory; an idle node still gives memory back (idle-memory.ts).
 * - `--bytecode-size-allowance-per-tick=1100` lets V8 optimise a large function after fewer
 *   ticks than its default (150) asks: a function needs 3 ticks plus one per that many bytes
 *   of its bytecode. A node's code that runs once per event-loop turn (the peer transport's
 *   flush, the Raft batch encoder, the WAL's flush and persist) is large and ran a few hundred
 *   times in a 50,000-message run at 256 in flight, too few for V8's default: it was first
 *   optimised in the one-at-a-time run that followed, which meanwhile ran it unoptimised.
 *   1,100 was V8's own default before it lowered it. Measured in alternating runs of
 *   `../shared/compare/run.sh`'s shape (docs/architecture.md, "Performance"): more publishes
 *   per second and less CPU per message at one in flight, the same at 256 in flight.
 *
 * A flag given to the parent process with the same name (before any `=`) wins: `node
 * --initial-old-space-size=1024 main.js cluster` starts its nodes with 1024.
 */
export const NODE_PROCESS_FLAGS: readonly string[] = ['--expose-gc', '--initial-old-space-size=256', '--bytecode-size-allowance-per-tick=1100'];

/** Node starts this many V8 worker threads unless told otherwise. */
export const V8_POOL_SIZE_DEFAULT = 4;

/**
 * V8's worker threads for a node started on this machine (`quorumq cluster`, LocalCluster):
 * one per CPU, at most Node's default. Node starts 4 whatever the machine; on 2 CPUs, three
 * nodes then had 12 compiler and GC threads for 2 CPUs, and their compilation and parallel
 * collections crowded the event loops in a run's first second. With 2 per node, in alternating
 * runs of `../shared/compare/run.sh`'s shape (docs/architecture.md, "Performance"): p99 at 256
 * in flight about a fifth lower, the rest level or better. The container image and the
 * Kubernetes manifest keep Node's default (the CPUs a container gets are not known when it is
 * built): give `NODE_OPTIONS=--v8-pool-size=N` there (docs/configuration.md).
 */
export function v8PoolSize(cpus: number): number {
  return Math.max(1, Math.min(V8_POOL_SIZE_DEFAULT, Math.floor(cpus)));
}

/** The flags of a node started on this machine: NODE_PROCESS_FLAGS and the V8 pool for `cpus` CPUs. */
export function localNodeFlags(cpus: number = availableParallelism()): string[] {
  return [...NODE_PROCESS_FLAGS, `--v8-pool-size=${v8PoolSize(cpus)}`];
}

const flagName = (flag: string): string => flag.split('=', 1)[0]!.replace(/_/g, '-');

/** `execArgv` with the local node flags (`localNodeFlags`) added where no flag of the same name is there. */
export function nodeProcessArgs(execArgv: readonly string[], cpus: number = availableParallelism()): string[] {
  const given = new Set(execArgv.map(flagName));
  return [...execArgv, ...localNodeFlags(cpus).filter((flag) => !given.has(flagName(flag)))];
}
