import { Server, ServerCredentials } from '@grpc/grpc-js';
import http2, { type ClientHttp2Session, type Http2Session } from 'node:http2';
import type { AddressInfo } from 'node:net';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';

import { HTTP2_WINDOW_BYTES, widenServerWindows } from '../src/http2-window.js';
import { PeerTransport } from '../src/transport.js';
import { TestCluster } from './cluster.js';

const DEFAULT_WINDOW = 65_535;
const closers: Array<() => void> = [];
afterEach(() => {
  for (const close of closers.splice(0)) close();
});

async function bound(server: Server): Promise<string> {
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', ServerCredentials.createInsecure(), (error, p) => (error ? reject(error) : resolve(p))),
  );
  closers.push(() => server.forceShutdown());
  return `127.0.0.1:${port}`;
}

/** What a server at `address` tells a plain HTTP/2 client: each stream's window and the connection's. */
async function windowsOf(address: string): Promise<{ stream: number | undefined; connection: number | undefined }> {
  const session: ClientHttp2Session = http2.connect(`http://${address}`);
  try {
    await new Promise<void>((resolve, reject) => {
      session.once('remoteSettings', () => resolve());
      session.once('error', reject);
    });
    // A ping's answer comes after any WINDOW_UPDATE the server sent with its settings.
    await new Promise<void>((resolve, reject) => session.ping((error) => (error ? reject(error) : resolve())));
    return { stream: session.remoteSettings.initialWindowSize, connection: session.state.remoteWindowSize };
  } finally {
    session.destroy();
  }
}

/** A plain HTTP/2 server that records the first client's SETTINGS and its connection window. */
async function recordingServer(): Promise<{ address: string; seen: Promise<{ stream: number | undefined; connection: number | undefined }> }> {
  const server = http2.createServer();
  // Answered as a gRPC server would and left open: a call that fails at once may close its connection.
  server.on('stream', (stream) => stream.respond({ ':status': 200, 'content-type': 'application/grpc' }));
  const seen = new Promise<{ stream: number | undefined; connection: number | undefined }>((resolve) => {
    server.once('session', (session: Http2Session) => {
      session.once('remoteSettings', (settings) => {
        // The client widens its connection window once it has the server's settings.
        const poll = setInterval(() => {
          if ((session.state.remoteWindowSize ?? 0) > DEFAULT_WINDOW) {
            clearInterval(poll);
            resolve({ stream: settings.initialWindowSize, connection: session.state.remoteWindowSize });
          }
        }, 10);
        setTimeout(() => {
          clearInterval(poll);
          resolve({ stream: settings.initialWindowSize, connection: session.state.remoteWindowSize });
        }, 3_000);
      });
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  closers.push(() => server.close());
  closers.push(() => (server as unknown as { closeAllConnections?: () => void }).closeAllConnections?.());
  return { address: `127.0.0.1:${(server.address() as AddressInfo).port}`, seen };
}

describe('HTTP/2 receive windows', () => {
  it("grpc-js's own server announces HTTP/2's default window (what widenServerWindows changes)", async () => {
    const address = await bound(new Server());
    expect(await windowsOf(address)).toEqual({ stream: DEFAULT_WINDOW, connection: DEFAULT_WINDOW });
  });

  it('a widened server announces a 1 MiB window for each stream and widens each connection to 1 MiB', async () => {
    const server = new Server();
    widenServerWindows(server);
    const address = await bound(server);
    expect(HTTP2_WINDOW_BYTES).toBe(1024 * 1024);
    expect(await windowsOf(address)).toEqual({ stream: HTTP2_WINDOW_BYTES, connection: HTTP2_WINDOW_BYTES });
  });

  it('a server given to widenServerWindows keeps the settings it was made with', async () => {
    const server = new Server({ 'grpc.max_concurrent_streams': 7 });
    widenServerWindows(server, 512 * 1024);
    const address = await bound(server);
    const session = http2.connect(`http://${address}`);
    closers.push(() => session.destroy());
    await new Promise((resolve) => session.once('remoteSettings', resolve));
    expect(session.remoteSettings).toMatchObject({ maxConcurrentStreams: 7, initialWindowSize: 512 * 1024 });
  });

  it("a node's peer channel asks its peers for the same window", async () => {
    const { address, seen } = await recordingServer();
    const sink = new Writable({ write: (_chunk, _encoding, done) => done() });
    const transport = new PeerTransport('n2', new Map([['n1', address]]), 'a-cluster-secret-for-tests', pino({ level: 'silent' }, sink));
    closers.push(() => transport.close());
    transport.send('meta', [{ type: 'heartbeat', from: 'n2', to: 'n1', term: 1, commit: 0, readSeq: 0, quiesce: false }]);
    expect(await seen).toEqual({ stream: HTTP2_WINDOW_BYTES, connection: HTTP2_WINDOW_BYTES });
  });
});

describe("a running node's listeners", () => {
  let cluster: TestCluster;
  beforeAll(async () => {
    cluster = await TestCluster.start({ size: 1 });
  }, 60_000);
  afterAll(async () => {
    await cluster?.close();
  });

  it('announce the 1 MiB window on the client port and on the peer port', async () => {
    const node = cluster.nodes[0]!;
    expect(await windowsOf(cluster.addresses[0]!)).toEqual({ stream: HTTP2_WINDOW_BYTES, connection: HTTP2_WINDOW_BYTES });
    expect(await windowsOf(node.peerAddress)).toEqual({ stream: HTTP2_WINDOW_BYTES, connection: HTTP2_WINDOW_BYTES });
  });
});
