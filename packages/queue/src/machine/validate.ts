/**
 * Checks a command against the state before anything is mutated, so that a bad
 * command returns an error reply and leaves the state exactly as it was.
 */
import type { QueueState } from './state.js';
import type { Command, CommandType, ConsumerId, EnqueueCommand, ErrorCode, ErrorReply } from './types.js';

export const PRIORITY_MAX = 255;

export function errorReply(code: ErrorCode, message: string): ErrorReply {
  return { type: 'error', code, message };
}

function isCount(value: unknown): value is number {
  return typeof value === 'number' && Number.isSafeInteger(value) && value >= 0;
}

function invalid(field: string, expected: string, value: unknown): ErrorReply {
  return errorReply('INVALID_ARGUMENT', `${field} must be ${expected}, got ${JSON.stringify(value) ?? String(value)}`);
}

function validateOptionalCount(field: string, value: unknown): ErrorReply | null {
  return value === undefined || isCount(value) ? null : invalid(field, 'a non-negative integer', value);
}

export function validateEnqueue(command: EnqueueCommand): ErrorReply | null {
  if (!isCount(command.sizeBytes)) return invalid('sizeBytes', 'a non-negative integer', command.sizeBytes);
  if (typeof command.exchange !== 'string') return invalid('exchange', 'a string', command.exchange);
  if (!Array.isArray(command.routingKeys) || !command.routingKeys.every((key) => typeof key === 'string')) {
    return invalid('routingKeys', 'an array of strings', command.routingKeys);
  }
  if (command.priority !== undefined && !(isCount(command.priority) && command.priority <= PRIORITY_MAX)) {
    return invalid('priority', `an integer from 0 to ${PRIORITY_MAX}`, command.priority);
  }
  const counts = validateOptionalCount('expirationMs', command.expirationMs) ?? validateOptionalCount('delayMs', command.delayMs);
  if (counts !== null) return counts;
  if (command.notBefore !== undefined && !isCount(command.notBefore)) return invalid('notBefore', 'a timestamp in ms', command.notBefore);
  return validateProducer(command);
}

function validateProducer(command: EnqueueCommand): ErrorReply | null {
  if (command.producerId === undefined && command.sequence === undefined) return null;
  if (typeof command.producerId !== 'string') return invalid('producerId', 'a string when sequence is set', command.producerId);
  if (!isCount(command.sequence)) return invalid('sequence', 'a non-negative integer when producerId is set', command.sequence);
  return null;
}

function knownConsumer(state: QueueState, consumerId: ConsumerId): ErrorReply | null {
  if (typeof consumerId !== 'string') return invalid('consumerId', 'a string', consumerId);
  if (state.consumers.has(consumerId)) return null;
  return errorReply('UNKNOWN_CONSUMER', `consumer ${consumerId} is not subscribed to queue ${state.name}`);
}

/** Settlement needs the tag (or, with multiple, at least one tag up to it) to be unacked. */
function validateSettle(state: QueueState, consumerId: ConsumerId, deliveryTag: unknown, multiple: unknown): ErrorReply | null {
  const consumerError = knownConsumer(state, consumerId);
  if (consumerError !== null) return consumerError;
  if (!isCount(deliveryTag)) return invalid('deliveryTag', 'a non-negative integer', deliveryTag);
  if (multiple !== undefined && typeof multiple !== 'boolean') return invalid('multiple', 'a boolean', multiple);
  const unacked = state.consumers.get(consumerId)?.unacked;
  const found = multiple === true ? [...(unacked?.keys() ?? [])].some((tag) => tag <= deliveryTag) : unacked?.has(deliveryTag) === true;
  if (found) return null;
  return errorReply(
    'UNKNOWN_DELIVERY_TAG',
    `delivery tag ${deliveryTag} is not an unacked delivery of consumer ${consumerId}: it was already settled or never delivered to it`,
  );
}

function validateSubscribe(state: QueueState, consumerId: unknown, prefetch: unknown, priority: unknown): ErrorReply | null {
  if (typeof consumerId !== 'string') return invalid('consumerId', 'a string', consumerId);
  if (state.consumers.has(consumerId)) return errorReply('CONSUMER_EXISTS', `consumer ${consumerId} is already subscribed`);
  if (!isCount(prefetch)) return invalid('prefetch', 'a non-negative integer (0 = unlimited)', prefetch);
  if (priority !== undefined && !(typeof priority === 'number' && Number.isSafeInteger(priority))) {
    return invalid('priority', 'an integer', priority);
  }
  return null;
}

const COMMAND_TYPES: ReadonlySet<string> = new Set<CommandType>([
  'enqueue', 'subscribe', 'credit', 'cancel', 'consumerDown', 'ack', 'return', 'discard', 'get',
  'purge', 'tick', 'deadLetterConfirmed', 'declare', 'delete', 'sessionEnded',
]);

/** Returns the reason a command cannot be applied to this state, or null. */
export function validateCommand(state: QueueState, command: Command): ErrorReply | null {
  // A log written by a newer version may hold commands this one does not know.
  const type: unknown = typeof command === 'object' && command !== null ? command.type : undefined;
  if (typeof type !== 'string' || !COMMAND_TYPES.has(type)) return invalid('command type', `one of ${[...COMMAND_TYPES].join(', ')}`, type);
  if (state.deleted) return errorReply('QUEUE_DELETED', `queue ${state.name} was deleted; declare it again`);
  switch (command.type) {
    case 'enqueue':
      return validateEnqueue(command);
    case 'subscribe':
      return validateSubscribe(state, command.consumerId, command.prefetch, command.priority);
    case 'credit':
      return knownConsumer(state, command.consumerId) ?? (isCount(command.prefetch) ? null : invalid('prefetch', 'a non-negative integer', command.prefetch));
    case 'cancel':
    case 'consumerDown':
      return knownConsumer(state, command.consumerId);
    case 'ack':
    case 'discard':
      return validateSettle(state, command.consumerId, command.deliveryTag, command.multiple);
    case 'return':
      return validateSettle(state, command.consumerId, command.deliveryTag, command.multiple) ?? validateOptionalCount('delayMs', command.delayMs);
    case 'get':
      if (command.ackMode !== 'auto' && command.ackMode !== 'manual') return invalid('ackMode', "'auto' or 'manual'", command.ackMode);
      return command.ackMode === 'manual' ? knownConsumer(state, command.consumerId ?? '') : null;
    case 'deadLetterConfirmed':
      return Array.isArray(command.messageIds) && command.messageIds.every(isCount) ? null : invalid('messageIds', 'an array of message ids', command.messageIds);
    case 'delete':
      return validateDelete(state, command.ifUnused, command.ifEmpty);
    case 'purge':
    case 'tick':
    case 'declare':
    case 'sessionEnded':
      return null;
  }
}

function validateDelete(state: QueueState, ifUnused: unknown, ifEmpty: unknown): ErrorReply | null {
  if (ifUnused !== undefined && typeof ifUnused !== 'boolean') return invalid('ifUnused', 'a boolean', ifUnused);
  if (ifEmpty !== undefined && typeof ifEmpty !== 'boolean') return invalid('ifEmpty', 'a boolean', ifEmpty);
  if (ifUnused === true && state.consumers.size > 0) {
    return errorReply('FAILED_PRECONDITION', `queue ${state.name} has ${state.consumers.size} consumers and if_unused was set`);
  }
  const waiting = state.totals.ready.count + state.totals.delayed.count;
  if (ifEmpty === true && waiting > 0) {
    return errorReply('FAILED_PRECONDITION', `queue ${state.name} holds ${waiting} messages and if_empty was set`);
  }
  return null;
}
