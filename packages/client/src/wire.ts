// The publish stream's batches, sized and written by hand. A message is encoded when it is
// published, except for its body: the body's bytes are copied once, straight from the
// caller's buffer into every batch that carries the message (the first send and any re-send
// after a failover). Message.body is field 1, so writing it first and the other fields after
// it is exactly what the generated encoder writes.
import {
  bytesFieldBytes,
  quorumq,
  Reader,
  stringFieldBytes,
  varintBytes,
  varintFieldBytes,
  writeBytesField,
  writeStringField,
  writeVarint,
  writeVarintField,
} from '@quorumq/proto';

/** One publish as it goes on the wire (quorumq.v1.PublishRequest, its message encoded). */
export interface OutgoingPublish {
  readonly publishId: number;
  readonly exchange: string;
  readonly mandatory: boolean;
  readonly producerId: string | undefined;
  readonly sequence: number | undefined;
  /** The message's body (null: none, or empty: no body field). */
  readonly body: Uint8Array | null;
  /** The encoded quorumq.v1.Message without its body (fields 2 and later). */
  readonly rest: Uint8Array;
}

const PUBLISH_ID = 0x08;
const EXCHANGE = 0x12;
const MESSAGE = 0x1a;
const MANDATORY = 0x20;
const PRODUCER_ID = 0x2a;
const SEQUENCE = 0x30;
const BATCH_PUBLISH = 0x0a;

const MESSAGE_BODY = 0x0a;

/** A message's body and the encoding of its other fields, in the form OutgoingPublish holds. */
export interface MessageParts {
  readonly body: Uint8Array | null;
  readonly rest: Uint8Array;
}

/** The rest of a message with only a routing key, by routing key (bounded). */
const plainRests = new Map<string, Uint8Array>();
const PLAIN_RESTS_MAX = 1024;

function isEmpty(value: object | null | undefined): boolean {
  if (value == null) return true;
  for (const _ in value) return false;
  return true;
}

/** Splits a message for the wire: its body, and its other fields encoded once. */
export function messageParts(message: quorumq.v1.Message.$Properties): MessageParts {
  // An empty body is not written (proto3), as the generated encoder does.
  const body = message.body != null && message.body.byteLength > 0 ? message.body : null;
  const plain =
    isEmpty(message.properties) &&
    isEmpty(message.headers) &&
    message.delayMs == null &&
    message.notBeforeMs == null &&
    (message.deaths == null || message.deaths.length === 0) &&
    message.firstDeath == null &&
    message.lastDeath == null;
  if (!plain) return { body, rest: quorumq.v1.Message.encode({ ...message, body: undefined }).finish() };
  // The common message (a body and a routing key): its rest is the same for every publish
  // with that routing key, so it is encoded once.
  const routingKey = message.routingKey ?? '';
  // An empty properties message is still written (as an empty field): it is part of the key.
  const key = (message.properties == null ? '-' : '+') + routingKey;
  let rest = plainRests.get(key);
  if (rest === undefined) {
    rest = quorumq.v1.Message.encode({ routingKey, properties: message.properties }).finish();
    if (plainRests.size >= PLAIN_RESTS_MAX) plainRests.clear();
    plainRests.set(key, rest);
  }
  return { body, rest };
}

function messageBytes(p: OutgoingPublish): number {
  return (p.body === null ? 0 : bytesFieldBytes(p.body.byteLength)) + p.rest.byteLength;
}

function publishBytes(p: OutgoingPublish): number {
  return (
    varintFieldBytes(p.publishId) +
    stringFieldBytes(p.exchange) +
    bytesFieldBytes(messageBytes(p)) +
    (p.mandatory ? 2 : 0) +
    stringFieldBytes(p.producerId) +
    (p.sequence === undefined ? 0 : 1 + varintBytes(p.sequence))
  );
}

/** gRPC serializer of PublishStream's requests: a quorumq.v1.PublishBatch. */
export function encodePublishBatch(publishes: readonly OutgoingPublish[]): Buffer {
  const sizes = publishes.map(publishBytes);
  let total = 0;
  for (const size of sizes) total += bytesFieldBytes(size);
  const out = Buffer.allocUnsafe(total);
  let at = 0;
  for (let i = 0; i < publishes.length; i++) {
    const p = publishes[i]!;
    out[at++] = BATCH_PUBLISH;
    at = writeVarint(out, at, sizes[i]!);
    at = writeVarintField(out, at, PUBLISH_ID, p.publishId);
    at = writeStringField(out, at, EXCHANGE, p.exchange);
    out[at++] = MESSAGE;
    at = writeVarint(out, at, messageBytes(p));
    if (p.body !== null) at = writeBytesField(out, at, MESSAGE_BODY, p.body);
    out.set(p.rest, at);
    at += p.rest.byteLength;
    if (p.mandatory) {
      out[at++] = MANDATORY;
      out[at++] = 1;
    }
    at = writeStringField(out, at, PRODUCER_ID, p.producerId);
    if (p.sequence !== undefined) {
      out[at++] = SEQUENCE;
      at = writeVarint(out, at, p.sequence);
    }
  }
  if (at !== total) throw new Error(`publish batch encoded to ${at} bytes, sized ${total}`);
  return out;
}

// ------------------------------------------------------------------------------------
// Publish outcomes

/** One PublishResponse as the publisher reads it. */
export interface PublishOutcomeWire extends quorumq.v1.PublishResponse.$Properties {
  publishId: number;
  outcome: quorumq.v1.PublishOutcome;
  reason: string;
  queues: string[];
  statusCode: number;
  returned: quorumq.v1.Message | null;
}

const OUTCOMES_OUTCOME = 0x0a;
const OUTCOME_PUBLISH_ID = 0x08;
const OUTCOME_OUTCOME = 0x10;
const OUTCOME_REASON = 0x1a;
const OUTCOME_RETURNED = 0x22;
const OUTCOME_QUEUES = 0x2a;
const OUTCOME_STATUS_CODE = 0x30;

/**
 * gRPC deserializer of PublishStream's responses (a quorumq.v1.PublishOutcomes), read field by
 * field: publish ids as numbers, unknown fields skipped, a returned message decoded.
 */
export function decodePublishOutcomes(bytes: Buffer): PublishOutcomeWire[] {
  const outcomes: PublishOutcomeWire[] = [];
  const reader = Reader.create(bytes);
  while (reader.pos < reader.len) {
    const t = reader.uint32();
    if (t !== OUTCOMES_OUTCOME) {
      reader.skipType(t & 7);
      continue;
    }
    const end = reader.uint32() + reader.pos;
    if (end > reader.len) throw new RangeError('publish outcome: length past the end');
    const outcome: PublishOutcomeWire = { publishId: 0, outcome: 0, reason: '', queues: [], statusCode: 0, returned: null };
    while (reader.pos < end) {
      const f = reader.uint32();
      switch (f) {
        case OUTCOME_PUBLISH_ID:
          outcome.publishId = Number(reader.uint64());
          break;
        case OUTCOME_OUTCOME:
          outcome.outcome = reader.int32();
          break;
        case OUTCOME_REASON:
          outcome.reason = reader.string();
          break;
        case OUTCOME_RETURNED:
          outcome.returned = quorumq.v1.Message.decode(reader.bytes());
          break;
        case OUTCOME_QUEUES:
          outcome.queues.push(reader.string());
          break;
        case OUTCOME_STATUS_CODE:
          outcome.statusCode = reader.uint32();
          break;
        default:
          reader.skipType(f & 7);
      }
    }
    outcomes.push(outcome);
  }
  return outcomes;
}
