/**
 * The node's client-facing codecs, where they differ from the generated code's (the Broker
 * service otherwise (de)serialises with it; server.ts wires these in). A published message's
 * bytes travel from the client into the log and out to consumers without being decoded and
 * encoded again:
 *
 * - Publish requests are read with @quorumq/proto's readPublishBatch / readPublishRequest
 *   (publish.js, the reader twin of the SDK's writer): each message is checked against the
 *   node's limits before it is decoded and kept as the bytes the client sent (rawMessageOf),
 *   which go into the log as they are (log-format.ts).
 * - Deliveries carry the stored bytes as their message (encodeConsumeResponse).
 * - Publish outcomes are written with the generated code: codec-bench.mjs, "node: encode
 *   publish outcomes" (µs per outcome, median): generated 0.08-0.20, the hand-written writer it
 *   replaced 0.13-0.40. The SDK reads them by hand (@quorumq/proto's readPublishOutcomes): in a
 *   warm loop that is level (0.09 against 0.11), but a new publisher at one in flight runs the
 *   generated decoder uncompiled for its first thousand or so outcomes, and its p99 was lower
 *   with the hand reader (docs/architecture.md, "The publish stream's answers read by hand").
 */
import {
  handTags,
  quorumq,
  readPublishBatch,
  readPublishRequest,
  stringFieldBytes,
  varintBytes,
  varintFieldBytes,
  writeStringField,
  writeVarint,
  writeVarintField,
} from '@quorumq/proto';

import { DEFAULTS } from './config.js';
import { checkMessageBytes, checkPublishCount, type RequestLimits } from './request-limits.js';

import pb = quorumq.v1;

/** The bytes the client sent for this decoded message, if it arrived in a publish. */
export { rawMessageOf } from '@quorumq/proto';
/** The log format moved to log-format.ts; node.ts still imports these two from here. */
export { decodeQueueEntry, stampEntry } from './log-format.js';

const asBuffer = (bytes: Uint8Array): Buffer =>
  Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);

// ------------------------------------------------------------------------------------
// Publish requests: keep the client's encoded message

/** grpc-js deserializer of the unary Publish request; throws a BrokerError beyond `limits`. */
export function decodePublishRequest(bytes: Buffer, limits: RequestLimits = DEFAULTS): pb.PublishRequest {
  return readPublishRequest(bytes, (message) => checkMessageBytes(message, limits));
}

/**
 * grpc-js deserializer of PublishStream's batches. The publishes are counted before any is
 * decoded: a batch of more than `maxPublishesPerBatch` is refused whole (a BrokerError); each
 * message's headers are checked against `limits` before it is decoded.
 */
export function decodePublishBatch(bytes: Buffer, limits: RequestLimits = DEFAULTS): pb.PublishBatch {
  checkPublishCount(bytes, limits);
  return readPublishBatch(bytes, (message) => checkMessageBytes(message, limits));
}

// ------------------------------------------------------------------------------------
// Deliveries: the stored bytes go out as the delivery's message

/** A delivery whose message may still be the stored bytes (`encodedMessage`, then `message` is unset). */
export interface OutgoingDelivery extends pb.Delivery.$Properties {
  readonly encodedMessage?: Uint8Array;
}

const RESPONSE_DELIVERY = handTags.ConsumeResponse.delivery;
const RESPONSE_DELIVERIES = handTags.ConsumeResponse.deliveries;
const BATCH_DELIVERY = handTags.DeliveryBatch.deliveries;
const DELIVERY_MESSAGE = handTags.Delivery.message;
const DELIVERY_QUEUE = handTags.Delivery.queue;
const DELIVERY_CONSUMER_TAG = handTags.Delivery.consumerTag;
const DELIVERY_TAG = handTags.Delivery.deliveryTag;
const DELIVERY_COUNT = handTags.Delivery.deliveryCount;
const DELIVERY_REDELIVERED = handTags.Delivery.redelivered;
const DELIVERY_EXCHANGE = handTags.Delivery.exchange;
const DELIVERY_ROUTING_KEY = handTags.Delivery.routingKeys;

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
 *
 * Kept by hand: codec-bench.mjs, "node: encode a delivery batch" (µs per delivery, median):
 * 1.62 with 16-byte bodies, 2.46 with 1 KiB; the generated encoder, which needs the stored
 * message decoded first, 3.33 and 4.43.
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
