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
import zlib from 'node:zlib';
import http2, { type ClientHttp2Session, type ClientHttp2Stream, type IncomingHttpHeaders, type OutgoingHttpHeaders, type ServerHttp2Stream } from 'node:http2';
import { TLSSocket, type ConnectionOptions } from 'node:tls';
import { Metadata, status as Status } from '@grpc/grpc-js';

import { GrpcMessageReader, grpcFrame, type Inflate } from '@quorumq/proto/grpc-frames';

export { GrpcMessageReader, type Inflate };

/** A gRPC status a stream ended with. */
export interface StreamStatus {
  readonly code: number;
  readonly details: string;
  /** Sent with the status, in the trailers (a served stream's; a dialled stream reads none). */
  readonly metadata?: Metadata | null;
}

/**
 * Thrown by a served stream's `decode` for a message the call must not read: with
 * `endInputOnRefusal`, the handler then sees the end of its input (it finishes what it has in
 * flight) and the call ends with `status` instead of OK (as unreadable.ts does on grpc-js).
 */
export class RefusedMessage extends Error {
  constructor(readonly status: StreamStatus) {
    super(status.details);
  }
}

export const GRPC_CONTENT_TYPE = 'application/grpc';

/** The encodings a served stream reads, as its answers say (`grpc-accept-encoding`). */
export const ACCEPTED_ENCODINGS = 'identity,deflate,gzip';

/**
 * The inflater for a request's `grpc-encoding`; undefined for one not supported (the call is
 * then refused UNIMPLEMENTED, naming ACCEPTED_ENCODINGS).
 */
