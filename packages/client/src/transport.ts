import { randomUUID } from 'node:crypto';
import * as grpc from '@grpc/grpc-js';
import type { MethodDefinition } from '@grpc/grpc-js';
import { AUTHORIZATION_METADATA, SESSION_METADATA } from '@quorumq/proto/errors';
import { QuorumqError, SdkReason, toQuorumqError } from './errors.js';
import { Http2Call, type DuplexCall } from './h2-call.js';
import { Http2Sessions } from './h2-sessions.js';
import { tlsChannelOptions, tlsConnectionOptions, tlsCredentials, type TlsOptions } from './tls.js';

/** Connection and retry settings shared by every call of a client. */
export interface TransportOptions {
  /** Addresses (host:port) of the broker nodes. At least one. */
  readonly nodes: readonly string[];
  /** Channel credentials; insecure by default (see also `tls`). */
  readonly credentials?: grpc.ChannelCredentials;
  /**
   * A user's name and password, sent with every call (metadata `authorization: Basic ...`)
   * to brokers that require authentication (docs/security.md). Over plaintext they travel
   * in the clear: use TLS beyond loopback.
   */
  readonly auth?: { readonly username: string; readonly password: string };
  /**
   * TLS to the brokers (a broker with `tlsCertFile`): the CA that verifies their
   * certificates, and a client certificate and key (files or PEM Buffers). Instead of
   * `credentials`.
   */
  readonly tls?: TlsOptions;
  /**
   * Extra grpc-js channel options (keepalive, message sizes, ...). The SDK sets
   * `grpc.initial_reconnect_backoff_ms: 200`, `grpc.max_reconnect_backoff_ms: 5000` and
   * `grpc.max_receive_message_length: -1` (no limit: see {@link DEFAULT_CHANNEL_OPTIONS}) unless given.
   */
  readonly channelOptions?: grpc.ClientOptions;
  /**
   * Whether the publish and consume streams go over the SDK's own HTTP/2 connections
   * (node:http2, h2-sessions.ts) instead of grpc-js's channels: less CPU per message and
   * lower latency at few messages in flight (docs/architecture.md, Performance). Default
   * true; always false with `credentials` (grpc-js's own credentials cannot be read). They
   * honour `tls` and these channel options: `grpc.keepalive_time_ms`,
   * `grpc.keepalive_timeout_ms`, `grpc.max_receive_message_length` and
   * `grpc-node.flow_control_window`. Unary calls always use grpc-js.
   */
  readonly nativeStreams?: boolean;
  /** Deadline of one unary attempt on one node. Default 10 000 ms. */
  readonly callTimeoutMs?: number;
  /**
   * How long the SDK waits for a node's connection (TCP, TLS and HTTP/2's handshake) before
   * it tries another node. Default 3 000 ms. A node that is down is passed over at once; this
   * bounds the wait on one that accepts connections but does not answer (a paused or hung
   * process, whose kernel still accepts them).
   */
  readonly connectTimeoutMs?: number;
  /**
   * How long a call (or a stream's reconnection) keeps failing over across nodes before it
   * gives up with the last retriable error. Default 15 000 ms.
   */
  readonly failoverTimeoutMs?: number;
  /** First back-off after every node was tried once; doubles per round. Default 50 ms. */
  readonly initialBackoffMs?: number;
  /** Longest back-off between rounds. Default 1 000 ms. */
  readonly maxBackoffMs?: number;
  /**
   * Send a queue's consume / get to the node leading it, learnt from ClusterStatus,
   * `subscribed` messages and `quorumq-leader` trailers. Default true.
   */
  readonly leaderRouting?: boolean;
  /** Minimum interval between two ClusterStatus refreshes made for routing. Default 1 000 ms. */
  readonly topologyRefreshMs?: number;
  /**
   * How often the client renews its exclusive queues' leases (spec 7: an exclusive queue
   * lives as long as the session that declared it). Default 10 000 ms; keep it well below
   * the brokers' `exclusiveLeaseMs` (default 30 000 ms).
   */
  readonly sessionKeepAliveMs?: number;
}

/**
 * The channel options the SDK sets unless the application gives them.
 *
 * A restarted node is reconnected to within seconds (grpc-js defaults to up to 120 s).
 *
 * The receive limit is off: grpc-js's default (4 MiB) is below what a broker accepts (its
 * `maxMessageBytes`, 16 MiB by default and configurable), and a delivery or a get response
 * carries a whole message plus its envelope, so any fixed limit would refuse messages some
 * broker accepts. The broker bounds what it sends instead: at most `maxMessageBytes` of body
 * plus the envelope per gRPC message. An application that wants a ceiling sets
 * `grpc.max_receive_message_length` itself (then larger messages fail with RESOURCE_EXHAUSTED).
 */
