/**
 * Invariant checks that stay on in production. A violated invariant means the node's
 * state can no longer be trusted; crashing is safer than replicating a corrupt log.
 */
export class RaftInvariantError extends Error {
  override readonly name = 'RaftInvariantError';
  readonly code = 'RAFT_INVARIANT';
}

export function assert(condition: boolean, message: string | (() => string)): asserts condition {
  if (!condition) {
    throw new RaftInvariantError(typeof message === 'string' ? message : message());
  }
}
