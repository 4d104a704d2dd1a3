/**
 * Checks a command against the state before anything is mutated, so that a bad
 * command returns an error reply and leaves the state exactly as it was.
 */
import type { DeadLetterReason, DeathRecord } from './deaths.js';
import type { QueueState } from './state.js';
import { MOVE_WINDOW_MAX } from './move.js';
import type { Command, CommandType, ConsumerId, EnqueueCommand, ErrorCode, ErrorReply, MoveStartCommand } from './types.js';

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
  if (command.compactionKey !== undefined && typeof command.compactionKey !== 'string') return invalid('compactionKey', 'a string', command.compactionKey);
  if (command.tombstone !== undefined && typeof command.tombstone !== 'boolean') return invalid('tombstone', 'a boolean', command.tombstone);
  return validateProducer(command) ?? validateDeaths(command.deaths);
}

const DEAD_LETTER_REASONS: ReadonlySet<unknown> = new Set<DeadLetterReason>(['rejected', 'expired', 'maxlen', 'delivery_limit', 'compacted']);

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function summaryProblem(field: string, value: unknown): ErrorReply | null {
  if (!isObject(value)) return invalid(field, 'a death summary {reason, queue, exchange}', value);
  if (!DEAD_LETTER_REASONS.has(value['reason'])) return invalid(`${field}.reason`, `one of ${[...DEAD_LETTER_REASONS].join(', ')}`, value['reason']);
  if (typeof value['queue'] !== 'string') return invalid(`${field}.queue`, 'a string', value['queue']);
  if (typeof value['exchange'] !== 'string') return invalid(`${field}.exchange`, 'a string', value['exchange']);
  return null;
}

function recordProblem(field: string, value: unknown): ErrorReply | null {
  if (!isObject(value)) return invalid(field, 'a death record', value);
  if (typeof value['queue'] !== 'string') return invalid(`${field}.queue`, 'a string', value['queue']);
  if (!DEAD_LETTER_REASONS.has(value['reason'])) return invalid(`${field}.reason`, `one of ${[...DEAD_LETTER_REASONS].join(', ')}`, value['reason']);
  const count = value['count'];
  if (!isCount(count) || count < 1) return invalid(`${field}.count`, 'an integer of at least 1', count);
  if (typeof value['exchange'] !== 'string') return invalid(`${field}.exchange`, 'a string', value['exchange']);
  const keys = value['routingKeys'];
  if (!Array.isArray(keys) || !keys.every((key) => typeof key === 'string')) return invalid(`${field}.routingKeys`, 'an array of strings', keys);
  const firstTime = value['firstTime'];
  const lastTime = value['lastTime'];
  if (!isCount(firstTime)) return invalid(`${field}.firstTime`, 'a timestamp in ms', firstTime);
  if (!isCount(lastTime) || lastTime < firstTime) return invalid(`${field}.lastTime`, `a timestamp in ms not before firstTime ${firstTime}`, lastTime);
  const original = value['originalExpirationMs'];
  if (original !== null && !isCount(original)) return invalid(`${field}.originalExpirationMs`, 'null or a non-negative integer', original);
  return null;
}

/**
 * Spec 5: death records a message carries in (republished, or dead-lettered here) must be
 * well-formed, since cycle detection and `x-death` read them: at least one record, one per
 * (queue, reason), counts from 1, times in order, `first` and `last` present.
 */