export function inflateFor(encoding: string | undefined): Inflate | undefined {
  if (encoding === undefined || encoding === 'identity') return null;
  if (encoding === 'gzip') return (bytes, bytesMax) => zlib.gunzipSync(bytes, { maxOutputLength: bytesMax });
  if (encoding === 'deflate') return (bytes, bytesMax) => zlib.inflateSync(bytes, { maxOutputLength: bytesMax });
  return undefined;
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
function statusHeaders(status: StreamStatus): OutgoingHttpHeaders {
  return { ...(status.metadata?.toHttp2Headers() ?? {}), 'grpc-status': String(status.code), 'grpc-message': percentEncoded(status.details) };
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

/** What a served stream accepts beyond the Raft stream's defaults. */
export interface ServedStreamOptions {
  /**
   * Compressed messages, as the request's `grpc-encoding` names (gzip, deflate: see
   * inflateFor; the caller refuses another encoding before it makes the stream). Off: a
   * compressed message is UNIMPLEMENTED.
   */
  readonly acceptCompressed?: boolean;
  /** A `decode` that throws RefusedMessage ends the call's input instead of the call (see RefusedMessage). */
  readonly endInputOnRefusal?: boolean;
}

/**
 * gRPC's `grpc-timeout` (an integer of at most 8 digits and a unit: H, M, S, m, u, n) in
 * milliseconds; null when absent or not of that form (the call then has no deadline).
 */
export function grpcTimeoutMs(value: string | string[] | undefined): number | null {
  if (typeof value !== 'string') return null;
  const match = /^(\d{1,8})([HMSmun])$/.exec(value);
  if (match === null) return null;
  const amount = Number(match[1]);
  const unitMs = { H: 3_600_000, M: 60_000, S: 1_000, m: 1, u: 1e-3, n: 1e-6 }[match[2] as 'H' | 'M' | 'S' | 'm' | 'u' | 'n'];
  return Math.ceil(amount * unitMs);
}

/**
 * The serving side of one stream, as a grpc-js handler uses it: the caller's metadata and
 * TLS certificate, each message decoded by `decode`, messages sent (`send`), and an end with
 * a status. Events: 'data' (a decoded message), 'end' (the caller ended its side), 'error' (a
 * status, emitted by the handler to end the call with it, or by the stream itself), 'drain'
 * (room again after a `send` that returned false), 'cancelled' (the caller reset the stream,
 * or its deadline passed, before the call ended) and 'close' (the stream is gone).
 */
export class ServedStream<T> extends EventEmitter {
  readonly metadata: Metadata;
  private headersSent = false;
  private finished = false;
  /** What the trailers will say once the response ends (`finish`). */
  private trailers: OutgoingHttpHeaders = statusHeaders({ code: Status.OK, details: 'OK' });
  private readonly responseHeaders: OutgoingHttpHeaders;
  private deadline: NodeJS.Timeout | null = null;
  /** The caller's input was ended by a refused message: the call's status, once the handler ends it. */
  private refusal: StreamStatus | null = null;
  private inputEnded = false;

  constructor(
    private readonly stream: ServerHttp2Stream,
    headers: IncomingHttpHeaders,
    decode: (message: Buffer) => T,
    bytesMax: number,
    options: ServedStreamOptions = {},
  ) {
    super();
    this.metadata = Metadata.fromHttp2Headers(headers);
    const encoding = headers['grpc-encoding'];
    const inflate = options.acceptCompressed === true ? (inflateFor(typeof encoding === 'string' ? encoding : undefined) ?? null) : null;
    this.responseHeaders = { ':status': '200', 'content-type': GRPC_CONTENT_TYPE, ...(options.acceptCompressed === true ? { 'grpc-accept-encoding': ACCEPTED_ENCODINGS } : {}) };
    const reader = new GrpcMessageReader(
      bytesMax,
      (message) => {
        if (this.finished) return;
        if (this.inputEnded) return;
        let decoded: T;
        try {
          decoded = decode(message);
        } catch (error) {
          if (error instanceof RefusedMessage && options.endInputOnRefusal === true) {
            this.refusal = error.status;
            this.endInput();
            return;
          }
          // Bytes the decoder cannot read: the caller's fault, and the node's loop goes on.
          this.emit('error', { code: Status.INVALID_ARGUMENT, details: `unreadable message: ${error instanceof Error ? error.message : String(error)}` });
          return;
        }
        this.emit('data', decoded);
      },
      (status) => this.emit('error', status),
      inflate,
    );
    // Read once the handler listens for messages (it does so in the turn the call arrives).
    const read = (event: string | symbol): void => {
      if (event !== 'data') return;
      this.off('newListener', read);
      stream.on('data', (chunk: Buffer) => reader.push(chunk));
    };
    this.on('newListener', read);
    stream.on('end', () => this.endInput());
    stream.on('error', () => {});
    stream.on('drain', () => super.emit('drain'));
    stream.on('close', () => {
      if (this.deadline !== null) clearTimeout(this.deadline);
      const byCaller = !this.finished;
      this.finished = true;
      if (byCaller) super.emit('cancelled');
      super.emit('close');
    });
    const timeoutMs = grpcTimeoutMs(headers['grpc-timeout']);
    if (timeoutMs !== null) {
      this.deadline = setTimeout(() => {
        if (this.finished) return;
        super.emit('cancelled');
        this.finish({ code: Status.DEADLINE_EXCEEDED, details: 'Deadline exceeded' });
      }, timeoutMs);
      this.deadline.unref();
    }
  }

  /** Whether the call is over (ended by either side): grpc-js's `cancelled`, for a handler that checks before it writes. */
  get cancelled(): boolean {
    return this.finished || this.stream.destroyed;
  }

  get destroyed(): boolean {
    return this.stream.destroyed;
  }

  /** The caller's address as grpc-js gives it (`host:port`), or 'unknown'. */
  getPeer(): string {
    const socket = this.stream.session?.socket;
    if (socket?.remoteAddress === undefined) return 'unknown';
    return socket.remotePort === undefined ? socket.remoteAddress : `${socket.remoteAddress}:${socket.remotePort}`;
  }

  /** The caller's side ended (or was ended by a refused message): 'end', once; nothing more is read. */
  private endInput(): void {
    if (this.inputEnded) return;
    this.inputEnded = true;
    if (!this.finished) super.emit('end');
  }

  /**
   * Sends one message (its encoded bytes; framed here), the response headers first. False
   * when the stream's buffer is full ('drain' follows) or the call is over (nothing sent).
   */
  send(bytes: Uint8Array): boolean {
    if (this.finished || this.stream.destroyed) return false;
    if (!this.headersSent) this.sendMetadata(new Metadata());
    return this.stream.write(grpcFrame(bytes));
  }

  /** Stops reading the caller's messages (HTTP/2 flow control then holds the caller back). */
  pause(): void {
    this.stream.pause();
  }

  resume(): void {
    this.stream.resume();
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
    this.stream.respond({ ...this.responseHeaders, ...metadata.toHttp2Headers() }, { waitForTrailers: true });
    this.stream.on('wantTrailers', () => this.stream.sendTrailers(this.trailers));
  }

  /** Ends the call with `status` (OK when none). */
  finish(status: StreamStatus = { code: Status.OK, details: 'OK' }): void {
    if (this.finished) return;
    if (status.code === Status.OK && this.refusal !== null) status = this.refusal;
    this.finished = true;
    if (this.stream.destroyed) return;
    if (!this.headersSent) {
      // Trailers-only: the status in the one HEADERS frame.
      this.headersSent = true;
      this.stream.respond({ ...this.responseHeaders, ...statusHeaders(status) }, { endStream: true });
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
      this.finish({ code: status.code, details: status.details ?? '', metadata: status.metadata ?? null });
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
