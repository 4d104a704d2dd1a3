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
 *
 * A flag given to the parent process with the same name (before any `=`) wins: `node
 * --initial-old-space-size=1024 main.js cluster` starts its nodes with 1024.
 */
export const NODE_PROCESS_FLAGS: readonly string[] = ['--expose-gc', '--initial-old-space-size=256'];

const flagName = (flag: string): string => flag.split('=', 1)[0]!.replace(/_/g, '-');

/** `execArgv` with the node flags added where no flag of the same name is there. */
export function nodeProcessArgs(execArgv: readonly string[]): string[] {
  const given = new Set(execArgv.map(flagName));
  return [...execArgv, ...NODE_PROCESS_FLAGS.filter((flag) => !given.has(flagName(flag)))];
}
