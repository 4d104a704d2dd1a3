/**
 * The flags a node process is started with (by `quorumq cluster`, LocalCluster and the
 * container image): `--expose-gc` lets an idle node that has worked collect its garbage
 * before it gives free heap memory back to the system (see the server's idle-memory.ts).
 */
export const NODE_PROCESS_FLAGS: readonly string[] = ['--expose-gc'];

/** `execArgv` with the node flags added where missing. */
export function nodeProcessArgs(execArgv: readonly string[]): string[] {
  return [...execArgv, ...NODE_PROCESS_FLAGS.filter((flag) => !execArgv.includes(flag))];
}
