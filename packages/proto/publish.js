// PublishBatch, the publish stream's requests, written by the SDK (encodePublishBatch) and
// read by the node (readPublishBatch, readPublishRequest): one layout, in one place, for both
// ends; and PublishOutcomes, the stream's answers, read by the SDK (readPublishOutcomes).
// Both directions are written by hand, for what packages/server/bench/codec-bench.mjs
// measures (figures in the comments below and in docs/architecture.md, "Codecs"):
// - writing, a body is copied once, straight from the caller's buffer into the batch;
// - reading, the node keeps each message as the bytes the client sent (they go into the log
//   unchanged) and checks it against the node's limits before it is decoded.
// The bytes are exactly the generated code's: a test compares them both ways.
import { bytesFieldBytes, stringFieldBytes, varintBytes, varintFieldBytes, writeBytesField, writeStringField, writeVarint, writeVarintField } from './fields.js';
import { quorumq } from './generated/quorumq.js';
import { handTags } from './hand-tags.js';
import { Reader } from './runtime.js';

const pb = quorumq.v1;

const BATCH_PUBLISH = handTags.PublishBatch.publishes;
const PUBLISH_ID = handTags.PublishRequest.publishId;
const EXCHANGE = handTags.PublishRequest.exchange;
const MESSAGE = handTags.PublishRequest.message;
const MANDATORY = handTags.PublishRequest.mandatory;
const PRODUCER_ID = handTags.PublishRequest.producerId;
const SEQUENCE = handTags.PublishRequest.sequence;
const MESSAGE_BODY = handTags.Message.body;
const OUTCOMES_OUTCOME = handTags.PublishOutcomes.outcomes;
const OUTCOME = handTags.PublishResponse;

// ------------------------------------------------------------------------------------
// Writing (the SDK). A message is encoded when it is published, except for its body: the
// body's bytes are copied once, straight from the caller's buffer into every batch that
// carries the message (the first send and any re-send after a failover). Message.body is
// field 1, so writing it first and the other fields after it is exactly what the generated
// encoder writes.
//
// Kept by hand: codec-bench.mjs, "sdk: encode a publish batch" (µs per message, median):
// this writer 0.34 with 16-byte bodies, 1.09 with 1 KiB, 9.1 with 16 KiB; the generated
// encoder 0.67, 2.01, 42. protobufjs's writer grows its buffer by copying it, moves a nested
// message's bytes again once it knows their length, and copies the whole out at the end: a
// body's bytes are copied about four times.

/** The rest of a message with only a routing key, by routing key (bounded). */
const plainRests = new Map();
const PLAIN_RESTS_MAX = 1024;

function isEmpty(value) {
  if (value == null) return true;
  for (const _ in value) return false;
  return true;
}

/** Splits a message for the wire: its body, and its other fields encoded once. */
export function messageParts(message) {
  // An empty body is not written (proto3), as the generated encoder does.
  const body = message.body != null && message.body.byteLength > 0 ? message.body : null;
  const plain =
    isEmpty(message.properties) &&
    isEmpty(message.headers) &&
    message.delayMs == null &&
    message.notBeforeMs == null &&
    (message.deaths == null || message.deaths.length === 0) &&
    message.firstDeath == null &&
    message.lastDeath == null &&
    message.tombstone !== true;
  if (!plain) return { body, rest: pb.Message.encode({ ...message, body: undefined }).finish() };
  // The common message (a body and a routing key): its rest is the same for every publish
  // with that routing key, so it is encoded once.
  const routingKey = message.routingKey ?? '';
  // An empty properties message is still written (as an empty field): it is part of the key.
  const key = (message.properties == null ? '-' : '+') + routingKey;
  let rest = plainRests.get(key);
  if (rest === undefined) {
    rest = pb.Message.encode({ routingKey, properties: message.properties }).finish();
    if (plainRests.size >= PLAIN_RESTS_MAX) plainRests.clear();
    plainRests.set(key, rest);
  }
  return { body, rest };
}

