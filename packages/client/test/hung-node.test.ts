/**
 * A node that accepts connections but never answers (a paused or hung process: its kernel
 * still completes the TCP handshake) is passed over after `connectTimeoutMs`, for unary
 * calls, publish streams and consume streams alike. grpc-js has no connect timeout: before,
 * a unary call there failed with DEADLINE_EXCEEDED after `callTimeoutMs` (not failed over:
 * its outcome looked unknown) and a stream waited for ever.
 */
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { connect, type ConnectOptions, type QuorumqClient } from '../src/index.js';
import { FakeBroker, FakeState } from './fake-broker.js';

const cleanup: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const fn of cleanup.splice(0).reverse()) await fn();
});

/** A listener that accepts connections and never sends a byte: HTTP/2's handshake never completes. */
async function hungAddress(): Promise<string> {
  const sockets: net.Socket[] = [];
  const server = net.createServer((socket) => {
    sockets.push(socket);
    socket.on('error', () => undefined);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  cleanup.push(
    () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  );
  return `127.0.0.1:${(server.address() as AddressInfo).port}`;
}

async function broker(): Promise<FakeBroker> {
  const b = await FakeBroker.start(new FakeState());
  cleanup.push(() => b.kill());
  return b;
}

function client(nodes: string[], options: Partial<ConnectOptions> = {}): QuorumqClient {
  const c = connect({ nodes, connectTimeoutMs: 300, callTimeoutMs: 10_000, failoverTimeoutMs: 5_000, leaderRouting: false, ...options });
  cleanup.push(() => c.close());
  return c;
}

async function within<T>(ms: number, promise: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`not settled within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

describe('a hung node', () => {
  it('is passed over by a unary call after connectTimeoutMs, not after the call deadline', async () => {
    const [hung, live] = [await hungAddress(), await broker()];
    const c = client([hung, live.address]);
    const started = Date.now();
    expect((await within(3_000, c.declareQueue('q'))).created).toBe(true);
    expect(Date.now() - started).toBeGreaterThanOrEqual(250);
    expect(live.calls).toContain('declareQueue');
  });

  it('is passed over by a publish stream, and a publish without a producerId is confirmed, once', async () => {
    const [hung, live] = [await hungAddress(), await broker()];
    const c = client([hung, live.address]);
    const admin = client([live.address]);
    await admin.declareQueue('q');
    const publisher = c.createPublisher({ maxInFlight: 4 });
    const results = await within(3_000, Promise.all([publisher.publish('q', 'a'), publisher.publish('q', 'b')]));
    expect(results.map((r) => r.outcome)).toEqual(['confirmed', 'confirmed']);
    expect(live.state.queues.get('q')?.ready.map((m) => Buffer.from(m.message.body ?? []).toString())).toEqual(['a', 'b']);
    await publisher.close();
  });

  it('is passed over by a consumer, which subscribes at the next node', async () => {
    const [hung, live] = [await hungAddress(), await broker()];
    const admin = client([live.address]);
    await admin.declareQueue('q');
    const c = client([hung, live.address]);
    const consumer = c.consume('q', { prefetch: 1 });
    cleanup.push(() => consumer.cancel());
    await within(3_000, consumer.ready());
    expect(live.subscribes.map((s) => s.queue)).toEqual(['q']);
  });

  it('fails a call with UNAVAILABLE when it is the only node, after the failover timeout', async () => {
    const hung = await hungAddress();
    const c = client([hung], { failoverTimeoutMs: 1_000 });
    await expect(within(5_000, c.queueStatus('q'))).rejects.toMatchObject({ code: 'UNAVAILABLE' });
  });
});
