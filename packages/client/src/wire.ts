// The publish stream's batches, sized and written by hand: each message is encoded once, when
// it is published, and its bytes are copied once into every batch that carries it (the first
// send and any re-send after a failover).
import {
  bytesFieldBytes,
  quorumq,
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
  /** The encoded quorumq.v1.Message. */
  readonly message: Uint8Array;
}

const PUBLISH_ID = 0x08;
const EXCHANGE = 0x12;
const MESSAGE = 0x1a;
const MANDATORY = 0x20;
const PRODUCER_ID = 0x2a;
const SEQUENCE = 0x30;
const BATCH_PUBLISH = 0x0a;

export function encodeMessageBytes(message: quorumq.v1.Message.$Properties): Uint8Array {
  return quorumq.v1.Message.encode(message).finish();
}

function publishBytes(p: OutgoingPublish): number {
  return (
    varintFieldBytes(p.publishId) +
    stringFieldBytes(p.exchange) +
    bytesFieldBytes(p.message.byteLength) +
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
    at = writeBytesField(out, at, MESSAGE, p.message);
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
