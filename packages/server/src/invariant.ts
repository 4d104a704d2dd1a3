/**
 * Assertions at the hand-offs between the node's parts. A broken one is a bug in this node,
 * not bad input: the node stops (it restarts from its WAL) rather than go on from a state
 * it cannot trust.
 */
export class NodeInvariantError extends Error {
  override readonly name = 'NodeInvariantError';
}

export function invariant(condition: boolean, message: () => string): asserts condition {
  if (!condition) throw new NodeInvariantError(message());
}
