import { Metadata, status } from '@grpc/grpc-js';
import { LEADER_TRAILER, REASON_TRAILER } from '@quorumq/proto/errors';

// The trailers (and every reason a node sends, `Reason`) are the wire contract's: @quorumq/proto/errors.
export { LEADER_TRAILER, REASON_TRAILER };

/** The reasons the SDK sets itself, in {@link QuorumqError.reason}; a node never sends them. */
export const SdkReason = Object.freeze({
  /** A stream broke under a call (node died, connection lost): retriable. */
  STREAM_BROKEN: 'STREAM_BROKEN',
  /** A call on a client after `close()`. */
  CLIENT_CLOSED: 'CLIENT_CLOSED',
  /** A publish on a publisher after `close()` or `destroy()`. */
  PUBLISHER_CLOSED: 'PUBLISHER_CLOSED',
  /** Waiting on a consumer that was cancelled. */
  CONSUMER_CANCELLED: 'CONSUMER_CANCELLED',
  /** A publish outcome this SDK does not know (from a newer broker), without a reason of its own. */
  UNKNOWN_OUTCOME: 'UNKNOWN_OUTCOME',
} as const);

/** The reason the SDK reports when a stream broke under a call (node died, connection lost). */
export const STREAM_BROKEN = SdkReason.STREAM_BROKEN;

/** gRPC status names, e.g. 'NOT_FOUND'. */
export type StatusName = keyof typeof status;

const NON_RETRIABLE = new Set<string>(['NOT_FOUND', 'INVALID_ARGUMENT', 'FAILED_PRECONDITION', 'ALREADY_EXISTS']);

/** The name of a numeric gRPC status code ('UNKNOWN' for codes grpc-js does not know). */
export function statusName(code: number): string {
  const name: unknown = (status as unknown as Record<number, unknown>)[code];
  return typeof name === 'string' ? name : 'UNKNOWN';
}

/**
 * Whether an error with this status code and reason may succeed when retried (possibly on
 * another node): UNAVAILABLE, DEADLINE_EXCEEDED, a broken stream, RESOURCE_EXHAUSTED caused
 * by a disk alarm (reason containing "ALARM", e.g. "DISK_ALARM"), ABORTED.
 */
export function isRetriable(code: string, reason: string): boolean {
  if (NON_RETRIABLE.has(code)) return false;
  if (reason === STREAM_BROKEN) return true;
  switch (code) {
    case 'UNAVAILABLE':
    case 'DEADLINE_EXCEEDED':
    case 'ABORTED':
      return true;
    case 'RESOURCE_EXHAUSTED':
      return reason.toUpperCase().includes('ALARM');
    default:
      return false;
  }
}

export interface QuorumqErrorInit {
  /** gRPC status name, e.g. 'NOT_FOUND'. */
  readonly code: string;
  /** The broker's `quorumq-reason`, '' when absent. */
  readonly reason?: string;
  /** Overrides the default classification of {@link isRetriable}. */
  readonly retriable?: boolean;
  /** The address of the node that answered, when known. */
  readonly node?: string;
  /** The `quorumq-leader` trailer, when present. */
  readonly leader?: string;
  readonly cause?: unknown;
}

/** Every failure the SDK reports. */
export class QuorumqError extends Error {
  /** gRPC status name, e.g. 'NOT_FOUND', 'UNAVAILABLE'. */
  readonly code: string;
  /** The broker's stable reason (trailer `quorumq-reason`), e.g. 'QUEUE_NOT_FOUND'; '' when none. */
  readonly reason: string;
  /** True when retrying (possibly on another node, or later) may succeed. */
  readonly retriable: boolean;
  /** The node address that answered, when known. */
  readonly node: string | undefined;
  /** The queue leader's address named by the broker (trailer `quorumq-leader`), when present. */
  readonly leader: string | undefined;

  constructor(message: string, init: QuorumqErrorInit) {
    super(message, init.cause === undefined ? undefined : { cause: init.cause });
    this.name = 'QuorumqError';
    this.code = init.code;
    this.reason = init.reason ?? '';
    this.retriable = init.retriable ?? isRetriable(this.code, this.reason);
    this.node = init.node;
    this.leader = init.leader;
  }
}

/** The shape of a grpc-js ServiceError (or any status-carrying error). */
interface StatusLike {
  readonly code?: unknown;
  readonly details?: unknown;
  readonly message?: unknown;
  readonly metadata?: unknown;
}

function firstString(metadata: unknown, key: string): string | undefined {
  if (!(metadata instanceof Metadata)) return undefined;
  for (const value of metadata.get(key)) {
    const text = typeof value === 'string' ? value : value.toString('utf8');
    if (text !== '') return text;
  }
  return undefined;
}

/** Whether a gRPC error means the transport under the call broke rather than the broker refusing. */
export function isBrokenTransport(code: number, details: string): boolean {
  // The SDK only cancels calls it no longer listens to: a CANCELLED it sees comes from the
  // other side, e.g. a node shutting down resets its streams.
  if (code === status.UNAVAILABLE || code === status.CANCELLED) return true;
  // grpc-js reports an HTTP/2 stream reset or a lost session as INTERNAL / UNKNOWN.
  if (code === status.INTERNAL || code === status.UNKNOWN) {
    return /RST_STREAM|Connection dropped|GOAWAY|ECONNRESET|socket|session|closed|Stream removed|before receiving status/i.test(details);
  }
  return false;
}

/** Converts a grpc-js error (or anything thrown) into a QuorumqError. */
export function toQuorumqError(error: unknown, node?: string): QuorumqError {
  if (error instanceof QuorumqError) return error;
  if (typeof error === 'object' && error !== null) {
    const e = error as StatusLike;
    if (typeof e.code === 'number') {
      const details = typeof e.details === 'string' ? e.details : typeof e.message === 'string' ? e.message : '';
      const reason = firstString(e.metadata, REASON_TRAILER);
      const leader = firstString(e.metadata, LEADER_TRAILER);
      const broken = isBrokenTransport(e.code, details);
      const code = broken && e.code !== status.UNAVAILABLE ? 'UNAVAILABLE' : statusName(e.code);
      return new QuorumqError(details === '' ? code : details, {
        code,
        reason: reason ?? (broken && e.code !== status.UNAVAILABLE ? STREAM_BROKEN : ''),
        ...(node === undefined ? {} : { node }),
        ...(leader === undefined ? {} : { leader }),
        cause: error,
      });
    }
  }
  const message = error instanceof Error ? error.message : String(error);
  return new QuorumqError(message, { code: 'UNKNOWN', retriable: false, cause: error, ...(node === undefined ? {} : { node }) });
}

/** A retriable error for calls whose stream broke under them. */
export function brokenStreamError(message: string, node?: string, cause?: unknown): QuorumqError {
  return new QuorumqError(message, {
    code: 'UNAVAILABLE',
    reason: STREAM_BROKEN,
    retriable: true,
    ...(node === undefined ? {} : { node }),
    ...(cause === undefined ? {} : { cause }),
  });
}