export const DEFAULT_CHANNEL_OPTIONS: Readonly<grpc.ClientOptions> = {
  'grpc.initial_reconnect_backoff_ms': 200,
  'grpc.max_reconnect_backoff_ms': 5_000,
  'grpc.max_receive_message_length': -1,
  // While calls are open, ping the node every second; a node that does not answer within
  // 3 s (paused, hung, cut off without a reset) is given up, so its streams fail over
  // instead of waiting for it for ever. A busy node still answers pings: HTTP/2 acks them.
  'grpc.keepalive_time_ms': 1_000,
  'grpc.keepalive_timeout_ms': 3_000,
  // Deliveries and answers arrive without waiting for HTTP/2 credit: HTTP/2's default window
  // (64 KiB) made a batch of deliveries of 256 KiB cross in four or more exchanges, each a
  // wake-up of both processes. The broker's servers announce the same window to the SDK.
  'grpc-node.flow_control_window': 1024 * 1024,
};


/** Adds the session id, and the user's credentials if any, to every call. */
function callMetadataInterceptor(sessionId: string, authorization: string | null): grpc.Interceptor {
  return (options, nextCall) =>
    new grpc.InterceptingCall(nextCall(options), {
      start: (metadata, listener, next) => {
        metadata.set(SESSION_METADATA, sessionId);
        if (authorization !== null) metadata.set(AUTHORIZATION_METADATA, authorization);
        next(metadata, listener);
      },
    });
}

/** HTTP Basic credentials (RFC 7617), as a broker reads them. */
export function basicAuthorization(username: string, password: string): string {
  if (username === '' || username.includes(':')) throw new TypeError('auth.username must be non-empty and must not contain ":"');
  return `Basic ${Buffer.from(`${username}:${password}`, 'utf8').toString('base64')}`;
}

/** Thrown inside a {@link Transport.withFailover} attempt to stop failing over. */
export class NoFailover {
  constructor(readonly error: QuorumqError) {}
}

/** Whether an error should make the SDK try another node: the node is down or cannot serve. */
export function shouldFailover(error: QuorumqError): boolean {
  return error.code === 'UNAVAILABLE';
}

export const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** One broker connection per node address; failover and the routing cache. */
export class Transport {
  readonly callTimeoutMs: number;
  readonly connectTimeoutMs: number;
  readonly failoverTimeoutMs: number;
  private readonly initialBackoffMs: number;
  private readonly maxBackoffMs: number;
  readonly leaderRouting: boolean;
  readonly topologyRefreshMs: number;
  private readonly credentials: grpc.ChannelCredentials;
  private readonly authorization: string | null;
  private readonly channelOptions: grpc.ClientOptions;
  private readonly addresses: string[];
  private readonly clients = new Map<string, grpc.Client>();
  /** The streams' own connections, when they do not use grpc-js (`nativeStreams`). */
  private readonly sessions: Http2Sessions | null;
  private readonly streamHeaders: Record<string, string>;
  private readonly receiveBytesMax: number;
  private readonly leaders = new Map<string, string>();
  private readonly nodeAddresses = new Map<string, string>();
  private current = 0;
  private closed = false;

  /** This client's session (exclusive queues belong to it). */
  readonly sessionId = randomUUID();

  constructor(options: TransportOptions) {
    if (options.nodes.length === 0) throw new TypeError('connect: at least one node address is required');
    this.addresses = [...new Set(options.nodes)];
    this.authorization = options.auth === undefined ? null : basicAuthorization(options.auth.username, options.auth.password);
    if (options.credentials !== undefined && options.tls !== undefined) throw new TypeError('connect: give credentials or tls, not both');
    this.credentials = options.tls !== undefined ? tlsCredentials(options.tls) : (options.credentials ?? grpc.credentials.createInsecure());
    this.channelOptions = { ...DEFAULT_CHANNEL_OPTIONS, ...tlsChannelOptions(options.tls), ...options.channelOptions };
    this.callTimeoutMs = options.callTimeoutMs ?? 10_000;
    this.connectTimeoutMs = options.connectTimeoutMs ?? 3_000;
    this.failoverTimeoutMs = options.failoverTimeoutMs ?? 15_000;
    this.initialBackoffMs = options.initialBackoffMs ?? 50;
    this.maxBackoffMs = options.maxBackoffMs ?? 1_000;
    this.leaderRouting = options.leaderRouting ?? true;
    this.topologyRefreshMs = options.topologyRefreshMs ?? 1_000;
    const number = (key: string, fallback: number): number => {
      const value = this.channelOptions[key];
      return typeof value === 'number' ? value : fallback;
    };
    this.sessions =
      options.credentials !== undefined || options.nativeStreams === false
        ? null
        : new Http2Sessions({
            tls: options.tls === undefined ? null : tlsConnectionOptions(options.tls),
            windowBytes: number('grpc-node.flow_control_window', 1024 * 1024),
            connectTimeoutMs: this.connectTimeoutMs,
            keepaliveMs: number('grpc.keepalive_time_ms', 0),
            keepaliveTimeoutMs: number('grpc.keepalive_timeout_ms', 20_000),
          });
    const receiveMax = number('grpc.max_receive_message_length', -1);
    this.receiveBytesMax = receiveMax < 0 ? Number.MAX_SAFE_INTEGER : receiveMax;
    this.streamHeaders = {
      'user-agent': 'quorumq-sdk-node',
      [SESSION_METADATA]: this.sessionId,
      ...(this.authorization === null ? {} : { [AUTHORIZATION_METADATA]: this.authorization }),
    };
  }

