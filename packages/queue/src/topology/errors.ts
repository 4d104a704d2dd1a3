/**
 * Errors of the topology layer. `TopologyError` is what a user can meet (a refused
 * command, an unknown exchange at publish); `TopologyInvariantError` means the topology's
 * own state is inconsistent, and stays on in production because a replica that routes from
 * a corrupt copy would silently lose messages.
 */

/** gRPC-style codes, the same vocabulary the queue semantics spec uses. */
export type TopologyErrorCode =
  | 'INVALID_ARGUMENT'
  | 'NOT_FOUND'
  | 'FAILED_PRECONDITION'
  | 'PERMISSION_DENIED'
  | 'RESOURCE_EXHAUSTED';

export class TopologyError extends Error {
  override readonly name = 'TopologyError';
  readonly code: TopologyErrorCode;

  constructor(code: TopologyErrorCode, message: string) {
    super(message);
    this.code = code;
  }
}

export class TopologyInvariantError extends Error {
  override readonly name = 'TopologyInvariantError';
  readonly code = 'TOPOLOGY_INVARIANT';
}

export function assert(condition: boolean, message: string | (() => string)): asserts condition {
  if (!condition) {
    throw new TopologyInvariantError(typeof message === 'string' ? message : message());
  }
}
