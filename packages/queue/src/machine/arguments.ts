import { QueueArgumentError } from './errors.js';

/** Spec 6: `overflow` behaviours when `max_length` / `max_length_bytes` is reached. */
export type Overflow = 'drop-head' | 'reject-publish' | 'reject-publish-dlx';

/** Spec 5: `dead_letter_strategy`. */
export type DeadLetterStrategy = 'at-least-once' | 'at-most-once';

/** The queue arguments the machine enforces, validated and with the spec's defaults. */
export interface QueueArguments {
  /** Spec 4: default 20; -1 means unlimited. */
  readonly deliveryLimit: number;
  readonly deadLetterExchange: string | null;
  readonly deadLetterRoutingKey: string | null;
  readonly deadLetterStrategy: DeadLetterStrategy;
  /** Spec 6: queue-wide message TTL, or null for none. */
  readonly messageTtlMs: number | null;
  readonly maxLength: number | null;
  readonly maxLengthBytes: number | null;
  readonly overflow: Overflow;
  /** Spec 6: 0 = priorities off, at most 31. */
  readonly maxPriority: number;
  readonly singleActiveConsumer: boolean;
  /** Spec 2: a producer idle longer than this is forgotten by dedup. */
  readonly dedupWindowMs: number;
  /** Spec 3: default 30 min; null disables the timeout. */
  readonly consumerTimeoutMs: number | null;
  readonly autoDelete: boolean;
  /** Spec 7: `expires`, the idle lease of the queue, or null for none. */
  readonly expiresMs: number | null;
  readonly exclusive: boolean;
  /**
   * Spec 9: keyed compaction. The header whose value is a message's key, or
   * COMPACTION_KEY_ROUTING_KEY for its routing key. This and the three compaction settings
   * below are present only on a compacting queue (the arguments of other queues, and so
   * their snapshots, are as before compaction existed).
   */
  readonly compactionKey?: string;
  /** How long a tombstone waits (to be delivered) before it is dropped; default 24 h. */
  readonly compactionTombstoneRetentionMs?: number;
  /** A message younger than this is not replaced; default 0. */
  readonly compactionMinLagMs?: number;
  /** Dead-letter replaced messages with reason `compacted` (default false: they are dropped). */
  readonly compactionDeadLetter?: boolean;
}

/** What a client may pass; every field optional and not yet trusted. */
export type QueueArgumentsInput = { readonly [K in keyof QueueArguments]?: unknown };

export const DELIVERY_LIMIT_DEFAULT = 20;
export const DEDUP_WINDOW_DEFAULT_MS = 2 * 60 * 1000;
export const CONSUMER_TIMEOUT_DEFAULT_MS = 30 * 60 * 1000;
export const MAX_PRIORITY_MAX = 31;
/** Kafka's `delete.retention.ms` default (seed 003). */
export const COMPACTION_TOMBSTONE_RETENTION_DEFAULT_MS = 24 * 60 * 60 * 1000;
/** The `compaction_key` value that keys messages by their routing key instead of a header. */
export const COMPACTION_KEY_ROUTING_KEY = '$routing_key';

/** The compaction arguments: present (all four) on a compacting queue only. */
const COMPACTION_ARGUMENTS = ['compactionKey', 'compactionTombstoneRetentionMs', 'compactionMinLagMs', 'compactionDeadLetter'] as const;

export const DEFAULT_ARGUMENTS: QueueArguments = {
  deliveryLimit: DELIVERY_LIMIT_DEFAULT,
  deadLetterExchange: null,
  deadLetterRoutingKey: null,
  deadLetterStrategy: 'at-least-once',
  messageTtlMs: null,
  maxLength: null,
  maxLengthBytes: null,
  overflow: 'drop-head',
  maxPriority: 0,
  singleActiveConsumer: false,
  dedupWindowMs: DEDUP_WINDOW_DEFAULT_MS,
  consumerTimeoutMs: CONSUMER_TIMEOUT_DEFAULT_MS,
  autoDelete: false,
  expiresMs: null,
  exclusive: false,
};

function wrongType(argument: string, expected: string, value: unknown): QueueArgumentError {
  const got = value === null ? 'null' : typeof value;
  return new QueueArgumentError(
    argument,
    `queue argument ${argument} must be ${expected}, got ${got} (${String(value)}); fix the declare arguments`,
  );
}

function integerIn(argument: string, value: unknown, min: number, max: number): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < min || value > max) {
    return failWith(wrongType(argument, `an integer from ${min} to ${max}`, value));
  }
  return value;
}

function failWith(error: QueueArgumentError): never {
  throw error;
}

function optionalInteger(argument: string, value: unknown, min: number): number | null {
  if (value === undefined || value === null) return null;
  return integerIn(argument, value, min, Number.MAX_SAFE_INTEGER);
}

function optionalString(argument: string, value: unknown): string | null {
  if (value === undefined || value === null) return null;
  if (typeof value !== 'string') return failWith(wrongType(argument, 'a string', value));
  return value;
}

function flag(argument: string, value: unknown): boolean {
  if (value === undefined) return false;
  if (typeof value !== 'boolean') return failWith(wrongType(argument, 'a boolean', value));
  return value;
}

function oneOf<T extends string>(argument: string, value: unknown, allowed: readonly T[], fallback: T): T {
  if (value === undefined) return fallback;
  const match = allowed.find((candidate) => candidate === value);
  if (match === undefined) return failWith(wrongType(argument, `one of ${allowed.join(', ')}`, value));
  return match;
}

