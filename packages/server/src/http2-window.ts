/**
 * HTTP/2 receive windows wider than the protocol's 65,535-byte default, on the node's servers
 * and channels.
 *
 * A receiver lets a sender have at most its window of unacknowledged bytes, per stream and
 * per connection, and returns credit (WINDOW_UPDATE) only as its event loop reads. With the
 * default window a 256 KiB gRPC message (a publisher's window of 256 1 KiB messages, the
 * append that carries it to a follower) crosses in four or more exchanges between two
 * processes, each a wake-up on both sides: between two processes on this machine one 256 KiB
 * message and its 16-byte answer took 0.84-1.0 ms at the median with the default window and
 * 0.27-0.38 ms with 1 MiB (`node:http2`, 500 round trips each); 512 KiB left half the gain.
 *
 * What a wider window costs is memory: a sender may put up to this much per connection into
 * a node that is not reading (a publisher during a memory alarm, a follower busy applying),
 * held in the node's process until it reads again, against 64 KiB before.
 *
 * grpc-js sets a channel's window (`grpc-node.flow_control_window`) but not a server's: its
 * server sends the default SETTINGS. `widenServerWindows` hooks the one place grpc-js makes
 * its HTTP/2 server (grpc-http2-server.ts), adds the setting and
 * widens every session's connection window; the test in `http2-window.test.ts` reads what a
 * plain HTTP/2 client is told, so a grpc-js that moves that place fails it.
 */
import type { Http2Session, Settings } from 'node:http2';
import type { Server } from '@grpc/grpc-js';

import { onHttp2Server } from './grpc-http2-server.js';

/** Each stream's and each connection's receive window, in bytes. */
export const HTTP2_WINDOW_BYTES = 1024 * 1024;

/** The channel option that gives a grpc-js channel the same receive window. */
export const CHANNEL_WINDOW_OPTIONS = { 'grpc-node.flow_control_window': HTTP2_WINDOW_BYTES } as const;

interface ServerInternals {
  commonServerOptions?: { settings?: Settings };
}

/**
 * Makes `server` (before it binds) announce `bytes` as each stream's initial window and widen
 * each connection's window to `bytes`. Throws when the grpc-js in use no longer has the hook,
 * so a node does not silently run with the narrow window.
 */
export function widenServerWindows(server: Server, bytes: number = HTTP2_WINDOW_BYTES): void {
  const internals = server as unknown as ServerInternals;
  if (internals.commonServerOptions === undefined) {
    throw new Error('this version of @grpc/grpc-js has no commonServerOptions: the HTTP/2 window cannot be set');
  }
  internals.commonServerOptions.settings = { ...internals.commonServerOptions.settings, initialWindowSize: bytes };
  onHttp2Server(server, (http2Server) => http2Server.on('session', (session: Http2Session) => widenConnectionWindow(session, bytes)));
}

function widenConnectionWindow(session: Http2Session, bytes: number): void {
  try {
    session.setLocalWindowSize(bytes);
  } catch {
    // A session already closing: nothing to widen.
  }
}
