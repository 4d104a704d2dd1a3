/**
 * Bounds on what one request may expand into. A 16 MB `PublishBatch` of a million tiny
 * publishes decodes into a million request and message objects (gigabytes); a message of a
 * million headers, or of headers nested a thousand deep, the same. These checks read the wire
 * bytes with protobufjs's Reader, skipping over every field they do not count, and throw a
 * BrokerError (`RESOURCE_EXHAUSTED`, naming the limit) before anything is decoded; the
 * deserializers call them first (wire.ts, server.ts).
 */
import { Reader, handTags } from '@quorumq/proto';

import type { NodeConfig } from './config.js';
import { Reason, invalidArgument, resourceExhausted } from './errors.js';

/** The limits of config.ts (documented in docs/configuration.md). */
export type RequestLimits = Pick<
  NodeConfig,
  'maxPublishesPerBatch' | 'maxHeadersPerMessage' | 'maxHeaderDepth' | 'maxHeaderBytes' | 'maxSettlesPerRequest'
>;

const MESSAGE_HEADERS = handTags.Message.headers;
const MESSAGE_DEATHS = handTags.Message.deaths;
const MESSAGE_FIRST_DEATH = handTags.Message.firstDeath;
const MESSAGE_LAST_DEATH = handTags.Message.lastDeath;
const DEATH_ROUTING_KEY = handTags.DeathRecord.routingKeys;
/** A map entry's value (`map<string, HeaderValue>`: message headers, tables, binding arguments). */
const ENTRY_VALUE = handTags['Message.HeadersEntry'].value;
const VALUE_LIST = handTags.HeaderValue.listValue;
const VALUE_MAP = handTags.HeaderValue.mapValue;
/** `HeaderList.values` and `HeaderMap.entries`. */
const LIST_ELEMENT = handTags.HeaderList.values;
const MAP_ELEMENT = handTags.HeaderMap.entries;
const CONSUME_SETTLES = handTags.ConsumeRequest.settles;
const SETTLES_SETTLE = handTags.SettleBatch.settles;
const BATCH_PUBLISHES = handTags.PublishBatch.publishes;
/** Bind's and Unbind's `arguments`: one field number for both (a type error otherwise). */
const BIND_ARGUMENTS: typeof handTags.UnbindRequest.arguments = handTags.BindRequest.arguments;

/** Reads a length prefix; the end of the field it announces, which must lie within `end`. */
function fieldEnd(reader: Reader, end: number): number {
  const length = reader.uint32();
  const fieldEnds = reader.pos + length;
  if (fieldEnds > end) throw invalidArgument('malformed request: a field runs past the end of the message holding it', Reason.MALFORMED_REQUEST);
  return fieldEnds;
}

/** Counts the header values of one message against its limit. */
class HeaderBudget {
  private values = 0;

  constructor(private readonly limits: RequestLimits) {}

  count(): void {
    this.values += 1;
    if (this.values > this.limits.maxHeadersPerMessage) {
      throw resourceExhausted(
        Reason.TOO_MANY_HEADERS,
        `a message carries more than max_headers_per_message (${this.limits.maxHeadersPerMessage}) header values (nested values and death records included)`,
      );
    }
  }

  nested(depth: number): void {
    if (depth > this.limits.maxHeaderDepth) {
      throw resourceExhausted(Reason.HEADERS_TOO_DEEP, `a header value nests tables or arrays deeper than max_header_depth (${this.limits.maxHeaderDepth})`);
    }
  }
}

/** One HeaderValue up to `end`; its list or map elements are at `depth + 1`. */
function scanValue(reader: Reader, end: number, depth: number, budget: HeaderBudget): void {
  while (reader.pos < end) {
    const t = reader.uint32();
    if (t === VALUE_LIST || t === VALUE_MAP) {
      budget.nested(depth + 1);
      const containerEnd = fieldEnd(reader, end);
      while (reader.pos < containerEnd) {
        const e = reader.uint32();
        if (e !== (t === VALUE_LIST ? LIST_ELEMENT : MAP_ELEMENT)) {
          reader.skipType(e & 7);
          continue;
        }
        const elementEnd = fieldEnd(reader, containerEnd);
        if (t === VALUE_LIST) {
          budget.count();
          scanValue(reader, elementEnd, depth + 1, budget);
        } else {
          scanEntry(reader, elementEnd, depth + 1, budget);
        }
      }
    } else {
      reader.skipType(t & 7);
    }
  }
}

