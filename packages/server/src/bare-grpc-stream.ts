/**
 * A bidirectional gRPC stream on node:http2 directly, both ends: the node's Raft stream
 * (transport.ts) goes this way instead of through grpc-js.
 *
 * The Raft stream carries every Raft message between two nodes, a batch per event-loop turn.
 * At one operation in flight each operation crosses it twice (the append, the answer), and
 * grpc-js's layers on each end (call objects, filters, its framing over Node streams) cost
 * about as much CPU per message as the node's own work on it. Both ends are nodes, so both
 * are written here: the HTTP/2 request a grpc-js client makes (POST to the method's path,
 * `application/grpc`, `te: trailers`, the metadata as headers, each message with gRPC's
 * 5-byte length prefix) and the answer a grpc-js server gives (headers, then trailers with
 * `grpc-status` and `grpc-message`, or a status alone), so any gRPC client or server is the
 * other end of an ordinary call (the tests use grpc-js's). No compression is offered, so a
 * compressed message is refused. The serving side runs on the listener's HTTP/2 server,
 * grpc-js's (grpc-http2-server.ts), which keeps every other call.
 */
import { EventEmitter } from 'node:events';
import http2, { type ClientHttp2Session, type ClientHttp2Stream, type IncomingHttpHeaders, type ServerHttp2Stream } from 'node:http2';
import { TLSSocket, type ConnectionOptions } from 'node:tls';
import { Metadata, status as Status } from '@grpc/grpc-js';

import { GRPC_FRAME_HEADER_BYTES } from './raft-codec.js';

/** A gRPC status a stream ended with. */
export interface StreamStatus {
  readonly code: number;
  readonly details: string;
}

export const GRPC_CONTENT_TYPE = 'application/grpc';

/**
 * Splits the DATA of a stream into gRPC messages. A message split across chunks is joined;
 * one over `bytesMax`, or a compressed one (no encoding is agreed on this stream), is an
 * error: the stream ends with it.
 */
export class GrpcMessageReader {
  private pending: Buffer[] = [];
  private pendingBytes = 0;
  private need = GRPC_FRAME_HEADER_BYTES;
  private inBody = false;
  private bodyBytes = 0;

  constructor(
    private readonly bytesMax: number,
    private readonly onMessage: (message: Buffer) => void,
    private readonly onProblem: (status: StreamStatus) => void,
  ) {}

  push(chunk: Buffer): void {
    let at = 0;
    while (at < chunk.length) {
      const take = Math.min(this.need - this.pendingBytes, chunk.length - at);
      if (this.pendingBytes === 0 && take === this.need) {
        // The common case: the whole header or body inside this chunk, no copy.
        if (!this.complete(chunk.subarray(at, at + take))) return;
      } else {
        this.pending.push(chunk.subarray(at, at + take));
        this.pendingBytes += take;
        if (this.pendingBytes === this.need) {
          const whole = Buffer.concat(this.pending, this.pendingBytes);
          this.pending = [];
          this.pendingBytes = 0;
          if (!this.complete(whole)) return;
        }
      }
      at += take;
    }
  }

  /** One header or body is whole; false when the stream must end. */
  private complete(bytes: Buffer): boolean {
    if (this.inBody) {
      this.inBody = false;
      this.need = GRPC_FRAME_HEADER_BYTES;
      this.onMessage(bytes);
      return true;
    }
    if (bytes[0] !== 0) {
      this.onProblem({ code: Status.UNIMPLEMENTED, details: 'compressed messages are not accepted on this stream' });
      return false;
    }
    this.bodyBytes = bytes.readUInt32BE(1);
    if (this.bodyBytes > this.bytesMax) {
      this.onProblem({ code: Status.RESOURCE_EXHAUSTED, details: `message of ${this.bodyBytes} bytes is over the ${this.bytesMax}-byte limit` });
      return false;
    }
    if (this.bodyBytes === 0) {
      this.onMessage(Buffer.alloc(0));
      return true;
    }
    this.inBody = true;
    this.need = this.bodyBytes;
    return true;
  }
}

/** gRPC's percent-encoding of `grpc-message`: UTF-8, every byte outside printable ASCII, and '%', as %XX. */
export function percentEncoded(text: string): string {
  let out = '';
  for (const byte of Buffer.from(text, 'utf8')) {
    out += byte >= 0x20 && byte <= 0x7e && byte !== 0x25 ? String.fromCharCode(byte) : `%${byte.toString(16).toUpperCase().padStart(2, '0')}`;
  }
  return out;
}

/** Headers sent with a status. */
function statusHeaders(status: StreamStatus): Record<string, string> {
  return { 'grpc-status': String(status.code), 'grpc-message': percentEncoded(status.details) };
}

function statusOf(headers: IncomingHttpHeaders): StreamStatus | null {
  const code = headers['grpc-status'];
  if (typeof code !== 'string') return null;
  const message = headers['grpc-message'];
  let details = '';
  if (typeof message === 'string') {
    try {
      details = decodeURIComponent(message);
    } catch {
      details = message;
    }
  }
  return { code: Number(code), details };
}