function messageBytes(p) {
  return (p.body === null ? 0 : bytesFieldBytes(p.body.byteLength)) + p.rest.byteLength;
}

function publishBytes(p) {
  return (
    varintFieldBytes(p.publishId) +
    stringFieldBytes(p.exchange) +
    bytesFieldBytes(messageBytes(p)) +
    (p.mandatory ? 2 : 0) +
    stringFieldBytes(p.producerId) +
    (p.sequence === undefined ? 0 : 1 + varintBytes(p.sequence))
  );
}

/** Encodes a PublishBatch (the publish stream's request) into one buffer. */
export function encodePublishBatch(publishes) {
  const sizes = publishes.map(publishBytes);
  let total = 0;
  for (const size of sizes) total += bytesFieldBytes(size);
  const out = Buffer.allocUnsafe(total);
  let at = 0;
  for (let i = 0; i < publishes.length; i++) {
    const p = publishes[i];
    out[at++] = BATCH_PUBLISH;
    at = writeVarint(out, at, sizes[i]);
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
// Reading (the node). Field by field, as the generated code reads them, except that each
// message's bytes are kept (rawMessageOf): the node puts them in the log as they came, where
// the generated code would decode them and the node encode them again. One reader runs over
// the whole batch and decodes each message in place.
//
// Kept by hand: codec-bench.mjs, "node: read a publish batch" (µs per message, median): this
// reader 0.52 with 16-byte bodies, 0.89 with 1 KiB, 1.00 with 16 KiB; the generated decoder
// then an encode of each message for the log 1.04, 4.10, 17.2 (the generated decoder alone,
// which keeps no bytes, 0.36, 0.69, 0.68). The reader before issue 13 took 1.17, 2.35, 2.21:
// it kept the bytes in a WeakMap (about 1.5 µs an entry) and made three Readers a publish.

const RAW = Symbol('quorumq.rawMessage');

/**
 * The bytes the client sent for a message read by readPublishBatch / readPublishRequest;
 * undefined for any other message, a copy of one included.
 */
export function rawMessageOf(message) {
  const raw = message[RAW];
  return raw !== undefined && raw.message === message ? raw.bytes : undefined;
}

/** A field's end, from the length prefix just read; it must lie within `end`. */
function fieldEnd(reader, end) {
  const length = reader.uint32();
  const fieldEnds = reader.pos + length;
  if (fieldEnds > end) throw new RangeError(`index out of range: ${reader.pos} + ${length} > ${end}`);
  return fieldEnds;
}

/**
 * Reads the PublishRequest from `reader.pos` to `end`. `checkMessage` sees each message's
 * bytes before they are decoded (and may throw). A message field sent twice merges on
 * decode (protobuf's rule): that request goes to the generated code and keeps no bytes.
 */
function readRequest(reader, end, checkMessage) {
  const start = reader.pos;
  const request = new pb.PublishRequest();
  let message = null;
  let raw = null;
  while (reader.pos < end) {
    const t = reader.uint32();
    switch (t) {
      case PUBLISH_ID:
        request.publishId = reader.uint64();
        break;
      case EXCHANGE:
        request.exchange = reader.string();
        break;
      case MESSAGE: {
        const messageEnd = fieldEnd(reader, end);
        const bytes = reader.buf.subarray(reader.pos, messageEnd);
        if (checkMessage !== undefined) checkMessage(bytes);
        if (raw !== null) {
          reader.pos = messageEnd;
          return readMerged(reader, start, end, checkMessage);
        }
        message = pb.Message.decode(reader, messageEnd - reader.pos);
        raw = bytes;
        break;
      }
      case MANDATORY:
        request.mandatory = reader.bool();
        break;
      case PRODUCER_ID:
        request.producerId = reader.string();
        break;
      case SEQUENCE:
        request.sequence = reader.uint64();
        break;
      default:
        reader.skipType(t & 7);
    }
  }
  if (reader.pos !== end) throw new RangeError(`index out of range: a field of a publish runs past its end`);
  if (message !== null) {
    message[RAW] = { message, bytes: raw };
    request.message = message;
  }
  return request;
}

/** The rest of a request whose message field came twice: checked, then decoded by the generated code. */
function readMerged(reader, start, end, checkMessage) {
  while (reader.pos < end) {
    const t = reader.uint32();
    if (t === MESSAGE) {
      const messageEnd = fieldEnd(reader, end);
      if (checkMessage !== undefined) checkMessage(reader.buf.subarray(reader.pos, messageEnd));
      reader.pos = messageEnd;
    } else reader.skipType(t & 7);
  }
  return pb.PublishRequest.decode(reader.buf.subarray(start, end));
}

/** Reads a PublishRequest (the unary Publish), keeping its message's bytes. */
export function readPublishRequest(bytes, checkMessage) {
  const reader = Reader.create(bytes);
  return readRequest(reader, reader.len, checkMessage);
}

/** Reads a PublishBatch (the publish stream's request), keeping each message's bytes. */
export function readPublishBatch(bytes, checkMessage) {
  const reader = Reader.create(bytes);
  const batch = new pb.PublishBatch();
  while (reader.pos < reader.len) {
    const t = reader.uint32();
    if (t === BATCH_PUBLISH) {
      const end = fieldEnd(reader, reader.len);
      batch.publishes.push(readRequest(reader, end, checkMessage));
    } else reader.skipType(t & 7);
  }
  return batch;
}

// ------------------------------------------------------------------------------------
// Reading the answers (the SDK). A publisher at one in flight reads one PublishOutcomes per
// publish; in a new process the generated decoder (a large function per message type, run
// through protobufjs's reader for every field) is interpreted for the first thousand or so and
// then compiled while the publisher waits. Read by hand it is a short loop: new publisher
// processes on warm nodes, p99 at one in flight 2.60-3.39 against 2.90-3.59 ms; in run.sh's
// shape 3.28 and 3.32 against 3.51 and 3.69 ms (docs/architecture.md, "The publish stream's
// answers read by hand"). A warm loop shows no difference (codec-bench.mjs: 0.09 against 0.11
// µs an outcome). Unknown fields are skipped as the generated code skips them; a truncated
// field throws. A second `returned` field replaces the first (the generated code merges them;
// a node sends one).

/** Reads one PublishResponse from `reader.pos` to `end`. */
function readOutcome(reader, end) {
  const response = new pb.PublishResponse();
  while (reader.pos < end) {
    const t = reader.uint32();
    switch (t) {
      case OUTCOME.publishId:
        response.publishId = reader.uint64();
        break;
      case OUTCOME.outcome:
        response.outcome = reader.int32();
        break;
      case OUTCOME.reason:
        response.reason = reader.stringVerify();
        break;
      case OUTCOME.returned: {
        // Only an unroutable mandatory publish carries its message back: the generated code.
        const returnedEnd = fieldEnd(reader, end);
        response.returned = pb.Message.decode(reader, returnedEnd - reader.pos);
        break;
      }
      case OUTCOME.queues:
        response.queues.push(reader.stringVerify());
        break;
      case OUTCOME.statusCode:
        response.statusCode = reader.uint32();
        break;
      case OUTCOME.errorReason:
        response.errorReason = reader.stringVerify();
        break;
      case OUTCOME.leader:
        response.leader = reader.stringVerify();
        break;
      default:
        reader.skipType(t & 7);
    }
  }
  if (reader.pos !== end) throw new RangeError('index out of range: a field of a publish outcome runs past its end');
  return response;
}

/** Reads a PublishOutcomes (the publish stream's answer) as the generated code reads it. */
export function readPublishOutcomes(bytes) {
  const reader = Reader.create(bytes);
  const outcomes = new pb.PublishOutcomes();
  while (reader.pos < reader.len) {
    const t = reader.uint32();
    if (t === OUTCOMES_OUTCOME) {
      const end = fieldEnd(reader, reader.len);
      outcomes.outcomes.push(readOutcome(reader, end));
    } else reader.skipType(t & 7);
  }
  return outcomes;
}
