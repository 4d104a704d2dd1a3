import type { quorumq } from './generated/quorumq.js';

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

/** A message's body and the encoding of its other fields, in the form OutgoingPublish holds. */
export interface MessageParts {
  readonly body: Uint8Array | null;
  readonly rest: Uint8Array;
}

/** Splits a message for the wire: its body, and its other fields encoded once. */
export declare function messageParts(message: quorumq.v1.Message.$Properties): MessageParts;

/** Encodes a PublishBatch (the publish stream's request) into one buffer. */
export declare function encodePublishBatch(publishes: readonly OutgoingPublish[]): Buffer;

/** The bytes the client sent for a message read by readPublishBatch / readPublishRequest, else undefined. */
export declare function rawMessageOf(message: quorumq.v1.Message.$Properties): Uint8Array | undefined;

/** Sees a message's encoded bytes before they are decoded; throws to refuse the request. */
export type MessageCheck = (bytes: Uint8Array) => void;

/** Reads a PublishRequest (the unary Publish), keeping its message's bytes (rawMessageOf). */
export declare function readPublishRequest(bytes: Uint8Array, checkMessage?: MessageCheck): quorumq.v1.PublishRequest;

/** Reads a PublishBatch (the publish stream's request), keeping each message's bytes (rawMessageOf). */
export declare function readPublishBatch(bytes: Uint8Array, checkMessage?: MessageCheck): quorumq.v1.PublishBatch;

/** Reads a PublishOutcomes (the publish stream's answer) as the generated code reads it. */
export declare function readPublishOutcomes(bytes: Uint8Array): quorumq.v1.PublishOutcomes;
