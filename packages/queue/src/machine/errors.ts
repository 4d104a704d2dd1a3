/**
 * Errors of the queue state machine. Two kinds: a `QueueInvariantError` means the
 * machine's own state is corrupt (crash rather than replicate it); a
 * `QueueArgumentError` means a user gave a queue argument of the wrong type or range.
 * Bad commands do not throw: they return an `error` reply (see types.ts) and leave the
 * state unchanged, because a replicated log must be able to contain them.
 */
export class QueueInvariantError extends Error {
  override readonly name = 'QueueInvariantError';
  readonly code = 'QUEUE_INVARIANT';
}

export function assert(condition: boolean, message: string | (() => string)): asserts condition {
  if (!condition) {
    throw new QueueInvariantError(typeof message === 'string' ? message : message());
  }
}

export class QueueArgumentError extends Error {
  override readonly name = 'QueueArgumentError';
  readonly code = 'INVALID_ARGUMENT';
  constructor(
    readonly argument: string,
    message: string,
  ) {
    super(message);
  }
}
