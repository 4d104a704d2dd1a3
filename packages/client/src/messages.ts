import { quorumq } from '@quorumq/proto';
import { deathsFromWire, deathsToWire } from '@quorumq/proto/deaths';
import { Reason } from '@quorumq/proto/errors';
import { QuorumqError } from './errors.js';
import { decodeHeaders, encodeHeaders, type DecodedHeaders, type Headers } from './headers.js';
import { toWireInt64, wireNumber } from './longs.js';

/** A message body: bytes, or a string sent as UTF-8. */
export type Body = Buffer | Uint8Array | string;

/** Message properties (AMQP basic properties) when publishing. */
export interface MessageProperties {
  readonly contentType?: string;
  readonly contentEncoding?: string;
  readonly messageId?: string;
  readonly correlationId?: string;
  readonly replyTo?: string;
  /** Date or ms since the Unix epoch. */
  readonly timestamp?: Date | number;
  readonly type?: string;
  readonly appId?: string;
  readonly userId?: string;
  /** 0..255; only the queue's `maxPriority` levels are distinguished. */
  readonly priority?: number;
  /** Per-message TTL in milliseconds. */
  readonly expirationMs?: number;
  /** Application headers; merged under {@link PublishOptions.headers}. */
  readonly headers?: Headers;
}

/** Options of one publish. */
export interface PublishOptions {
  readonly properties?: MessageProperties;
  /** Application headers (win over `properties.headers` on equal keys). */
  readonly headers?: Headers;
  /** Return the message (outcome 'unroutable' with `returned`) when no queue matched. */
  readonly mandatory?: boolean;
  /** Invisible until this many ms after it is enqueued. */
  readonly delayMs?: number;
  /** Invisible until this time (the leader's clock). */
  readonly notBefore?: Date | number;
  /** Publisher deduplication: the producer id... */
  readonly producerId?: string;
  /** ...and its strictly increasing sequence. */
  readonly sequence?: number | bigint;
  /**
   * Death records to carry when republishing a received message (spec 5: they keep
   * counting). Pass `delivery.deaths`, `delivery.firstDeath` and `delivery.lastDeath`.
   */
  readonly deaths?: readonly DeathRecord[];
  readonly firstDeath?: DeathSummary;
  readonly lastDeath?: DeathSummary;
  /**
   * Spec 9: on a queue with `compactionKey`, deletes the message's key (an empty body does
   * too). The tombstone is delivered like any message, so consumers learn of the delete.
   */
  readonly tombstone?: boolean;
}

/** Properties of a received message; unset strings are omitted. */
export interface ReceivedProperties {
  readonly contentType?: string;
  readonly contentEncoding?: string;
  readonly messageId?: string;
  readonly correlationId?: string;
  readonly replyTo?: string;
  readonly timestamp?: Date;
  readonly type?: string;
  readonly appId?: string;
  readonly userId?: string;
  readonly priority?: number;
  readonly expirationMs?: number;
}

/** Why and where a message was dead-lettered (one record per queue and reason). */
export interface DeathRecord {
  readonly queue: string;
  /** 'rejected' | 'expired' | 'maxlen' | 'delivery_limit' */
  readonly reason: string;
  readonly count: number;
  readonly exchange: string;
  readonly routingKeys: readonly string[];
  readonly firstTime: Date;
  readonly lastTime: Date;
  readonly originalExpirationMs?: number;
}

export interface DeathSummary {
  readonly reason: string;
  readonly queue: string;
  readonly exchange: string;
}

/** A message as received (a delivery's content, or a publish's `returned` message). */
export interface ReceivedMessage {
  readonly body: Buffer;
  readonly routingKey: string;
  readonly properties: ReceivedProperties;
  readonly headers: DecodedHeaders;
  readonly deaths: readonly DeathRecord[];
  readonly firstDeath?: DeathSummary;
  readonly lastDeath?: DeathSummary;
  /** Spec 9: set (true) when the message was published as a tombstone (an empty body may be one too). */
  readonly tombstone?: true;
}

export function toBuffer(body: Body): Buffer {
  if (typeof body === 'string') return Buffer.from(body, 'utf8');
  if (Buffer.isBuffer(body)) return body;
  if (body instanceof Uint8Array) return Buffer.from(body.buffer, body.byteOffset, body.byteLength);
  throw new TypeError('body must be a Buffer, a Uint8Array or a string');
}

function nonNegative(name: string, value: number | undefined): number | undefined {
  if (value === undefined) return undefined;
  if (!Number.isFinite(value) || value < 0) throw new QuorumqError(`${name} must be a non-negative number`, { code: 'INVALID_ARGUMENT', reason: Reason.INVALID_ARGUMENT, retriable: false });
  return Math.trunc(value);
}