  get isClosed(): boolean {
    return this.closed;
  }

  /** The configured node addresses. */
  get nodes(): readonly string[] {
    return this.addresses;
  }

  client(address: string): grpc.Client {
    if (this.closed) throw closedError();
    let client = this.clients.get(address);
    if (client === undefined) {
      client = new grpc.Client(address, this.credentials, { ...this.channelOptions, interceptors: [callMetadataInterceptor(this.sessionId, this.authorization)] });
      this.clients.set(address, client);
    }
    return client;
  }

  /** Whether the channel to `address` is connected now (a call made on it is sent at once). */
  isConnected(address: string): boolean {
    return this.client(address).getChannel().getConnectivityState(true) === grpc.connectivityState.READY;
  }

  /**
   * Resolves once the channel to `address` is connected: at once when it is. Rejects with
   * UNAVAILABLE as soon as the connection fails (the node is down: refused, reset), or after
   * `connectTimeoutMs` without one. grpc-js has no connect timeout of its own: a node whose
   * process is paused or hung still has its connections accepted by the kernel but never
   * completes HTTP/2's handshake, and a call made there waits until its deadline (a stream
   * for ever) instead of going to another node. Nothing is sent to the node before this
   * resolves, so another node may be tried without any doubt about the outcome.
   */
  connected(address: string): Promise<void> {
    let channel: ReturnType<grpc.Client['getChannel']>;
    try {
      channel = this.client(address).getChannel();
    } catch (error) {
      return Promise.reject(error);
    }
    const deadline = Date.now() + this.connectTimeoutMs;
    return new Promise<void>((resolve, reject) => {
      const check = (): void => {
        const state = channel.getConnectivityState(true);
        if (state === grpc.connectivityState.READY) {
          resolve();
          return;
        }
        if (state === grpc.connectivityState.TRANSIENT_FAILURE || state === grpc.connectivityState.SHUTDOWN || Date.now() >= deadline) {
          const why = state === grpc.connectivityState.CONNECTING || state === grpc.connectivityState.IDLE
            ? `did not complete a connection within ${this.connectTimeoutMs} ms (paused, hung or unreachable)`
            : 'cannot be connected to (down or refusing connections)';
          reject(new QuorumqError(`node ${address} ${why}`, { code: 'UNAVAILABLE', node: address, retriable: true }));
          return;
        }
        channel.watchConnectivityState(state, deadline, () => check());
      };
      check();
    });
  }

  /** Whether a stream opened to `address` now is sent at once (its connection is up). */
  isStreamConnected(address: string): boolean {
    if (this.sessions === null) return this.isConnected(address);
    if (this.closed) throw closedError();
    return this.sessions.isConnected(address);
  }

  /** `connected` for the connection a stream to `address` goes over. */
  streamConnected(address: string): Promise<void> {
    if (this.sessions === null) return this.connected(address);
    if (this.closed) return Promise.reject(closedError());
    // The sessions' UNAVAILABLE, naming the node (a closed client's CANCELLED as it is).
    return this.sessions.connected(address).catch((error: unknown) => {
      throw error instanceof QuorumqError && error.code === 'UNAVAILABLE' ? new QuorumqError(error.message, { code: 'UNAVAILABLE', node: address, retriable: true, cause: error }) : error;
    });
  }

  /** Opens a bidirectional stream of `method` at `address` (on grpc-js or the SDK's own connection). */
  openStream<Req, Res>(address: string, path: string, serialize: (value: Req) => Buffer, deserialize: (bytes: Buffer) => Res): DuplexCall<Req> {
    if (this.sessions === null) return this.client(address).makeBidiStreamRequest(path, serialize, deserialize);
    if (this.closed) throw closedError();
    return new Http2Call<Req, Res>(this.sessions, { address, path, serialize, deserialize, headers: this.streamHeaders, receiveBytesMax: this.receiveBytesMax });
  }