function deliveryLimit(value: unknown): number {
  if (value === undefined) return DELIVERY_LIMIT_DEFAULT;
  if (value === -1) return -1;
  return integerIn('deliveryLimit', value, 0, Number.MAX_SAFE_INTEGER);
}

/**
 * Validates and completes declare arguments. Throws `QueueArgumentError` naming the
 * first argument of the wrong type or range.
 */
export function parseQueueArguments(input: QueueArgumentsInput = {}): QueueArguments {
  // Arguments arrive from the metadata log: anything but a plain object is refused, typed.
  if (typeof input !== 'object' || input === null || Array.isArray(input)) {
    throw new QueueArgumentError('arguments', `queue arguments must be an object, got ${input === null ? 'null' : Array.isArray(input) ? 'an array' : typeof input}`);
  }
  const known = new Set<string>([...Object.keys(DEFAULT_ARGUMENTS), ...COMPACTION_ARGUMENTS]);
  for (const key of Object.keys(input)) {
    if (!known.has(key)) throw new QueueArgumentError(key, `unknown queue argument ${key}`);
  }
  const consumerTimeout = input.consumerTimeoutMs;
  return {
    deliveryLimit: deliveryLimit(input.deliveryLimit),
    deadLetterExchange: optionalString('deadLetterExchange', input.deadLetterExchange),
    deadLetterRoutingKey: optionalString('deadLetterRoutingKey', input.deadLetterRoutingKey),
    deadLetterStrategy: oneOf('deadLetterStrategy', input.deadLetterStrategy, ['at-least-once', 'at-most-once'], 'at-least-once'),
    messageTtlMs: optionalInteger('messageTtlMs', input.messageTtlMs, 0),
    maxLength: optionalInteger('maxLength', input.maxLength, 0),
    maxLengthBytes: optionalInteger('maxLengthBytes', input.maxLengthBytes, 0),
    overflow: oneOf('overflow', input.overflow, ['drop-head', 'reject-publish', 'reject-publish-dlx'], 'drop-head'),
    maxPriority: input.maxPriority === undefined ? 0 : integerIn('maxPriority', input.maxPriority, 0, MAX_PRIORITY_MAX),
    singleActiveConsumer: flag('singleActiveConsumer', input.singleActiveConsumer),
    dedupWindowMs:
      input.dedupWindowMs === undefined ? DEDUP_WINDOW_DEFAULT_MS : integerIn('dedupWindowMs', input.dedupWindowMs, 0, Number.MAX_SAFE_INTEGER),
    consumerTimeoutMs:
      consumerTimeout === undefined ? CONSUMER_TIMEOUT_DEFAULT_MS : optionalInteger('consumerTimeoutMs', consumerTimeout, 1),
    autoDelete: flag('autoDelete', input.autoDelete),
    expiresMs: optionalInteger('expiresMs', input.expiresMs, 1),
    exclusive: flag('exclusive', input.exclusive),
    ...compactionArguments(input),
  };
}

/** Spec 9: the compaction arguments, all four when `compactionKey` is set, else none. */
function compactionArguments(input: QueueArgumentsInput): Partial<QueueArguments> {
  if (input.compactionKey === undefined || input.compactionKey === null) {
    const stray = COMPACTION_ARGUMENTS.find((argument) => input[argument] !== undefined && input[argument] !== null);
    if (stray !== undefined) throw new QueueArgumentError(stray, `queue argument ${stray} needs compactionKey: set compactionKey (a header name, or ${COMPACTION_KEY_ROUTING_KEY}) or leave ${stray} out`);
    return {};
  }
  const key = input.compactionKey;
  if (typeof key !== 'string' || key === '') return failWith(wrongType('compactionKey', `a non-empty header name, or ${COMPACTION_KEY_ROUTING_KEY}`, key));
  const retention = input.compactionTombstoneRetentionMs;
  const lag = input.compactionMinLagMs;
  return {
    compactionKey: key,
    compactionTombstoneRetentionMs:
      retention === undefined || retention === null ? COMPACTION_TOMBSTONE_RETENTION_DEFAULT_MS : integerIn('compactionTombstoneRetentionMs', retention, 0, Number.MAX_SAFE_INTEGER),
    compactionMinLagMs: lag === undefined || lag === null ? 0 : integerIn('compactionMinLagMs', lag, 0, Number.MAX_SAFE_INTEGER),
    compactionDeadLetter: input.compactionDeadLetter === null ? false : flag('compactionDeadLetter', input.compactionDeadLetter),
  };
}

/** Spec 4 and 5: declare-time warnings (the declare still succeeds). */
export function argumentWarnings(args: QueueArguments): string[] {
  const warnings: string[] = [];
  if (args.deliveryLimit !== -1 && args.deadLetterExchange === null) {
    warnings.push(
      `delivery_limit is ${args.deliveryLimit} but no dead_letter_exchange is set: messages over the limit will be dropped`,
    );
  }
  if (args.compactionDeadLetter === true && args.deadLetterExchange === null) {
    warnings.push('compaction_dead_letter is true but no dead_letter_exchange is set: replaced messages will be dropped');
  }
  return warnings;
}

/**
 * Spec 7: a redeclare is idempotent only when the arguments match. Returns the name of
 * the first argument that differs (to be reported as FAILED_PRECONDITION), or null.
 */
export function argumentMismatch(existing: QueueArguments, requested: QueueArguments): keyof QueueArguments | null {
  for (const key of [...Object.keys(DEFAULT_ARGUMENTS), ...COMPACTION_ARGUMENTS] as Array<keyof QueueArguments>) {
    // A compaction argument absent on one side is a queue without compaction: null.
    if ((existing[key] ?? null) !== (requested[key] ?? null)) return key;
  }
  return null;
}
