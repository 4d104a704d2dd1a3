/**
 * The hot-path encodings, read with protobufjs's Reader and written field by field, so that
 * a published message's bytes travel from the client into the log, the followers and the
 * snapshots without being decoded and encoded again:
 *
 * - A publish request's `message` is kept as the bytes the client sent (`rawMessageOf`).
 * - A queue entry (replicated.proto `QueueEntry`) embeds those bytes as its `message` field.
 * - A replica stores each message as those bytes and decodes them only when it hands the
 *   message out (the leader, at delivery).
 * - A queue snapshot (`QueueSnapshot`) embeds them again.
 *
 * The bytes are the same protobuf the generated code reads and writes: an embedded message
 * and a `bytes` field are the same on the wire.
 */
import {
  bytesFieldBytes,
  Reader,
  quorumq,
  stringFieldBytes,
  varintBytes,
  varintFieldBytes,
  writeBytesField,
  writeStringField,
  writeVarint,
  writeVarintField,
} from '@quorumq/proto';
import type { Command } from '@quorumq/queue';

import { DEFAULTS } from './config.js';
import { checkMessageBytes, checkPublishCount, type RequestLimits } from './request-limits.js';

import pb = quorumq.v1;

/** The leader clock prefix of every queue entry. */
export const ENTRY_CLOCK_BYTES = 8;

const WIRE_VARINT = 0;
const WIRE_LENGTH_DELIMITED = 2;
const tag = (field: number, wire: number): number => (field << 3) | wire;

const QUEUE_ENTRY_COMMAND = tag(2, WIRE_LENGTH_DELIMITED);
const QUEUE_ENTRY_MESSAGE = tag(3, WIRE_LENGTH_DELIMITED);
const QUEUE_ENTRY_BATCH = tag(4, WIRE_LENGTH_DELIMITED);
const SNAPSHOT_MACHINE = tag(1, WIRE_LENGTH_DELIMITED);
const SNAPSHOT_MESSAGE = tag(2, WIRE_LENGTH_DELIMITED);
const STORED_ID = tag(1, WIRE_VARINT);
const STORED_MESSAGE = tag(2, WIRE_LENGTH_DELIMITED);
const BATCH_PUBLISH = tag(1, WIRE_LENGTH_DELIMITED);
const PUBLISH_MESSAGE = tag(3, WIRE_LENGTH_DELIMITED);

const asBuffer = (bytes: Uint8Array): Buffer =>
  Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);

// ------------------------------------------------------------------------------------
// Queue entries

/** Commands of the entries this node encoded: applying its own proposals parses no JSON. */
const encodedCommands = new WeakMap<Uint8Array, Command | readonly Command[]>();

/** One command of an entry, with its message (encoded, or to encode). */
export interface EntryCommand {
  readonly command: Command;
  readonly message: pb.Message.$Properties | Uint8Array | null;
}

/** A command's JSON and its message's bytes, sized. */
interface SizedCommand {
  readonly json: string;
  readonly jsonBytes: number;
  readonly body: Uint8Array | null;
  /** Bytes of the QueueEntry holding the two. */
  readonly size: number;
}

function sizeCommand({ command, message }: EntryCommand): SizedCommand {
  // Queue commands hold only strings, numbers, booleans and arrays: plain JSON is exact.
  const json = JSON.stringify(command);
  const jsonBytes = Buffer.byteLength(json, 'utf8');
  const body = message === null ? null : message instanceof Uint8Array ? message : pb.Message.encode(message).finish();
  return { json, jsonBytes, body, size: bytesFieldBytes(jsonBytes) + (body === null ? 0 : bytesFieldBytes(body.byteLength)) };
}

function writeCommand(out: Buffer, at: number, sized: SizedCommand): number {
  out[at++] = QUEUE_ENTRY_COMMAND;
  at = writeVarint(out, at, sized.jsonBytes);
  at += out.write(sized.json, at, sized.jsonBytes, 'utf8');
  return sized.body === null ? at : writeBytesField(out, at, QUEUE_ENTRY_MESSAGE, sized.body);
}

