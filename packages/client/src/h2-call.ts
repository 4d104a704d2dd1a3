/**
 * A bidirectional gRPC call on one of the SDK's own HTTP/2 connections (h2-sessions.ts),
 * with the events and methods the publisher and the consumer use of grpc-js's
 * `ClientDuplexStream`: 'data' (a decoded message), 'error' then 'status' for a call that
 * ends with an error, 'status' alone for OK; `write(value, done?)`, `end()`, `cancel()`.
 *
 * The wire is gRPC's: a POST to the method's path, `application/grpc`, `te: trailers`, the
 * call's metadata as headers, each message with its 5-byte prefix; the answer's headers, its
 * messages, then trailers with `grpc-status`, `grpc-message` and the status's metadata (a
 * node's `quorumq-leader` and `quorumq-reason`), or a status alone. No compression is
 * offered, so a compressed answer is an error. A call that ends without a status (the
 * connection lost, the stream reset) ends UNAVAILABLE, or as grpc-js maps the reset code.
 */
import { EventEmitter } from 'node:events';
import http2, { type IncomingHttpHeaders, type OutgoingHttpHeaders } from 'node:http2';
import { Metadata, status as Status, type StatusObject } from '@grpc/grpc-js';
import { GrpcMessageReader, grpcFrame } from '@quorumq/proto/grpc-frames';

import type { Http2Sessions } from './h2-sessions.js';

/** The part of grpc-js's `ClientDuplexStream` the SDK's streams use; both kinds of call have it. */
export interface DuplexCall<Req> {
  write(value: Req, done?: (error?: Error | null) => void): boolean;
  end(): void;
  cancel(): void;
  // 'data' (a decoded message), 'error' (a ServiceError), 'status' (a StatusObject).
  on(event: 'data' | 'error' | 'status', listener: (...args: any[]) => void): unknown;
}

/** grpc-js's mapping of an HTTP status without a gRPC status. */
function httpStatusCode(status: number): number {
  switch (status) {
    case 400:
      return Status.INTERNAL;
    case 401:
      return Status.UNAUTHENTICATED;
    case 403:
      return Status.PERMISSION_DENIED;
    case 404:
      return Status.UNIMPLEMENTED;
    case 429:
    case 502:
    case 503:
    case 504:
      return Status.UNAVAILABLE;
    default:
      return Status.UNKNOWN;
  }
}

/** grpc-js's mapping of an RST_STREAM code the server sent before any status. */
function resetCode(code: number): number {
  switch (code) {
    case http2.constants.NGHTTP2_REFUSED_STREAM:
      return Status.UNAVAILABLE;
    case http2.constants.NGHTTP2_CANCEL:
      return Status.CANCELLED;
    case http2.constants.NGHTTP2_ENHANCE_YOUR_CALM:
      return Status.RESOURCE_EXHAUSTED;
    case http2.constants.NGHTTP2_INADEQUATE_SECURITY:
      return Status.PERMISSION_DENIED;
    default:
      return Status.UNAVAILABLE;
  }
}

function detailsOf(headers: IncomingHttpHeaders): string {
  const message = headers['grpc-message'];
  if (typeof message !== 'string') return '';
  try {
    return decodeURIComponent(message);
  } catch {
    return message;
  }
}

export interface Http2CallOptions<Req, Res> {
  readonly address: string;
  readonly path: string;
  readonly serialize: (value: Req) => Uint8Array;
  readonly deserialize: (bytes: Buffer) => Res;
  /** The call's metadata (session, authorization). */
  readonly headers: OutgoingHttpHeaders;
  /** The largest message read; a larger one ends the call RESOURCE_EXHAUSTED. */
  readonly receiveBytesMax: number;
}

export class Http2Call<Req, Res> extends EventEmitter implements DuplexCall<Req> {
  private readonly stream: http2.ClientHttp2Stream | null = null;
  private ended = false;
  private cancelled = false;