  /** The node the next call without a better choice goes to. */
  currentAddress(): string {
    return this.addresses[this.current % this.addresses.length] ?? this.addresses[0] ?? '';
  }

  /** Moves the sticky node past `address` after it failed. */
  markFailed(address: string): void {
    if (this.currentAddress() === address) this.current = (this.current + 1) % this.addresses.length;
  }

  /** Makes `address` the sticky node when it is a configured one. */
  markHealthy(address: string): void {
    const index = this.addresses.indexOf(address);
    if (index >= 0) this.current = index;
  }

  /** The cached address of a queue's leader. */
  leaderOf(queue: string): string | undefined {
    return this.leaderRouting ? this.leaders.get(queue) : undefined;
  }

  /** Records that `address` leads `queue` (from a trailer, a subscription, a status). */
  learnLeader(queue: string, leader: string): void {
    const address = this.resolveNode(leader);
    if (address !== undefined) this.leaders.set(queue, address);
  }

  forgetLeader(queue: string, address?: string): void {
    if (address === undefined || this.leaders.get(queue) === address) this.leaders.delete(queue);
  }

  learnNode(id: string, address: string): void {
    if (id !== '' && address !== '') this.nodeAddresses.set(id, address);
  }

  /** A node id or an address → an address (undefined when unknown or empty). */
  resolveNode(idOrAddress: string): string | undefined {
    if (idOrAddress === '') return undefined;
    return this.nodeAddresses.get(idOrAddress) ?? (idOrAddress.includes(':') ? idOrAddress : undefined);
  }

  /** Back-off before attempt `attempt` (0-based), with ±20% jitter. */
  backoff(round: number): number {
    const base = Math.min(this.maxBackoffMs, this.initialBackoffMs * 2 ** Math.min(round, 20));
    return Math.round(base * (0.8 + Math.random() * 0.4));
  }

  /**
   * Runs `attempt` against one node after another until it succeeds, fails with a
   * non-failover error, or `failoverTimeoutMs` passes. A `quorumq-leader` trailer sends the
   * next attempt to that address; `preferred` (e.g. the queue's leader) goes first.
   */
  async withFailover<T>(attempt: (address: string) => Promise<T>, options: { queue?: string; preferred?: string } = {}): Promise<T> {
    const deadline = Date.now() + this.failoverTimeoutMs;
    let hint = options.preferred;
    let tries = 0;
    for (;;) {
      const address = hint ?? this.currentAddress();
      hint = undefined;
      try {
        const result = await attempt(address);
        this.markHealthy(address);
        return result;
      } catch (thrown) {
        if (thrown instanceof NoFailover) throw thrown.error;
        const error = toQuorumqError(thrown, address);
        if (!shouldFailover(error) || this.closed) throw error;
        tries += 1;
        this.markFailed(address);
        if (options.queue !== undefined) this.forgetLeader(options.queue, address);
        if (error.leader !== undefined && error.leader !== address) {
          hint = error.leader;
          if (options.queue !== undefined) this.learnLeader(options.queue, error.leader);
        }
        // A full round over the nodes failed: back off before the next one.
        const wait = tries % this.addresses.length === 0 ? this.backoff(tries / this.addresses.length - 1) : 0;
        if (Date.now() + wait >= deadline) throw error;
        if (wait > 0) await sleep(wait);
      }
    }
  }

  /** One unary call on one node, once connected to it, with the per-attempt deadline. */
  async unaryOn<Req, Res>(address: string, method: MethodDefinition<Req, Res>, request: Req): Promise<Res> {
    if (!this.isConnected(address)) await this.connected(address);
    return new Promise<Res>((resolve, reject) => {
      this.client(address).makeUnaryRequest(
        method.path,
        method.requestSerialize,
        method.responseDeserialize,
        request,
        new grpc.Metadata(),
        { deadline: Date.now() + this.callTimeoutMs },
        (error: grpc.ServiceError | null, response?: Res | null) => {
          if (error !== null) reject(toQuorumqError(error, address));
          else if (response === undefined || response === null) reject(new QuorumqError('empty response', { code: 'INTERNAL', node: address }));
          else resolve(response);
        },
      );
    });
  }

  /** A unary call with failover. */
  unary<Req, Res>(method: MethodDefinition<Req, Res>, request: Req, options: { queue?: string; preferred?: string } = {}): Promise<Res> {
    return this.withFailover((address) => this.unaryOn(address, method, request), options);
  }

  close(): void {
    this.closed = true;
    for (const client of this.clients.values()) client.close();
    this.clients.clear();
    this.sessions?.close();
  }
}

function closedError(): QuorumqError {
  return new QuorumqError('the client is closed', { code: 'CANCELLED', reason: SdkReason.CLIENT_CLOSED, retriable: false });
}