/**
 * Encodes a queue entry: the clock prefix, then `QueueEntry { command (JSON), message }`.
 * `message` is either an encoded Message (carried as is) or one to encode.
 */
export function encodeQueueEntry(command: Command, message: pb.Message.$Properties | Uint8Array | null, now = 0): Uint8Array {
  const sized = sizeCommand({ command, message });
  const out = Buffer.allocUnsafe(ENTRY_CLOCK_BYTES + sized.size);
  out.writeDoubleLE(now, 0);
  const end = writeCommand(out, ENTRY_CLOCK_BYTES, sized);
  if (end !== out.byteLength) throw new Error(`queue entry encoded to ${end} bytes, sized ${out.byteLength}`);
  encodedCommands.set(out, command);
  return out;
}

/**
 * Encodes several commands as one entry: the clock prefix, then `QueueEntry { batch: [...] }`.
 * Every message's bytes are copied once, into this entry.
 */
export function encodeQueueBatch(commands: readonly EntryCommand[], now = 0): Uint8Array {
  const sized = commands.map(sizeCommand);
  let size = ENTRY_CLOCK_BYTES;
  for (const s of sized) size += bytesFieldBytes(s.size);
  const out = Buffer.allocUnsafe(size);
  out.writeDoubleLE(now, 0);
  let at = ENTRY_CLOCK_BYTES;
  for (const s of sized) {
    out[at++] = QUEUE_ENTRY_BATCH;
    at = writeVarint(out, at, s.size);
    at = writeCommand(out, at, s);
  }
  if (at !== size) throw new Error(`queue batch encoded to ${at} bytes, sized ${size}`);
  encodedCommands.set(
    out,
    commands.map((c) => c.command),
  );
  return out;
}

/** Stamps the leader's clock into an encoded entry, in place. */
export function stampEntry(data: Uint8Array, now: number): void {
  asBuffer(data).writeDoubleLE(now, 0);
}

export interface DecodedCommand {
  readonly command: Command;
  /** The encoded Message (a view into the entry), or null. */
  readonly message: Uint8Array | null;
}

export interface DecodedQueueEntry {
  readonly now: number;
  /** The entry's commands in order: one, or a batch's. */
  readonly commands: readonly DecodedCommand[];
  /** Whether the entry is a batch (its commands' replies go back as a list). */
  readonly batch: boolean;
}

/** Reads one QueueEntry's command and message up to `end`; `known` skips the JSON. */
function readCommand(reader: Reader, end: number, known: Command | undefined): DecodedCommand {
  let command: string | null = null;
  let message: Uint8Array | null = null;
  while (reader.pos < end) {
    const t = reader.uint32();
    if (t === QUEUE_ENTRY_COMMAND) {
      if (known === undefined) command = reader.string();
      else reader.skipType(WIRE_LENGTH_DELIMITED);
    } else if (t === QUEUE_ENTRY_MESSAGE) message = reader.bytes();
    else if (t === QUEUE_ENTRY_BATCH) throw new Error('a batched queue entry holds a batch');
    else reader.skipType(t & 7);
  }
  if (reader.pos !== end) throw new Error('queue entry field past its end');
  if (known !== undefined) return { command: known, message };
  if (command === null) throw new Error('queue entry without a command');
  return { command: JSON.parse(command) as Command, message };
}