/**
 * The serving side of one stream, as the Raft stream's handler uses it: the caller's
 * metadata and TLS certificate, each message decoded by `decode`, and an end with a status.
 * Events: 'data' (a decoded message), 'end' (the caller ended its side), 'error' (a
 * status, emitted by the handler to end the call with it, or by the stream itself).
 */
export class ServedStream<T> extends EventEmitter {
  readonly metadata: Metadata;
  private headersSent = false;
  private finished = false;
  /** What the trailers will say once the response ends (`finish`). */
  private trailers: Record<string, string> = statusHeaders({ code: Status.OK, details: 'OK' });

  constructor(
    private readonly stream: ServerHttp2Stream,
    headers: IncomingHttpHeaders,
    decode: (message: Buffer) => T,
    bytesMax: number,
  ) {
    super();
    this.metadata = Metadata.fromHttp2Headers(headers);
    const reader = new GrpcMessageReader(
      bytesMax,
      (message) => {
        if (this.finished) return;
        let decoded: T;
        try {
          decoded = decode(message);
        } catch (error) {
          // Bytes the decoder cannot read: the caller's fault, and the node's loop goes on.
          this.emit('error', { code: Status.INVALID_ARGUMENT, details: `unreadable message: ${error instanceof Error ? error.message : String(error)}` });
          return;
        }
        this.emit('data', decoded);
      },
      (status) => this.emit('error', status),
    );
    // Read once the handler listens for messages (it does so in the turn the call arrives).
    const read = (event: string | symbol): void => {
      if (event !== 'data') return;
      this.off('newListener', read);
      stream.on('data', (chunk: Buffer) => reader.push(chunk));
    };
    this.on('newListener', read);
    stream.on('end', () => {
      if (!this.finished) super.emit('end');
    });
    stream.on('error', () => {});
    stream.on('close', () => {
      this.finished = true;
    });
  }

  getAuthContext(): { transportSecurityType?: string; sslPeerCertificate?: ReturnType<TLSSocket['getPeerCertificate']> } {
    const socket = this.stream.session?.socket;
    if (!(socket instanceof TLSSocket) || !socket.authorized) return {};
    const cert = socket.getPeerCertificate();
    return { transportSecurityType: 'ssl', sslPeerCertificate: cert.raw ? cert : undefined };
  }

  sendMetadata(metadata: Metadata): void {
    if (this.headersSent || this.finished || this.stream.destroyed) return;
    this.headersSent = true;
    this.stream.respond({ ':status': 200, 'content-type': GRPC_CONTENT_TYPE, ...metadata.toHttp2Headers() }, { waitForTrailers: true });
    this.stream.on('wantTrailers', () => this.stream.sendTrailers(this.trailers));
  }

  /** Ends the call with `status` (OK when none). */
  finish(status: StreamStatus = { code: Status.OK, details: 'OK' }): void {
    if (this.finished) return;
    this.finished = true;
    if (this.stream.destroyed) return;
    if (!this.headersSent) {
      // Trailers-only: the status in the one HEADERS frame.
      this.headersSent = true;
      this.stream.respond({ ':status': 200, 'content-type': GRPC_CONTENT_TYPE, ...statusHeaders(status) }, { endStream: true });
      return;
    }
    this.trailers = statusHeaders(status);
    this.stream.end();
  }

  end(): void {
    this.finish();
  }

  override emit(event: string | symbol, ...args: unknown[]): boolean {
    // grpc-js's convention, which the handler follows: emitting 'error' with a status ends the call with it.
    if (event === 'error') {
      const status = args[0] as StreamStatus;
      // Told to whoever listens; never thrown (an EventEmitter throws an 'error' nobody listens for).
      if (this.listenerCount('error') > 0) super.emit('error', status);
      this.finish({ code: status.code, details: status.details ?? '' });
      return true;
    }
    return super.emit(event, ...args);
  }
}

/** How long an ended stream's connection waits for the server to end its side. */
const END_GRACE_MS = 1_000;

export interface DialOptions {
  /** `host:port`. */
  readonly address: string;
  /** TLS options (the peer's name, certificates), or null for plaintext. */
  readonly tls: ConnectionOptions | null;
  /** Each stream's and the connection's receive window. */
  readonly windowBytes: number;
  /** A connection not up (TCP and TLS) within this is given up: UNAVAILABLE. */
  readonly connectTimeoutMs: number;
  /** A PING every this often once connected; one not answered within `keepaliveTimeoutMs` ends the stream. */
  readonly keepaliveMs: number;
  readonly keepaliveTimeoutMs: number;
  /**
   * At most this many bytes wait in the stream's buffer (not yet connected, or the peer not
   * reading); a message written beyond it is dropped (`write` returns false), as a lossy
   * network would drop it.
   */
  readonly bufferedBytesMax: number;
}

/**
 * A client call on a connection of its own: 'metadata' when the server's headers arrive,
 * 'error' with a status (the server's, or UNAVAILABLE when the connection failed), or 'end'
 * when the server ended it with OK. `write` sends one already framed message
 * (GRPC_FRAME_HEADER_BYTES of prefix).
 */
