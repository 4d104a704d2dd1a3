import { quorumq } from '@quorumq/proto';
import { QuorumqError, SdkReason, statusName } from './errors.js';
import { decodeMessage, type ReceivedMessage } from './messages.js';

/** How the broker settled a publish (FAILED is reported as a rejected promise instead). */
export type PublishOutcome = 'confirmed' | 'unroutable' | 'rejected' | 'duplicate';

export interface PublishResult {
  readonly outcome: PublishOutcome;
  /** The queues the message was committed to. */
  readonly queues: readonly string[];
  /** Why it was rejected: a full queue with overflow reject-publish, or a body over the broker's maxMessageBytes. */
  readonly reason?: string;
  /** With `mandatory` and outcome 'unroutable': the message. */
  readonly returned?: ReceivedMessage;
}

const Outcome = quorumq.v1.PublishOutcome;

/** A PublishResponse → a result, or throws a QuorumqError for FAILED / unknown outcomes. */
export function toPublishResult(response: quorumq.v1.PublishResponse.$Properties, node?: string): PublishResult {
  const queues = [...(response.queues ?? [])];
  const reason = response.reason ?? '';
  const base = { queues, ...(reason === '' ? {} : { reason }) };
  switch (response.outcome) {
    case Outcome.PUBLISH_OUTCOME_CONFIRMED:
      return { outcome: 'confirmed', ...base };
    case Outcome.PUBLISH_OUTCOME_UNROUTABLE:
      return response.returned === null || response.returned === undefined
        ? { outcome: 'unroutable', ...base }
        : { outcome: 'unroutable', ...base, returned: decodeMessage(response.returned) };
    case Outcome.PUBLISH_OUTCOME_REJECTED:
      return { outcome: 'rejected', ...base };
    case Outcome.PUBLISH_OUTCOME_DUPLICATE:
      return { outcome: 'duplicate', ...base };
    case Outcome.PUBLISH_OUTCOME_FAILED: {
      const name = statusName(response.statusCode ?? 2);
      const code = name === 'OK' ? 'UNKNOWN' : name;
      const errorReason = response.errorReason ?? '';
      // The broker's stable reason, when it sends one, with its message for a person.
      if (errorReason !== '') return throwFailed(code, errorReason, node, `publish failed: ${code} (${errorReason}): ${reason}`);
      return throwFailed(code, reason, node);
    }
    default:
      return throwFailed('INTERNAL', reason === '' ? SdkReason.UNKNOWN_OUTCOME : reason, node, `unknown publish outcome ${String(response.outcome)}`);
  }
}

function throwFailed(code: string, reason: string, node: string | undefined, message?: string): never {
  throw new QuorumqError(message ?? `publish failed: ${code}${reason === '' ? '' : ` (${reason})`}`, {
    code,
    reason,
    ...(node === undefined ? {} : { node }),
  });
}
