// The protobuf tags ((field number << 3) | wire type) the hand-written codecs read and write,
// by message and field (named as the generated classes name them). Every hand-written tag of
// the node and the SDK comes from here, and each is written out by hand on purpose: on every
// `npm run build`, scripts/generate.mjs compares them with the descriptors buf compiles from
// proto/ (tag-check.js) and fails the build on any difference. Renumbering a field, or
// changing its type, breaks stored logs and older peers and clients; the failure makes that
// a decision, taken here, rather than something the hand-written code follows silently.
export const handTags = Object.freeze({
  // replicated.proto: the log format (packages/server/src/log-format.ts)
  QueueEntry: Object.freeze({ command: 0x12, message: 0x1a, batch: 0x22, format: 0x28, queueCommand: 0x32, messageKey: 0x3a }),
  // The cases of QueueCommand's oneof, one per machine command type (a one-command entry's
  // writer, which writes them as varints: see varintTagged).
  QueueCommand: Object.freeze({
    enqueue: 0x0a,
    subscribe: 0x12,
    credit: 0x1a,
    cancel: 0x22,
    consumerDown: 0x2a,
    ack: 0x32,
    return: 0x3a,
    discard: 0x42,
    get: 0x4a,
    purge: 0x52,
    tick: 0x5a,
    deadLetterConfirmed: 0x62,
    declare: 0x6a,
    delete: 0x72,
    sessionEnded: 0x7a,
    moveStart: 0x82,
    moveConfirmed: 0x8a,
    moveFailed: 0x92,
    moveCancel: 0x9a,
  }),
  QueueSnapshot: Object.freeze({ machine: 0x0a, messages: 0x12, storeId: 0x1a, messageIdDeltas: 0x22, recordIdDeltas: 0x2a }),
  StoredMessage: Object.freeze({ id: 0x08, message: 0x12 }),
  // broker.proto: publish batches (publish.js), deliveries (packages/server/src/wire.ts)
  PublishBatch: Object.freeze({ publishes: 0x0a }),
  PublishRequest: Object.freeze({ publishId: 0x08, exchange: 0x12, message: 0x1a, mandatory: 0x20, producerId: 0x2a, sequence: 0x30 }),
  PublishOutcomes: Object.freeze({ outcomes: 0x0a }),
  PublishResponse: Object.freeze({
    publishId: 0x08,
    outcome: 0x10,
    reason: 0x1a,
    returned: 0x22,
    queues: 0x2a,
    statusCode: 0x30,
    errorReason: 0x3a,
    leader: 0x42,
  }),
  ConsumeResponse: Object.freeze({ delivery: 0x12, deliveries: 0x22 }),
  DeliveryBatch: Object.freeze({ deliveries: 0x0a }),
  Delivery: Object.freeze({
    queue: 0x0a,
    consumerTag: 0x12,
    deliveryTag: 0x18,
    deliveryCount: 0x20,
    redelivered: 0x28,
    exchange: 0x32,
    routingKeys: 0x3a,
    message: 0x42,
  }),
  // broker.proto: what the request limits count before decoding (packages/server/src/request-limits.ts)
  Message: Object.freeze({ body: 0x0a, headers: 0x22, deaths: 0x3a, firstDeath: 0x42, lastDeath: 0x4a }),
  // A map<string, HeaderValue> entry's value: the same field in every map (protobuf's map entry).
  'Message.HeadersEntry': Object.freeze({ value: 0x12 }),
  'HeaderMap.EntriesEntry': Object.freeze({ value: 0x12 }),
  'BindRequest.ArgumentsEntry': Object.freeze({ value: 0x12 }),
  HeaderValue: Object.freeze({ listValue: 0x3a, mapValue: 0x42 }),
  HeaderList: Object.freeze({ values: 0x0a }),
  HeaderMap: Object.freeze({ entries: 0x0a }),
  DeathRecord: Object.freeze({ routingKeys: 0x2a }),
  BindRequest: Object.freeze({ arguments: 0x2a }),
  UnbindRequest: Object.freeze({ arguments: 0x2a }),
  ConsumeRequest: Object.freeze({ settles: 0x22 }),
  SettleBatch: Object.freeze({ settles: 0x0a }),
  // raft.proto: appends to peers (packages/server/src/raft-codec.ts)
  RaftBatch: Object.freeze({ messages: 0x0a }),
  RaftMessage: Object.freeze({ groupId: 0x0a, from: 0x12, to: 0x1a, term: 0x20, append: 0x72, appendResponse: 0x7a }),
  AppendResponse: Object.freeze({ reject: 0x08, index: 0x10, hintIndex: 0x18, hintTerm: 0x20 }),
  Append: Object.freeze({ prevLogIndex: 0x08, prevLogTerm: 0x10, entries: 0x1a, commit: 0x20 }),
  Entry: Object.freeze({ index: 0x08, term: 0x10, type: 0x18, data: 0x22 }),
});

/**
 * The messages of `handTags` whose tags are written as varints (protobufjs's `Writer.uint32`),
 * so a tag of two bytes (field 16 and above) is fine; every other hand-written tag is written
 * as one byte, and the build refuses one that takes two (tag-check.js).
 */
export const varintTagged = Object.freeze(new Set(['QueueCommand']));
