/**
 * The HTTP/2 server grpc-js makes for a `Server` when it binds: the node reaches it in two
 * ways. `onHttp2Server` hooks the one place grpc-js makes it (`createHttp2Server`, not part of
 * its typed API), so a caller can change its settings (http2-window.ts); `serveOnHttp2Server`
 * takes the calls to one method's path off grpc-js and serves them itself
 * (bare-grpc-stream.ts, the Raft stream), leaving every other call to grpc-js. Both throw, or
 * their tests fail, when a grpc-js release moves the hook, so a node does not run without
 * them unnoticed.
 */
import type { Http2SecureServer, Http2Server, IncomingHttpHeaders, ServerHttp2Stream } from 'node:http2';
import type { Server } from '@grpc/grpc-js';

import { GRPC_CONTENT_TYPE } from './bare-grpc-stream.js';

interface ServerInternals {
  createHttp2Server?: (this: Server, ...args: unknown[]) => Http2Server;
}

/**
 * Calls `made` with each HTTP/2 server grpc-js makes for `server` (one per bound address),
 * before grpc-js adds its own listeners. Call it before `bindAsync`.
 */
export function onHttp2Server(server: Server, made: (http2Server: Http2Server) => void): void {
  const internals = server as unknown as ServerInternals;
  const create = internals.createHttp2Server;
  if (typeof create !== 'function') throw new Error('this version of @grpc/grpc-js has no createHttp2Server: the node cannot set up its HTTP/2 server');
  internals.createHttp2Server = function (this: Server, ...args: unknown[]): Http2Server {
    const http2Server = create.apply(this, args);
    made(http2Server);
    return http2Server;
  };
}

/**
 * Serves the calls to `path` on `http2Server` with `serve`, not grpc-js. A request to it that
 * is not a gRPC call (another method or content type) is answered 415, as grpc-js answers one.
 */
export function serveOnHttp2Server(
  http2Server: Http2Server | Http2SecureServer,
  path: string,
  serve: (stream: ServerHttp2Stream, headers: IncomingHttpHeaders) => void,
): void {
  const emit = http2Server.emit;
  http2Server.emit = function (this: typeof http2Server, event: string | symbol, ...args: unknown[]): boolean {
    if (event === 'stream') {
      const headers = args[1] as IncomingHttpHeaders;
      if (headers[':path'] === path) {
        const stream = args[0] as ServerHttp2Stream;
        const contentType = headers['content-type'];
        if (headers[':method'] !== 'POST' || typeof contentType !== 'string' || !contentType.startsWith(GRPC_CONTENT_TYPE)) {
          stream.respond({ ':status': 415 }, { endStream: true });
        } else serve(stream, headers);
        return true;
      }
    }
    return emit.call(this, event, ...args);
  } as typeof http2Server.emit;
}
