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

const flagName = (flag: string): string => flag.split('=', 1)[0]!.replace(/_/g, '-');

/** `execArgv` with the node flags added where no flag of the same name is there. */
export function nodeProcessArgs(execArgv: readonly string[]): string[] {
  const given = new Set(execArgv.map(flagName));
  return [...execArgv, ...NODE_PROCESS_FLAGS.filter((flag) => !given.has(flagName(flag)))];
}
