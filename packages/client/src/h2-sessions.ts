/**
 * The SDK's own HTTP/2 connections, one per node address, for its two streams (publish and
 * consume: h2-call.ts). grpc-js's call objects, filters and framing over Node streams cost
 * the SDK's process about as much CPU per message as its own work at one operation in flight,
 * and the broker serves these two methods on node:http2 itself too (the server's
 * served-broker-streams.ts). Unary calls stay on grpc-js's channels (transport.ts).
 *
 * What grpc-js's channel gave the streams, kept here: TLS (the client's CA, certificate and
 * key, the server name to check), a connection counted as up only once the node has spoken
 * HTTP/2 (its SETTINGS) and given up after `connectTimeoutMs`, keepalive PINGs while streams
 * are open (a node that does not answer one within `keepaliveTimeoutMs` is given up, so its
 * streams fail over instead of waiting for ever), 1 MiB flow-control windows, and a new
 * connection when the last one failed.
 */
import http2, { type ClientHttp2Session } from 'node:http2';
import type { ConnectionOptions } from 'node:tls';

import { QuorumqError, SdkReason } from './errors.js';

export interface Http2SessionOptions {
  /** TLS options (CA, certificate and key, `servername`), or null for plaintext. */
  readonly tls: ConnectionOptions | null;
  /** Each stream's and the connection's receive window. */
  readonly windowBytes: number;
  readonly connectTimeoutMs: number;
  /** A PING this often while streams are open; 0 for none. */
  readonly keepaliveMs: number;
  readonly keepaliveTimeoutMs: number;
}

/** One connection and what is known of it. */
interface Connection {
  readonly session: ClientHttp2Session;
  /** The node spoke HTTP/2 (its SETTINGS arrived). */
  ready: boolean;
  /** Why it can no longer carry streams, once it cannot. */
  failure: string | null;
  /** Streams open on it (keepalive and `ref` while there are any). */
  streams: number;
  readonly waiters: Array<{ resolve: () => void; reject: (error: QuorumqError) => void }>;
  keepalive: NodeJS.Timeout | null;
}

export class Http2Sessions {
  private readonly connections = new Map<string, Connection>();
  private closed = false;

  constructor(private readonly options: Http2SessionOptions) {}

  /** Whether a stream opened to `address` now goes out at once. */
  isConnected(address: string): boolean {
    const connection = this.connections.get(address);
    return connection !== undefined && connection.ready && connection.failure === null;
  }

  /**
   * Resolves once the connection to `address` is up (at once when it is); rejects with
   * UNAVAILABLE when it fails or is not up within `connectTimeoutMs` (a paused or hung node's
   * kernel still accepts the TCP connection).
   */
  connected(address: string): Promise<void> {
    let connection: Connection;
    try {
      connection = this.connection(address);
    } catch (error) {
      return Promise.reject(error);
    }
    if (connection.ready) return Promise.resolve();
    return new Promise<void>((resolve, reject) => connection.waiters.push({ resolve, reject }));
  }

  /** The connection to `address`: the open one, or a new one when there is none or it failed. */
  connection(address: string): Connection {
    if (this.closed) throw closedError();
    const known = this.connections.get(address);
    if (known !== undefined && known.failure === null) return known;
    const connection = this.open(address);
    this.connections.set(address, connection);
    return connection;
  }

  /** Counts a stream opened on `connection` until `closed` is called. */
  track(connection: Connection): () => void {
    connection.streams += 1;
    if (connection.streams === 1) {
      connection.session.ref();
      this.startKeepalive(connection);
    }
    let done = false;
    return () => {
      if (done) return;
      done = true;
      connection.streams -= 1;
      if (connection.streams === 0) {
        this.stopKeepalive(connection);
        if (connection.ready && !connection.session.destroyed) connection.session.unref();
      }
    };
  }

  close(): void {
    this.closed = true;
    const closed = closedError();
    for (const connection of this.connections.values()) {
      // Who waits for a connection is told the client closed, not that the node is down.
      for (const waiter of connection.waiters.splice(0)) waiter.reject(closed);
      this.fail(connection, 'the client is closed');
      connection.session.close();
    }
    this.connections.clear();
  }

  private open(address: string): Connection {
    const { tls, windowBytes, connectTimeoutMs } = this.options;
    const session = http2.connect(`${tls === null ? 'http' : 'https'}://${address}`, {
      ...(tls ?? {}),
      settings: { initialWindowSize: windowBytes, enablePush: false },
    });
    const connection: Connection = { session, ready: false, failure: null, streams: 0, waiters: [], keepalive: null };
    // Referenced while it connects (a caller may be waiting for it: `connected`) and while
    // streams are open; an idle connection does not keep the process alive.
    const connectTimer = setTimeout(() => {
      this.fail(connection, `node ${address} did not complete a connection within ${connectTimeoutMs} ms (paused, hung or unreachable)`);
      session.destroy();
    }, connectTimeoutMs);
    connectTimer.unref();
    session.once('remoteSettings', () => {
      clearTimeout(connectTimer);
      if (connection.failure !== null) return;
      try {
        session.setLocalWindowSize(windowBytes);
      } catch {
        // closing already: 'close' follows
      }
      connection.ready = true;
      if (connection.streams === 0) session.unref();
      for (const waiter of connection.waiters.splice(0)) waiter.resolve();
    });
    session.on('error', (error: Error) => this.fail(connection, `node ${address} cannot be connected to: ${error.message}`));
    // A node that goes away (shutting down) takes no new streams; those open end with its status.
    session.on('goaway', () => this.fail(connection, `node ${address} closed the connection`));
    session.on('close', () => {
      clearTimeout(connectTimer);
      this.fail(connection, `connection to node ${address} closed`);
      if (this.connections.get(address) === connection) this.connections.delete(address);
    });
    return connection;
  }

  private fail(connection: Connection, why: string): void {
    if (connection.failure !== null) return;
    connection.failure = why;
    this.stopKeepalive(connection);
    const error = new QuorumqError(why, { code: 'UNAVAILABLE', retriable: true });
    for (const waiter of connection.waiters.splice(0)) waiter.reject(error);
  }

  private startKeepalive(connection: Connection): void {
    const { keepaliveMs, keepaliveTimeoutMs } = this.options;
    if (keepaliveMs <= 0 || connection.keepalive !== null) return;
    connection.keepalive = setInterval(() => {
      if (!connection.ready || connection.failure !== null) return;
      const timer = setTimeout(() => {
        this.fail(connection, `keepalive ping not answered within ${keepaliveTimeoutMs} ms`);
        connection.session.destroy();
      }, keepaliveTimeoutMs);
      timer.unref();
      try {
        connection.session.ping((error) => {
          clearTimeout(timer);
          if (error && !connection.session.destroyed) {
            this.fail(connection, `keepalive ping failed: ${error.message}`);
            connection.session.destroy();
          }
        });
      } catch {
        clearTimeout(timer);
      }
    }, keepaliveMs);
  }

  private stopKeepalive(connection: Connection): void {
    if (connection.keepalive !== null) clearInterval(connection.keepalive);
    connection.keepalive = null;
  }
}

function closedError(): QuorumqError {
  return new QuorumqError('the client is closed', { code: 'CANCELLED', reason: SdkReason.CLIENT_CLOSED, retriable: false });
}

export type { Connection as Http2Connection };