function encodeProperties(p: MessageProperties | undefined): quorumq.v1.Properties.$Properties {
  if (p === undefined) return {};
  const out: quorumq.v1.Properties.$Properties = {};
  if (p.contentType !== undefined) out.contentType = p.contentType;
  if (p.contentEncoding !== undefined) out.contentEncoding = p.contentEncoding;
  if (p.messageId !== undefined) out.messageId = p.messageId;
  if (p.correlationId !== undefined) out.correlationId = p.correlationId;
  if (p.replyTo !== undefined) out.replyTo = p.replyTo;
  if (p.timestamp !== undefined) out.timestampMs = p.timestamp instanceof Date ? p.timestamp.getTime() : p.timestamp;
  if (p.type !== undefined) out.type = p.type;
  if (p.appId !== undefined) out.appId = p.appId;
  if (p.userId !== undefined) out.userId = p.userId;
  if (p.priority !== undefined) {
    if (!Number.isInteger(p.priority) || p.priority < 0 || p.priority > 255) {
      throw new QuorumqError('priority must be an integer in 0..255', { code: 'INVALID_ARGUMENT', reason: Reason.INVALID_ARGUMENT, retriable: false });
    }
    out.priority = p.priority;
  }
  const expiration = nonNegative('expirationMs', p.expirationMs);
  if (expiration !== undefined) out.expirationMs = expiration;
  return out;
}

/** The wire message of a publish. */
export function encodeMessage(routingKey: string, body: Body, options: PublishOptions = {}): quorumq.v1.Message.$Properties {
  const headers = options.properties?.headers === undefined && options.headers === undefined
    ? {}
    : encodeHeaders({ ...options.properties?.headers, ...options.headers });
  const message: quorumq.v1.Message.$Properties = {
    body: toBuffer(body),
    routingKey,
    properties: encodeProperties(options.properties),
    headers,
  };
  const delay = nonNegative('delayMs', options.delayMs);
  if (delay !== undefined) message.delayMs = delay;
  if (options.notBefore !== undefined) message.notBeforeMs = options.notBefore instanceof Date ? options.notBefore.getTime() : options.notBefore;
  if (options.tombstone === true) message.tombstone = true;
  if (options.deaths !== undefined && options.deaths.length > 0) {
    const records = options.deaths.map((d) => ({
      ...d,
      firstTime: d.firstTime.getTime(),
      lastTime: d.lastTime.getTime(),
      originalExpirationMs: d.originalExpirationMs ?? null,
    }));
    Object.assign(message, deathsToWire({ records, first: options.firstDeath ?? null, last: options.lastDeath ?? null }));
  }
  return message;
}

/** The wire request of a publish (`publishId` is filled by the caller). */
export function encodePublish(exchange: string, routingKey: string, body: Body, options: PublishOptions = {}): quorumq.v1.PublishRequest.$Properties {
  const request: quorumq.v1.PublishRequest.$Properties = {
    exchange,
    message: encodeMessage(routingKey, body, options),
    mandatory: options.mandatory ?? false,
  };
  if (options.producerId !== undefined) request.producerId = options.producerId;
  if (options.sequence !== undefined) request.sequence = toWireInt64(options.sequence);
  return request;
}

function nonEmpty(value: string | null | undefined): string | undefined {
  return value === null || value === undefined || value === '' ? undefined : value;
}

function present(value: unknown): boolean {
  return value !== null && value !== undefined;
}

export function decodeProperties(p: quorumq.v1.Properties.$Properties | null | undefined): ReceivedProperties {
  if (p === null || p === undefined) return {};
  const out: {
    -readonly [K in keyof ReceivedProperties]: ReceivedProperties[K];
  } = {};
  const strings = ['contentType', 'contentEncoding', 'messageId', 'correlationId', 'replyTo', 'type', 'appId', 'userId'] as const;
  for (const key of strings) {
    const value = nonEmpty(p[key]);
    if (value !== undefined) out[key] = value;
  }
  if (present(p.timestampMs)) out.timestamp = new Date(wireNumber(p.timestampMs));
  if (present(p.priority)) out.priority = p.priority ?? 0;
  if (present(p.expirationMs)) out.expirationMs = wireNumber(p.expirationMs);
  return out;
}

/** A message's death records as the SDK shows them (times as Dates); none when it has none. */
function decodeDeaths(m: quorumq.v1.Message.$Properties | null | undefined): Pick<ReceivedMessage, 'deaths' | 'firstDeath' | 'lastDeath'> {
  const deaths = deathsFromWire(m);
  if (deaths === null) return { deaths: [] };
  return {
    deaths: deaths.records.map((r) => ({
      queue: r.queue,
      reason: r.reason,
      count: r.count,
      exchange: r.exchange,
      routingKeys: r.routingKeys,
      firstTime: new Date(r.firstTime),
      lastTime: new Date(r.lastTime),
      ...(r.originalExpirationMs === null ? {} : { originalExpirationMs: r.originalExpirationMs }),
    })),
    firstDeath: deaths.first,
    lastDeath: deaths.last,
  };
}

export function decodeMessage(m: quorumq.v1.Message.$Properties | null | undefined): ReceivedMessage {
  const body = m?.body ?? new Uint8Array(0);
  return {
    body: Buffer.isBuffer(body) ? body : Buffer.from(body.buffer, body.byteOffset, body.byteLength),
    routingKey: m?.routingKey ?? '',
    properties: decodeProperties(m?.properties),
    headers: decodeHeaders(m?.headers),
    ...decodeDeaths(m),
    ...(m?.tombstone === true ? { tombstone: true as const } : {}),
  };
}