export function validateDeaths(deaths: unknown): ErrorReply | null {
  if (deaths === undefined || deaths === null) return null;
  if (!isObject(deaths)) return invalid('deaths', 'an object {records, first, last}', deaths);
  const records = deaths['records'];
  if (!Array.isArray(records) || records.length === 0) return invalid('deaths.records', 'a non-empty array of death records', records);
  const pairs = new Set<string>();
  for (const [i, record] of records.entries()) {
    const problem = recordProblem(`deaths.records[${i}]`, record);
    if (problem !== null) return problem;
    const { queue, reason } = record as DeathRecord;
    const pair = JSON.stringify([queue, reason]);
    if (pairs.has(pair)) return invalid(`deaths.records[${i}]`, `the only record for queue ${queue} and reason ${reason}`, record);
    pairs.add(pair);
  }
  return summaryProblem('deaths.first', deaths['first']) ?? summaryProblem('deaths.last', deaths['last']);
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

/** A subscribed consumer or a get holder: who may settle, cancel or go down. */
function knownHolder(state: QueueState, consumerId: ConsumerId): ErrorReply | null {
  if (typeof consumerId !== 'string') return invalid('consumerId', 'a string', consumerId);
  if (state.consumers.has(consumerId) || state.getHolders.has(consumerId)) return null;
  return errorReply('UNKNOWN_CONSUMER', `consumer ${consumerId} is not subscribed to queue ${state.name} and holds no get delivery`);
}

/** Manual get: any non-empty id; an unknown one becomes a get holder (if a message comes). */
function validateManualGet(consumerId: unknown): ErrorReply | null {
  return isNonEmptyString(consumerId) ? null : invalid('consumerId', "a non-empty string with ackMode 'manual'", consumerId);
}

/** Settlement needs the tag (or, with multiple, at least one tag up to it) to be unacked. */
function validateSettle(state: QueueState, consumerId: ConsumerId, deliveryTag: unknown, multiple: unknown): ErrorReply | null {
  const consumerError = knownHolder(state, consumerId);
  if (consumerError !== null) return consumerError;
  if (!isCount(deliveryTag)) return invalid('deliveryTag', 'a non-negative integer', deliveryTag);
  if (multiple !== undefined && typeof multiple !== 'boolean') return invalid('multiple', 'a boolean', multiple);
  const unacked = (state.consumers.get(consumerId) ?? state.getHolders.get(consumerId))?.unacked;
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
  if (state.getHolders.has(consumerId)) {
    return errorReply('CONSUMER_EXISTS', `consumer id ${consumerId} holds unacked deliveries of a manual get; settle them first`);
  }
  if (!isCount(prefetch)) return invalid('prefetch', 'a non-negative integer (0 = unlimited)', prefetch);
  if (priority !== undefined && !(typeof priority === 'number' && Number.isSafeInteger(priority))) {
    return invalid('priority', 'an integer', priority);
  }
  return null;
}

const COMMAND_TYPES: ReadonlySet<string> = new Set<CommandType>([
  'enqueue', 'subscribe', 'credit', 'cancel', 'consumerDown', 'ack', 'return', 'discard', 'get',
  'purge', 'tick', 'deadLetterConfirmed', 'declare', 'delete', 'sessionEnded',
  'moveStart', 'moveConfirmed', 'moveFailed', 'moveCancel',
]);

function isNonEmptyString(value: unknown): value is string {
  return typeof value === 'string' && value !== '';
}

/**
 * Spec 7: an exclusive queue with a known owner refuses other sessions. A command without
 * a session id is trusted (the server's own, or from before sessions were recorded).
 */
function validateSession(state: QueueState, sessionId: unknown): ErrorReply | null {
  if (sessionId === undefined) return null;
  if (!isNonEmptyString(sessionId)) return invalid('sessionId', 'a non-empty string', sessionId);
  const owner = state.exclusiveOwner;
  if (!state.args.exclusive || owner === null || owner === sessionId) return null;
  return errorReply('RESOURCE_LOCKED', `queue ${state.name} is exclusive to another session; only the session that declared it may use it`);
}

function validateMoveStart(state: QueueState, command: MoveStartCommand): ErrorReply | null {
  if (!isNonEmptyString(command.moveId)) return invalid('moveId', 'a non-empty string', command.moveId);
  if (typeof command.exchange !== 'string') return invalid('exchange', 'a string', command.exchange);
  const key: unknown = command.routingKey;
  if (key !== undefined && key !== null && typeof key !== 'string') return invalid('routingKey', 'a string or null', key);
  const limitProblem = validateOptionalCount('limit', command.limit);
  if (limitProblem !== null) return limitProblem;
  const window: unknown = command.window;
  if (window !== undefined && !(isCount(window) && window >= 1 && window <= MOVE_WINDOW_MAX)) {
    return invalid('window', `an integer from 1 to ${MOVE_WINDOW_MAX}`, window);
  }
  const current = state.move;
  if (current !== null && !current.done && current.id !== command.moveId) {
    return errorReply('FAILED_PRECONDITION', `queue ${state.name} is already moving messages (move ${current.id}); wait for it or cancel it`);
  }
  return null;
}

function validateIds(field: string, ids: unknown): ErrorReply | null {
  return Array.isArray(ids) && ids.every(isCount) ? null : invalid(field, 'an array of message ids', ids);
}

/**
 * Whether `command` is an object of a command type this machine knows: a log written by a
 * newer version, or a forged entry, may hold anything else. Needs no state, so a proposer
 * can run it on commands it did not build itself before proposing them.
 */
export function commandTypeProblem(command: unknown): ErrorReply | null {
  const type: unknown = typeof command === 'object' && command !== null && !Array.isArray(command) ? (command as { type?: unknown }).type : undefined;
  if (typeof type !== 'string' || !COMMAND_TYPES.has(type)) return invalid('command type', `one of ${[...COMMAND_TYPES].join(', ')}`, type);
  return null;
}

/** Returns the reason a command cannot be applied to this state, or null. */
export function validateCommand(state: QueueState, command: Command): ErrorReply | null {
  const typeProblem = commandTypeProblem(command);
  if (typeProblem !== null) return typeProblem;
  if (state.deleted) return errorReply('QUEUE_DELETED', `queue ${state.name} was deleted; declare it again`);
  switch (command.type) {
    case 'enqueue':
      return validateEnqueue(command);
    case 'subscribe':
      return validateSession(state, command.sessionId) ?? validateSubscribe(state, command.consumerId, command.prefetch, command.priority);
    case 'credit':
      return knownConsumer(state, command.consumerId) ?? (isCount(command.prefetch) ? null : invalid('prefetch', 'a non-negative integer', command.prefetch));
    case 'cancel':
    case 'consumerDown':
      return knownHolder(state, command.consumerId);
    case 'ack':
    case 'discard':
      return validateSettle(state, command.consumerId, command.deliveryTag, command.multiple);
    case 'return':
      return validateSettle(state, command.consumerId, command.deliveryTag, command.multiple) ?? validateOptionalCount('delayMs', command.delayMs);
    case 'get':
      if (command.ackMode !== 'auto' && command.ackMode !== 'manual') return invalid('ackMode', "'auto' or 'manual'", command.ackMode);
      return validateSession(state, command.sessionId) ?? (command.ackMode === 'manual' ? validateManualGet(command.consumerId) : null);
    case 'deadLetterConfirmed':
      return validateIds('messageIds', command.messageIds);
    case 'delete':
      return validateSession(state, command.sessionId) ?? validateDelete(state, command.ifUnused, command.ifEmpty);
    case 'purge':
    case 'declare':
      return validateSession(state, command.sessionId);
    case 'sessionEnded':
      // Any session may end; only the owner's end deletes the queue.
      return command.sessionId === undefined || isNonEmptyString(command.sessionId) ? null : invalid('sessionId', 'a non-empty string', command.sessionId);
    case 'tick':
      return null;
    case 'moveStart':
      return validateMoveStart(state, command);
    case 'moveConfirmed':
    case 'moveFailed':
      return isNonEmptyString(command.moveId) ? validateIds('messageIds', command.messageIds) : invalid('moveId', 'a non-empty string', command.moveId);
    case 'moveCancel':
      return isNonEmptyString(command.moveId) ? null : invalid('moveId', 'a non-empty string', command.moveId);
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