export class DialledStream extends EventEmitter {
  private readonly session: ClientHttp2Session;
  private readonly request: ClientHttp2Stream;
  private done = false;
  private keepalive: NodeJS.Timeout | null = null;
  private readonly bufferedBytesMax: number;

  constructor(options: DialOptions, path: string, metadata: Metadata) {
    super();
    this.bufferedBytesMax = options.bufferedBytesMax;
    const scheme = options.tls === null ? 'http' : 'https';
    this.session = http2.connect(`${scheme}://${options.address}`, {
      ...(options.tls ?? {}),
      settings: { initialWindowSize: options.windowBytes, enablePush: false },
    });
    this.session.on('error', (error: Error) => this.fail({ code: Status.UNAVAILABLE, details: error.message }));
    this.session.on('goaway', () => this.fail({ code: Status.UNAVAILABLE, details: 'the peer closed the connection' }));
    this.session.on('close', () => this.fail({ code: Status.UNAVAILABLE, details: 'connection closed' }));
    const connectTimer = setTimeout(() => this.fail({ code: Status.UNAVAILABLE, details: `no connection within ${options.connectTimeoutMs} ms` }), options.connectTimeoutMs);
    connectTimer.unref();
    this.session.once('close', () => clearTimeout(connectTimer));
    // Up once the peer speaks HTTP/2 (its SETTINGS), not merely once TCP connects.
    this.session.once('remoteSettings', () => {
      clearTimeout(connectTimer);
      try {
        this.session.setLocalWindowSize(options.windowBytes);
      } catch {
        // closing already
      }
      this.keepalive = setInterval(() => this.ping(options.keepaliveTimeoutMs), options.keepaliveMs);
      this.keepalive.unref();
    });
    this.session.unref();
    this.request = this.session.request(
      { ':method': 'POST', ':path': path, 'content-type': GRPC_CONTENT_TYPE, te: 'trailers', ...metadata.toHttp2Headers() },
      { endStream: false },
    );
    this.request.on('response', (headers: IncomingHttpHeaders) => {
      const status = statusOf(headers);
      if (status !== null) return this.closeWith(status);
      if (Number(headers[':status']) !== 200) return this.fail({ code: Status.UNAVAILABLE, details: `HTTP status ${headers[':status']}` });
      this.emit('metadata', Metadata.fromHttp2Headers(headers));
    });
    this.request.on('trailers', (trailers: IncomingHttpHeaders) => this.closeWith(statusOf(trailers) ?? { code: Status.UNKNOWN, details: 'no grpc-status' }));
    this.request.on('data', () => {});
    this.request.on('error', (error: Error) => this.fail({ code: Status.UNAVAILABLE, details: error.message }));
    this.request.on('close', () => this.fail({ code: Status.UNAVAILABLE, details: `stream closed (code ${this.request.rstCode})` }));
  }

  private ping(timeoutMs: number): void {
    if (this.done) return;
    const timer = setTimeout(() => this.fail({ code: Status.UNAVAILABLE, details: 'keepalive ping not answered' }), timeoutMs);
    timer.unref();
    try {
      this.session.ping((error) => {
        clearTimeout(timer);
        if (error) this.fail({ code: Status.UNAVAILABLE, details: error.message });
      });
    } catch (error) {
      clearTimeout(timer);
      this.fail({ code: Status.UNAVAILABLE, details: error instanceof Error ? error.message : String(error) });
    }
  }

  /** Sends one framed message; false when it was dropped (the stream ended, or too much is waiting). */
  write(framed: Buffer): boolean {
    if (this.done || this.request.writableLength + framed.byteLength > this.bufferedBytesMax) return false;
    this.request.write(framed);
    return true;
  }

  /** Ends this side and closes the connection once the server has answered (or at once). */
  /**
   * Ends this side; the connection closes once the server has ended its side too, or after
   * END_GRACE_MS (a server that never answers does not keep it open).
   */
  end(): void {
    if (this.done) return;
    this.done = true;
    this.stop();
    this.request.end();
    this.session.close();
    setTimeout(() => this.session.destroy(), END_GRACE_MS).unref();
  }

  /** The server ended the call: nothing more comes, and this side's half is dropped with the connection. */
  private closeWith(status: StreamStatus): void {
    if (this.done) return;
    this.done = true;
    this.stop();
    this.session.destroy();
    if (status.code === Status.OK) this.emit('end');
    else this.tell(status);
  }

  private fail(status: StreamStatus): void {
    if (this.done) return;
    this.done = true;
    this.stop();
    this.session.destroy();
    this.tell(status);
  }

  /** An 'error' nobody listens for is dropped, not thrown (the call has ended either way). */
  private tell(status: StreamStatus): void {
    if (this.listenerCount('error') > 0) this.emit('error', status);
  }

  private stop(): void {
    if (this.keepalive !== null) clearInterval(this.keepalive);
    this.keepalive = null;
  }
}
