export { connect, QuorumqClient } from './client.js';
export type {
  Binding,
  BindingInfo,
  ClusterStatus,
  ConsumerInfo,
  ConnectOptions,
  DeclareExchangeOptions,
  DeclareQueueOptions,
  DeclareQueueResult,
  DeleteQueueOptions,
  ExchangeInfo,
  ExchangeType,
  GetOptions,
  MoveOptions,
  MoveProgress,
  NodeStatus,
  Permissions,
  QueueArguments,
  QueueStatus,
  QueueCompactionStatus,
  UserInfo,
  WhoAmI,
} from './client.js';
export { tlsCredentials } from './tls.js';
export type { TlsOptions } from './tls.js';
export { Consumer } from './consumer.js';
export type { ConsumeOptions, ConsumerEvent, DeliveryHandler } from './consumer.js';
export type { AckOptions, Delivery, NackOptions, RejectOptions } from './delivery.js';
export { LEADER_TRAILER, QuorumqError, REASON_TRAILER, STREAM_BROKEN, SdkReason, isRetriable } from './errors.js';
/** Every reason a node sends in `QuorumqError.reason` (the wire contract's list). */
export { Reason } from '@quorumq/proto/errors';
export type { ReasonName } from '@quorumq/proto/errors';
export type { QuorumqErrorInit } from './errors.js';
export { decodeHeaderValue, decodeHeaders, encodeHeaderValue, encodeHeaders } from './headers.js';
export type { DecodedHeaders, HeaderValue, Headers } from './headers.js';
export type {
  Body,
  DeathRecord,
  DeathSummary,
  MessageProperties,
  PublishOptions,
  ReceivedMessage,
  ReceivedProperties,
} from './messages.js';
export { Publisher } from './publisher.js';
export type { PublisherOptions, PublisherPublishOptions } from './publisher.js';
export type { PublishOutcome, PublishResult } from './results.js';
export type { TransportOptions } from './transport.js';
