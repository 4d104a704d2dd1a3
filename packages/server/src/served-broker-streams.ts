/**
 * The client's streams, `PublishStream` and `Consume`, served on `node:http2` itself, as the
 * Raft stream is (bare-grpc-stream.ts): grpc-js's call objects, filters and framing over Node
 * streams cost about as much CPU per message as the node's own work on it at one operation in
 * flight. The wire is gRPC's, so any gRPC client is the other end; every other Broker call
 * stays on grpc-js, on the same HTTP/2 server (grpc-http2-server.ts).
 *
 * The service's own handlers run on a `ServedStream`, which behaves as grpc-js's server call
 * does where they rely on it: the caller's metadata and certificate, 'data' / 'end' / 'error'
 * / 'drain' / 'cancelled' / 'close', `write` (false when full), `pause` / `resume`, the
 * call's deadline (`grpc-timeout`), compressed requests (gzip, deflate), a status with its
 * metadata in the trailers. The requests are read as on grpc-js (server.ts's deserializers):
 * bounded before they are decoded (request-limits.ts), and an unreadable one ends the
 * caller's input and then the call with the refusal's status (unreadable.ts).
 */
import type { Http2SecureServer, Http2Server, IncomingHttpHeaders, ServerHttp2Stream } from 'node:http2';
import { Metadata, type Server, type UntypedServiceImplementation } from '@grpc/grpc-js';
import { BrokerService } from '@quorumq/proto';

import { ACCEPTED_ENCODINGS, RefusedMessage, ServedStream, inflateFor } from './bare-grpc-stream.js';
import { Status } from './errors.js';
import { onHttp2Server, serveOnHttp2Server } from './grpc-http2-server.js';
import { UnreadableRequest } from './unreadable.js';

/** A served method: its path, how its requests are read and its answers written. */
interface StreamMethod {
  readonly path: string;
  readonly handler: string;
  readonly deserialize: (bytes: Buffer) => unknown;
  readonly serialize: (value: never) => Uint8Array;
}

/** The Broker service's client streams as `server` serves them (server.ts's brokerServiceFor). */
export function brokerStreamMethods(service: typeof BrokerService): StreamMethod[] {
  return [
    { path: service.publishStream.path, handler: 'publishStream', deserialize: service.publishStream.requestDeserialize, serialize: service.publishStream.responseSerialize },
    { path: service.consume.path, handler: 'consume', deserialize: service.consume.requestDeserialize, serialize: service.consume.responseSerialize },
  ] as StreamMethod[];
}

/**
 * Serves `methods` of `implementation` on `server`'s HTTP/2 server (to be called before it
 * binds), messages up to `bytesMax` (grpc-js's `grpc.max_receive_message_length`).
 */
export function serveBrokerStreams(server: Server, implementation: UntypedServiceImplementation, methods: readonly StreamMethod[], bytesMax: number): void {
  onHttp2Server(server, (http2Server: Http2Server | Http2SecureServer) => {
    for (const method of methods) {
      const handler = implementation[method.handler] as unknown as (call: unknown) => void;
      serveOnHttp2Server(http2Server, method.path, (stream, headers) => serveCall(stream, headers, method, handler, bytesMax));
    }
  });
}

function serveCall(stream: ServerHttp2Stream, headers: IncomingHttpHeaders, method: StreamMethod, handler: (call: unknown) => void, bytesMax: number): void {
  const encoding = headers['grpc-encoding'];
  if (inflateFor(typeof encoding === 'string' ? encoding : undefined) === undefined) {
    stream.respond(
      { ':status': 200, 'content-type': 'application/grpc', 'grpc-accept-encoding': ACCEPTED_ENCODINGS, 'grpc-status': String(Status.UNIMPLEMENTED), 'grpc-message': `encoding ${String(encoding)} is not supported` },
      { endStream: true },
    );
    return;
  }
  const decode = (bytes: Buffer): unknown => {
    const request = method.deserialize(bytes);
    if (request instanceof UnreadableRequest) {
      const { code, details, metadata } = request.status;
      throw new RefusedMessage({ code: code ?? Status.INVALID_ARGUMENT, details: details ?? 'unreadable request', metadata: metadata instanceof Metadata ? metadata : null });
    }
    return request;
  };
  const call = new ServedStream(stream, headers, decode, bytesMax, { acceptCompressed: true, endInputOnRefusal: true });
  // grpc-js's `write(value)`: the handlers write objects, the method's serializer makes the bytes.
  const served = Object.assign(call, { write: (value: unknown) => call.send(method.serialize(value as never)) });
  handler(served);
}