  constructor(sessions: Http2Sessions, private readonly options: Http2CallOptions<Req, Res>) {
    super();
    const connection = sessions.connection(options.address);
    const untrack = sessions.track(connection);
    let stream: http2.ClientHttp2Stream;
    try {
      stream = connection.session.request(
        { ':method': 'POST', ':path': options.path, 'content-type': 'application/grpc', te: 'trailers', ...options.headers },
        { endStream: false },
      );
    } catch (error) {
      // The connection closed in this turn: the call ends as one whose connection was lost,
      // once its caller listens.
      untrack();
      const details = `connection to node ${options.address} is closing: ${error instanceof Error ? error.message : String(error)}`;
      queueMicrotask(() => this.finish({ code: Status.UNAVAILABLE, details, metadata: new Metadata() }));
      return;
    }
    this.stream = stream;
    const reader = new GrpcMessageReader(
      options.receiveBytesMax,
      (message) => this.onMessage(message),
      (problem) => this.abort(problem.code, problem.details),
    );
    stream.on('response', (headers: IncomingHttpHeaders) => {
      if (headers['grpc-status'] !== undefined) {
        this.onStatus(headers);
        return;
      }
      const http = Number(headers[':status']);
      if (http !== 200) this.abort(httpStatusCode(http), `received HTTP status ${http} instead of 200`);
      else if (!String(headers['content-type'] ?? '').startsWith('application/grpc')) this.abort(Status.UNKNOWN, `received content-type ${String(headers['content-type'])}`);
    });
    stream.on('data', (chunk: Buffer) => {
      if (!this.ended) reader.push(chunk);
    });
    stream.on('trailers', (trailers: IncomingHttpHeaders) => this.onStatus(trailers));
    // Its details come with 'close' below (the reset code), or the session's failure.
    stream.on('error', () => undefined);
    stream.on('close', () => {
      untrack();
      if (this.ended) return;
      const rst = stream.rstCode ?? http2.constants.NGHTTP2_NO_ERROR;
      if (connection.failure !== null) this.finish({ code: Status.UNAVAILABLE, details: connection.failure, metadata: new Metadata() });
      else if (this.cancelled) this.finish({ code: Status.CANCELLED, details: 'Cancelled on client', metadata: new Metadata() });
      else if (rst !== http2.constants.NGHTTP2_NO_ERROR) this.finish({ code: resetCode(rst), details: `stream reset by the node (HTTP/2 code ${rst}) before a status`, metadata: new Metadata() });
      else this.finish({ code: Status.UNAVAILABLE, details: `connection to node ${options.address} closed before a status`, metadata: new Metadata() });
    });
  }

  private onMessage(bytes: Buffer): void {
    if (this.ended) return;
    let value: Res;
    try {
      value = this.options.deserialize(bytes);
    } catch (error) {
      this.abort(Status.INTERNAL, `response does not decode: ${error instanceof Error ? error.message : String(error)}`);
      return;
    }
    this.emit('data', value);
  }

  private onStatus(headers: IncomingHttpHeaders): void {
    const code = Number(headers['grpc-status']);
    const metadata = Metadata.fromHttp2Headers(headers);
    metadata.remove('grpc-status');
    metadata.remove('grpc-message');
    this.finish({ code: Number.isInteger(code) ? code : Status.UNKNOWN, details: detailsOf(headers), metadata });
  }

  /** Ends the call on this side with `code` (a problem in what the node sent), and resets the stream. */
  private abort(code: number, details: string): void {
    if (this.ended) return;
    this.finish({ code, details, metadata: new Metadata() });
    this.stream?.close(http2.constants.NGHTTP2_CANCEL);
  }

  private finish(status: StatusObject): void {
    if (this.ended) return;
    this.ended = true;
    if (status.code !== Status.OK && this.listenerCount('error') > 0) {
      this.emit('error', Object.assign(new Error(`${status.code} ${Status[status.code] ?? ''}: ${status.details}`), status));
    }
    this.emit('status', status);
  }

  write(value: Req, done?: (error?: Error | null) => void): boolean {
    const stream = this.stream;
    if (stream === null || stream.destroyed || stream.writableEnded) {
      if (done !== undefined) queueMicrotask(() => done(new Error('the stream has ended')));
      return false;
    }
    const framed = grpcFrame(this.options.serialize(value));
    return done === undefined ? stream.write(framed) : stream.write(framed, done);
  }

  /** Half-closes: the node ends the call once it has answered what was sent. */
  end(): void {
    const stream = this.stream;
    if (stream !== null && !stream.destroyed && !stream.writableEnded) stream.end();
  }

  /** Drops the call: 'status' CANCELLED, unless it had ended already. */
  cancel(): void {
    if (this.ended || this.stream === null || this.stream.destroyed) return;
    this.cancelled = true;
    this.stream.close(http2.constants.NGHTTP2_CANCEL);
  }
}
