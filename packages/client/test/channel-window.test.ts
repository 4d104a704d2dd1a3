import http2, { type Http2Session } from 'node:http2';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { connect } from '../src/index.js';

const closers: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const close of closers.splice(0).reverse()) await close();
});

/** A plain HTTP/2 server that records what the first client asks for: each stream's window and its connection's. */
async function recordingServer(): Promise<{ address: string; seen: Promise<{ stream: number | undefined; connection: number | undefined }> }> {
  const server = http2.createServer();
  const sessions: Http2Session[] = [];
  server.on('stream', (stream) => stream.respond({ ':status': 404 }, { endStream: true }));
  const seen = new Promise<{ stream: number | undefined; connection: number | undefined }>((resolve) => {
    server.once('session', (session: Http2Session) => {
      sessions.push(session);
      session.once('remoteSettings', (settings) => {
        const started = Date.now();
        // The client widens its connection window once it has the server's settings.
        const poll = setInterval(() => {
          const connection = session.state.remoteWindowSize;
          if ((connection ?? 0) > 65_535 || Date.now() - started > 3_000) {
            clearInterval(poll);
            resolve({ stream: settings.initialWindowSize, connection });
          }
        }, 10);
      });
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  closers.push(
    () =>
      new Promise<void>((resolve) => {
        for (const session of sessions) session.destroy();
        server.close(() => resolve());
      }),
  );
  return { address: `127.0.0.1:${(server.address() as AddressInfo).port}`, seen };
}

describe("the SDK's channels", () => {
  it('ask the broker for a 1 MiB HTTP/2 window per stream and per connection (deliveries of 256 KiB do not wait for credit)', async () => {
    const { address, seen } = await recordingServer();
    const client = connect({ nodes: [address] });
    closers.push(() => client.close());
    void client.declareQueue('q').catch(() => undefined);
    expect(await seen).toEqual({ stream: 1024 * 1024, connection: 1024 * 1024 });
  });

  it("leave a window the application sets in its channel options", async () => {
    const { address, seen } = await recordingServer();
    const client = connect({ nodes: [address], channelOptions: { 'grpc-node.flow_control_window': 256 * 1024 } });
    closers.push(() => client.close());
    void client.declareQueue('q').catch(() => undefined);
    expect(await seen).toEqual({ stream: 256 * 1024, connection: 256 * 1024 });
  });
});