/** Decodes an entry; messages stay encoded. Throws on malformed bytes. */
export function decodeQueueEntry(data: Uint8Array): DecodedQueueEntry {
  if (data.byteLength < ENTRY_CLOCK_BYTES) throw new Error('queue entry too short');
  const buf = asBuffer(data);
  const now = buf.readDoubleLE(0);
  const reader = Reader.create(buf.subarray(ENTRY_CLOCK_BYTES));
  const known = encodedCommands.get(data);
  // A batch's elements come first: a batch entry has no top-level command.
  if (reader.len > 0 && reader.buf[0] === QUEUE_ENTRY_BATCH) {
    const knownBatch = Array.isArray(known) ? (known as readonly Command[]) : undefined;
    const commands: DecodedCommand[] = [];
    while (reader.pos < reader.len) {
      const t = reader.uint32();
      if (t !== QUEUE_ENTRY_BATCH) throw new Error('a batch entry with a field other than its batch');
      const end = reader.uint32() + reader.pos;
      if (end > reader.len) throw new Error('queue batch element past the end');
      commands.push(readCommand(reader, end, knownBatch?.[commands.length]));
    }
    return { now, commands, batch: true };
  }
  const single = readCommand(reader, reader.len, Array.isArray(known) ? undefined : (known as Command | undefined));
  return { now, commands: [single], batch: false };
}

// ------------------------------------------------------------------------------------
// Queue snapshots

export interface DecodedQueueSnapshot {
  readonly machine: Uint8Array;
  /** Message id -> encoded Message (copies: they do not hold the snapshot's buffer). */
  readonly messages: Map<number, Uint8Array>;
}

/**
 * `QueueSnapshot { machine, messages: [StoredMessage { id, message }] }`, sized first and
 * written into one buffer (a snapshot holds every live message).
 */
export function encodeQueueSnapshot(machine: Uint8Array, messages: ReadonlyArray<readonly [number, Uint8Array]>): Uint8Array {
  let size = bytesFieldBytes(machine.byteLength);
  const storedSizes = new Array<number>(messages.length);
  for (let i = 0; i < messages.length; i++) {
    const [id, message] = messages[i]!;
    const stored = 1 + varintBytes(id) + bytesFieldBytes(message.byteLength);
    storedSizes[i] = stored;
    size += bytesFieldBytes(stored);
  }
  const out = Buffer.allocUnsafe(size);
  let at = writeBytesField(out, 0, SNAPSHOT_MACHINE, machine);
  for (let i = 0; i < messages.length; i++) {
    const [id, message] = messages[i]!;
    out[at++] = SNAPSHOT_MESSAGE;
    at = writeVarint(out, at, storedSizes[i]!);
    out[at++] = STORED_ID;
    at = writeVarint(out, at, id);
    at = writeBytesField(out, at, STORED_MESSAGE, message);
  }
  if (at !== size) throw new Error(`queue snapshot encoded to ${at} bytes, sized ${size}`);
  return out;
}

export function decodeQueueSnapshot(data: Uint8Array): DecodedQueueSnapshot {
  const reader = Reader.create(data);
  let machine: Uint8Array = new Uint8Array(0);
  const messages = new Map<number, Uint8Array>();
  while (reader.pos < reader.len) {
    const t = reader.uint32();
    if (t === SNAPSHOT_MACHINE) {
      machine = reader.bytes();
    } else if (t === SNAPSHOT_MESSAGE) {
      const end = reader.uint32() + reader.pos;
      let id = 0;
      let message: Uint8Array | null = null;
      while (reader.pos < end) {
        const s = reader.uint32();
        if (s === STORED_ID) id = Number(reader.uint64());
        else if (s === STORED_MESSAGE) message = Buffer.from(reader.bytes());
        else reader.skipType(s & 7);
      }
      if (message !== null) messages.set(id, message);
    } else {
      reader.skipType(t & 7);
    }
  }
  return { machine, messages };
}

// ------------------------------------------------------------------------------------
// Publish requests: keep the client's encoded message

const rawMessages = new WeakMap<object, Uint8Array>();

/** The bytes the client sent for this decoded message, if it arrived in a publish. */
export function rawMessageOf(message: pb.Message.$Properties): Uint8Array | undefined {
  return rawMessages.get(message);
}