/** One `map<string, HeaderValue>` entry (a header, or an element of a table) up to `end`. */
function scanEntry(reader: Reader, end: number, depth: number, budget: HeaderBudget): void {
  budget.count();
  while (reader.pos < end) {
    const t = reader.uint32();
    if (t === ENTRY_VALUE) scanValue(reader, fieldEnd(reader, end), depth, budget);
    else reader.skipType(t & 7);
  }
}

/** One DeathRecord up to `end`: it and each of its routing keys count as a header value. */
function scanDeath(reader: Reader, end: number, budget: HeaderBudget): void {
  budget.count();
  while (reader.pos < end) {
    const t = reader.uint32();
    if (t === DEATH_ROUTING_KEY) budget.count();
    reader.skipType(t & 7);
  }
}

/**
 * Checks an encoded `Message` (a publish's) against the header limits: how many header values
 * (nested ones and death records included), how deep they nest, how many bytes they take.
 */
export function checkMessageBytes(bytes: Uint8Array, limits: RequestLimits): void {
  const reader = Reader.create(bytes);
  const budget = new HeaderBudget(limits);
  let headerBytes = 0;
  while (reader.pos < reader.len) {
    const t = reader.uint32();
    if (t !== MESSAGE_HEADERS && t !== MESSAGE_DEATHS && t !== MESSAGE_FIRST_DEATH && t !== MESSAGE_LAST_DEATH) {
      reader.skipType(t & 7);
      continue;
    }
    const start = reader.pos;
    const end = fieldEnd(reader, reader.len);
    headerBytes += end - start;
    if (headerBytes > limits.maxHeaderBytes) {
      throw resourceExhausted(Reason.HEADERS_TOO_LARGE, `a message's headers and death records exceed max_header_bytes (${limits.maxHeaderBytes} bytes)`);
    }
    if (t === MESSAGE_HEADERS) scanEntry(reader, end, 0, budget);
    else if (t === MESSAGE_DEATHS) scanDeath(reader, end, budget);
    else reader.pos = end;
  }
}

/** How many times field `fieldTag` occurs at the top level of `bytes` (every other field skipped). */
export function countField(bytes: Uint8Array, fieldTag: number): number {
  const reader = Reader.create(bytes);
  let count = 0;
  while (reader.pos < reader.len) {
    const t = reader.uint32();
    if (t === fieldTag) count += 1;
    reader.skipType(t & 7);
  }
  return count;
}

/** Checks a PublishBatch's number of publishes. */
export function checkPublishCount(bytes: Uint8Array, limits: RequestLimits): void {
  const count = countField(bytes, BATCH_PUBLISHES);
  if (count > limits.maxPublishesPerBatch) {
    throw resourceExhausted(
      Reason.BATCH_TOO_LARGE,
      `a publish batch of ${count} publishes exceeds max_publishes_per_batch (${limits.maxPublishesPerBatch}); send it as several batches`,
    );
  }
}

/** Checks a ConsumeRequest's `settles` batch against `maxSettlesPerRequest`. */
export function checkConsumeRequest(bytes: Uint8Array, limits: RequestLimits): void {
  const reader = Reader.create(bytes);
  let count = 0;
  while (reader.pos < reader.len) {
    const t = reader.uint32();
    if (t !== CONSUME_SETTLES) {
      reader.skipType(t & 7);
      continue;
    }
    const end = fieldEnd(reader, reader.len);
    while (reader.pos < end) {
      const s = reader.uint32();
      if (s === SETTLES_SETTLE) count += 1;
      reader.skipType(s & 7);
    }
  }
  if (count > limits.maxSettlesPerRequest) {
    throw resourceExhausted(Reason.BATCH_TOO_LARGE, `a settle batch of ${count} settles exceeds max_settles_per_request (${limits.maxSettlesPerRequest})`);
  }
}

/** Checks the `arguments` (a header table, the same field in both) of a Bind or Unbind request. */
export function checkBindingArguments(bytes: Uint8Array, limits: RequestLimits): void {
  const reader = Reader.create(bytes);
  const budget = new HeaderBudget(limits);
  while (reader.pos < reader.len) {
    const t = reader.uint32();
    if (t === BIND_ARGUMENTS) scanEntry(reader, fieldEnd(reader, reader.len), 0, budget);
    else reader.skipType(t & 7);
  }
}
