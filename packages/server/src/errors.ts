/**
 * Errors a client sees. Each one is a gRPC status with a message a person understands, a
 * stable machine-readable reason in the `quorumq-reason` trailer and, for UNAVAILABLE, the
 * address of the known leader in `quorumq-leader`. The trailers and the reasons are the wire
 * contract's (`@quorumq/proto/errors`, shared with the SDK): use `Reason.X`, not a literal.
 */
import { Metadata, status as Status, type ServiceError } from '@grpc/grpc-js';
import { LEADER_TRAILER, REASON_TRAILER, Reason } from '@quorumq/proto/errors';

export { Reason, Status };

export class BrokerError extends Error {
  constructor(
    readonly code: Status,
    readonly reason: string,
    message: string,
    /** The address of the leader the client should talk to, when known. */
    readonly leaderAddress: string | null = null,
  ) {
    super(message);
    this.name = 'BrokerError';
  }

  toServiceError(): Partial<ServiceError> {
    const metadata = new Metadata();
    metadata.set(REASON_TRAILER, this.reason);
    if (this.leaderAddress !== null) metadata.set(LEADER_TRAILER, this.leaderAddress);
    return { code: this.code, details: this.message, metadata };
  }
}

export const notFound = (reason: string, message: string): BrokerError => new BrokerError(Status.NOT_FOUND, reason, message);
export const invalidArgument = (message: string, reason: string = Reason.INVALID_ARGUMENT): BrokerError =>
  new BrokerError(Status.INVALID_ARGUMENT, reason, message);
export const failedPrecondition = (reason: string, message: string): BrokerError =>
  new BrokerError(Status.FAILED_PRECONDITION, reason, message);
export const unavailable = (reason: string, message: string, leaderAddress: string | null = null): BrokerError =>
  new BrokerError(Status.UNAVAILABLE, reason, message, leaderAddress);
export const resourceExhausted = (reason: string, message: string): BrokerError =>
  new BrokerError(Status.RESOURCE_EXHAUSTED, reason, message);

/** Anything thrown inside a handler, as a status for the client. */
export function toServiceError(error: unknown): Partial<ServiceError> {
  if (error instanceof BrokerError) return error.toServiceError();
  if (isServiceError(error)) {
    // A status from another node (a forwarded call): pass it through unchanged.
    return { code: error.code, details: error.details, metadata: error.metadata };
  }
  const message = error instanceof Error ? error.message : String(error);
  return new BrokerError(Status.INTERNAL, Reason.INTERNAL, `internal error: ${message}`).toServiceError();
}

/** The `quorumq-reason` a status carries, '' when none. */
export function reasonOf(status: Partial<ServiceError>): string {
  const reason = status.metadata?.get(REASON_TRAILER)[0];
  return typeof reason === 'string' ? reason : '';
}

export function isServiceError(error: unknown): error is ServiceError {
  return (
    typeof error === 'object' &&
    error !== null &&
    'code' in error &&
    typeof (error as { code: unknown }).code === 'number' &&
    'metadata' in error
  );
}