const PUBLISH_ID = tag(1, WIRE_VARINT);
const PUBLISH_EXCHANGE = tag(2, WIRE_LENGTH_DELIMITED);
const PUBLISH_MANDATORY = tag(4, WIRE_VARINT);
const PUBLISH_PRODUCER_ID = tag(5, WIRE_LENGTH_DELIMITED);
const PUBLISH_SEQUENCE = tag(6, WIRE_VARINT);

/**
 * Reads a PublishRequest field by field, as the generated code would, keeping the bytes of
 * its message (`rawMessageOf`). A message field sent twice merges on decode: that request
 * goes to the generated code and keeps no bytes. Each message's headers are checked against
 * `limits` before the message is decoded.
 */
function readPublish(bytes: Uint8Array, limits: RequestLimits): pb.PublishRequest {
  const reader = Reader.create(bytes);
  const request = new pb.PublishRequest();
  let raw: Uint8Array | null = null;
  while (reader.pos < reader.len) {
    const t = reader.uint32();
    switch (t) {
      case PUBLISH_ID:
        request.publishId = Number(reader.uint64());
        break;
      case PUBLISH_EXCHANGE:
        request.exchange = reader.string();
        break;
      case PUBLISH_MESSAGE: {
        const message = reader.bytes();
        checkMessageBytes(message, limits);
        if (raw !== null) return decodeMerged(bytes, reader, limits);
        raw = message;
        break;
      }
      case PUBLISH_MANDATORY:
        request.mandatory = reader.bool();
        break;
      case PUBLISH_PRODUCER_ID:
        request.producerId = reader.string();
        break;
      case PUBLISH_SEQUENCE:
        request.sequence = Number(reader.uint64());
        break;
      default:
        reader.skipType(t & 7);
    }
  }
  if (raw !== null) {
    const message = pb.Message.decode(raw);
    request.message = message;
    rawMessages.set(message, raw);
  }
  return request;
}

/** A request with its message field sent more than once: the rest checked, then the generated code. */
function decodeMerged(bytes: Uint8Array, reader: Reader, limits: RequestLimits): pb.PublishRequest {
  while (reader.pos < reader.len) {
    const t = reader.uint32();
    if (t === PUBLISH_MESSAGE) checkMessageBytes(reader.bytes(), limits);
    else reader.skipType(t & 7);
  }
  return pb.PublishRequest.decode(bytes);
}

/** grpc-js deserializer of the unary Publish request; throws a BrokerError beyond `limits`. */
export function decodePublishRequest(bytes: Buffer, limits: RequestLimits = DEFAULTS): pb.PublishRequest {
  return readPublish(bytes, limits);
}

/**
 * grpc-js deserializer of PublishStream's batches. The publishes are counted before any is
 * decoded: a batch of more than `maxPublishesPerBatch` is refused whole (a BrokerError).
 */
export function decodePublishBatch(bytes: Buffer, limits: RequestLimits = DEFAULTS): pb.PublishBatch {
  checkPublishCount(bytes, limits);
  const batch = new pb.PublishBatch();
  const reader = Reader.create(bytes);
  while (reader.pos < reader.len) {
    const t = reader.uint32();
    if (t === BATCH_PUBLISH) batch.publishes.push(readPublish(reader.bytes(), limits));
    else reader.skipType(t & 7);
  }
  return batch;
}

// ------------------------------------------------------------------------------------
// Deliveries: the stored bytes go out as the delivery's message

/** A delivery whose message may still be the stored bytes (`encodedMessage`, then `message` is unset). */
export interface OutgoingDelivery extends pb.Delivery.$Properties {
  readonly encodedMessage?: Uint8Array;
}

const RESPONSE_DELIVERY = tag(2, WIRE_LENGTH_DELIMITED);
const RESPONSE_DELIVERIES = tag(4, WIRE_LENGTH_DELIMITED);
const BATCH_DELIVERY = tag(1, WIRE_LENGTH_DELIMITED);
const DELIVERY_MESSAGE = tag(8, WIRE_LENGTH_DELIMITED);

const DELIVERY_QUEUE = tag(1, WIRE_LENGTH_DELIMITED);
const DELIVERY_CONSUMER_TAG = tag(2, WIRE_LENGTH_DELIMITED);
const DELIVERY_TAG = tag(3, WIRE_VARINT);
const DELIVERY_COUNT = tag(4, WIRE_VARINT);
const DELIVERY_REDELIVERED = tag(5, WIRE_VARINT);
const DELIVERY_EXCHANGE = tag(6, WIRE_LENGTH_DELIMITED);
const DELIVERY_ROUTING_KEY = tag(7, WIRE_LENGTH_DELIMITED);

/** A delivery's size, and its bytes when it is not written field by field (a decoded message). */
function sizeDelivery(delivery: OutgoingDelivery): { size: number; bytes: Uint8Array | null } {
  if (delivery.encodedMessage === undefined || delivery.message != null) {
    const bytes = pb.Delivery.encode(delivery).finish();
    return { size: bytes.byteLength, bytes };
  }
  let size =
    stringFieldBytes(delivery.queue) +
    stringFieldBytes(delivery.consumerTag) +
    varintFieldBytes(delivery.deliveryTag) +
    varintFieldBytes(delivery.deliveryCount) +
    (delivery.redelivered === true ? 2 : 0) +
    stringFieldBytes(delivery.exchange) +
    1 +
    varintBytes(delivery.encodedMessage.byteLength) +
    delivery.encodedMessage.byteLength;
  for (const key of delivery.routingKeys ?? []) size += 1 + varintBytes(Buffer.byteLength(key, 'utf8')) + Buffer.byteLength(key, 'utf8');
  return { size, bytes: null };
}

function writeDeliveryAt(out: Buffer, at: number, delivery: OutgoingDelivery, size: number, bytes: Uint8Array | null): number {
  at = writeVarint(out, at, size);
  if (bytes !== null) {
    out.set(bytes, at);
    return at + bytes.byteLength;
  }
  at = writeStringField(out, at, DELIVERY_QUEUE, delivery.queue);
  at = writeStringField(out, at, DELIVERY_CONSUMER_TAG, delivery.consumerTag);
  at = writeVarintField(out, at, DELIVERY_TAG, delivery.deliveryTag);
  at = writeVarintField(out, at, DELIVERY_COUNT, delivery.deliveryCount);
  if (delivery.redelivered === true) {
    out[at++] = DELIVERY_REDELIVERED;
    out[at++] = 1;
  }
  at = writeStringField(out, at, DELIVERY_EXCHANGE, delivery.exchange);
  for (const key of delivery.routingKeys ?? []) {
    // Every routing key is written, the empty one too (a repeated field keeps its elements).
    out[at++] = DELIVERY_ROUTING_KEY;
    const length = Buffer.byteLength(key, 'utf8');
    at = writeVarint(out, at, length);
    at += out.write(key, at, length, 'utf8');
  }
  const message = delivery.encodedMessage!;
  out[at++] = DELIVERY_MESSAGE;
  at = writeVarint(out, at, message.byteLength);
  out.set(message, at);
  return at + message.byteLength;
}

/**
 * grpc-js serializer of Consume's responses: deliveries are sized and written field by field
 * into one buffer, their stored message bytes copied in once.
 */
export function encodeConsumeResponse(response: pb.ConsumeResponse.$Properties): Buffer {
  const batch = response.deliveries != null ? (response.deliveries.deliveries ?? []) : response.delivery != null ? [response.delivery] : null;
  if (batch === null) return asBuffer(pb.ConsumeResponse.encode(response).finish());
  const sized = batch.map(sizeDelivery);
  let inner = 0;
  for (const { size } of sized) inner += response.deliveries != null ? 1 + varintBytes(size) + size : varintBytes(size) + size;
  const out = Buffer.allocUnsafe(1 + (response.deliveries != null ? varintBytes(inner) : 0) + inner);
  let at = 0;
  if (response.deliveries != null) {
    out[at++] = RESPONSE_DELIVERIES;
    at = writeVarint(out, at, inner);
    for (let i = 0; i < batch.length; i++) {
      out[at++] = BATCH_DELIVERY;
      at = writeDeliveryAt(out, at, batch[i]!, sized[i]!.size, sized[i]!.bytes);
    }
  } else {
    out[at++] = RESPONSE_DELIVERY;
    at = writeDeliveryAt(out, at, batch[0]!, sized[0]!.size, sized[0]!.bytes);
  }
  if (at !== out.byteLength) throw new Error(`consume response encoded to ${at} bytes, sized ${out.byteLength}`);
  return out;
}

// ------------------------------------------------------------------------------------
// Publish outcomes: one per publish, written field by field

const OUTCOMES_OUTCOME = tag(1, WIRE_LENGTH_DELIMITED);
const OUTCOME_PUBLISH_ID = tag(1, WIRE_VARINT);
const OUTCOME_OUTCOME = tag(2, WIRE_VARINT);
const OUTCOME_REASON = tag(3, WIRE_LENGTH_DELIMITED);
const OUTCOME_QUEUES = tag(5, WIRE_LENGTH_DELIMITED);
const OUTCOME_STATUS_CODE = tag(6, WIRE_VARINT);

function sizeOutcome(outcome: pb.PublishResponse.$Properties): number {
  let size =
    varintFieldBytes(Number(outcome.publishId ?? 0)) +
    varintFieldBytes(outcome.outcome ?? 0) +
    stringFieldBytes(outcome.reason ?? '') +
    varintFieldBytes(outcome.statusCode ?? 0);
  for (const queue of outcome.queues ?? []) {
    const length = Buffer.byteLength(queue, 'utf8');
    size += 1 + varintBytes(length) + length;
  }
  return size;
}

/**
 * grpc-js serializer of PublishStream's responses. An outcome that returns a message (an
 * unroutable mandatory publish) goes through the generated code; the others are written
 * field by field, in field order, as the generated code writes them.
 */
export function encodePublishOutcomes(batch: pb.PublishOutcomes.$Properties): Buffer {
  const outcomes = batch.outcomes ?? [];
  const parts = new Array<Uint8Array | null>(outcomes.length);
  const sizes = new Array<number>(outcomes.length);
  let total = 0;
  for (let i = 0; i < outcomes.length; i++) {
    const outcome = outcomes[i]!;
    const part = outcome.returned != null ? pb.PublishResponse.encode(outcome).finish() : null;
    parts[i] = part;
    sizes[i] = part !== null ? part.byteLength : sizeOutcome(outcome);
    total += bytesFieldBytes(sizes[i]!);
  }
  const out = Buffer.allocUnsafe(total);
  let at = 0;
  for (let i = 0; i < outcomes.length; i++) {
    const outcome = outcomes[i]!;
    out[at++] = OUTCOMES_OUTCOME;
    at = writeVarint(out, at, sizes[i]!);
    const part = parts[i];
    if (part != null) {
      out.set(part, at);
      at += part.byteLength;
      continue;
    }
    at = writeVarintField(out, at, OUTCOME_PUBLISH_ID, Number(outcome.publishId ?? 0));
    at = writeVarintField(out, at, OUTCOME_OUTCOME, outcome.outcome ?? 0);
    at = writeStringField(out, at, OUTCOME_REASON, outcome.reason ?? '');
    for (const queue of outcome.queues ?? []) {
      // Every queue name is written, an empty one too (a repeated field keeps its elements).
      out[at++] = OUTCOME_QUEUES;
      const length = Buffer.byteLength(queue, 'utf8');
      at = writeVarint(out, at, length);
      at += out.write(queue, at, length, 'utf8');
    }
    at = writeVarintField(out, at, OUTCOME_STATUS_CODE, outcome.statusCode ?? 0);
  }
  if (at !== total) throw new Error(`publish outcomes encoded to ${at} bytes, sized ${total}`);
  return out;
}
