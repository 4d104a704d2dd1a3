/**
 * The SDK's streams on its own HTTP/2 connections (h2-call.ts, h2-sessions.ts), against a
 * plain node:http2 server that answers as a gRPC server would, or would not: what the call
 * sends (gRPC's request, the session and credentials), and every way it can end (a status
 * in the trailers or alone, with its metadata; an HTTP error; a reset; a lost connection; a
 * message too large or compressed) as the grpc-js status the publisher and consumer read.
 */
import http2, { type IncomingHttpHeaders, type ServerHttp2Stream } from 'node:http2';
import net, { type AddressInfo } from 'node:net';
import { status as Status, type StatusObject } from '@grpc/grpc-js';
import { grpcFrame } from '@quorumq/proto/grpc-frames';
import { afterEach, describe, expect, it } from 'vitest';
import { toQuorumqError } from '../src/errors.js';
import { Http2Call } from '../src/h2-call.js';
import { Http2Sessions } from '../src/h2-sessions.js';

const cleanup: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const fn of cleanup.splice(0).reverse()) await fn();
});

function framed(text: string, compressed = false): Buffer {
  const out = grpcFrame(Buffer.from(text));
  out[0] = compressed ? 1 : 0;
  return out;
}

async function listen(server: net.Server): Promise<string> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return `127.0.0.1:${(server.address() as AddressInfo).port}`;
}

/** Closes `server` at the test's end, its connections first. */
function closeAtEnd(server: net.Server, sockets: net.Socket[]): void {
  cleanup.push(
    () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  );
}

async function server(onStream: (stream: ServerHttp2Stream, headers: IncomingHttpHeaders) => void): Promise<{ address: string }> {
  const h2 = http2.createServer();
  h2.on('stream', (stream: ServerHttp2Stream, headers: IncomingHttpHeaders) => {
    stream.on('error', () => undefined);
    onStream(stream, headers);
  });
  const sessions: http2.ServerHttp2Session[] = [];
  h2.on('session', (session) => sessions.push(session));
  const address = await listen(h2);
  cleanup.push(
    () =>
      new Promise<void>((resolve) => {
        for (const session of sessions) session.destroy();
        h2.close(() => resolve());
      }),
  );
  return { address };
}

/**
 * A TCP relay to `target` that can stop passing bytes either way (a node whose process is
 * paused: its connections stay open and nothing comes back, not even HTTP/2's PING acks).
 */
async function relay(target: string): Promise<{ address: string; freeze: () => void }> {
  let frozen = false;
  const sockets: net.Socket[] = [];
  const [host, port] = target.split(':') as [string, string];
  const tcp = net.createServer((socket) => {
    const upstream = net.connect(Number(port), host);
    sockets.push(socket, upstream);
    for (const s of [socket, upstream]) s.on('error', () => undefined);
    socket.on('data', (chunk) => frozen || upstream.write(chunk));
    upstream.on('data', (chunk) => frozen || socket.write(chunk));
  });
  const address = await listen(tcp);
  closeAtEnd(tcp, sockets);
  return { address, freeze: () => (frozen = true) };
}

function sessions(options: Partial<ConstructorParameters<typeof Http2Sessions>[0]> = {}): Http2Sessions {
  const made = new Http2Sessions({ tls: null, windowBytes: 1024 * 1024, connectTimeoutMs: 1_000, keepaliveMs: 0, keepaliveTimeoutMs: 1_000, ...options });
  cleanup.push(() => made.close());
  return made;
}

interface Seen {
  readonly data: string[];
  readonly errors: unknown[];
  readonly status: Promise<StatusObject>;
}

function call(on: Http2Sessions, address: string, headers: Record<string, string> = {}, receiveBytesMax = 1024): { call: Http2Call<string, string>; seen: Seen } {
  const c = new Http2Call<string, string>(on, {
    address,
    path: '/test.Service/Stream',
    serialize: (value) => Buffer.from(value),
    deserialize: (bytes) => bytes.toString(),
    headers,
    receiveBytesMax,
  });
  const data: string[] = [];
  const errors: unknown[] = [];
  c.on('data', (value: string) => data.push(value));
  c.on('error', (error: unknown) => errors.push(error));
  const status = new Promise<StatusObject>((resolve) => c.on('status', resolve));
  return { call: c, seen: { data, errors, status } };
}

describe('a stream on the SDK own HTTP/2 connection', () => {
  it('sends a gRPC request with its metadata, reads the answers, and ends with the trailers status and metadata', async () => {
    let request: IncomingHttpHeaders | undefined;
    const received: Buffer[] = [];
    const { address } = await server((stream, headers) => {
      request = headers;
      stream.on('data', (chunk: Buffer) => received.push(chunk));
      stream.on('end', () => {
        stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
        stream.on('wantTrailers', () =>
          stream.sendTrailers({ 'grpc-status': String(Status.UNAVAILABLE), 'grpc-message': 'not the leader: 100%25 sure', 'quorumq-leader': '127.0.0.1:7001', 'quorumq-reason': 'NOT_LEADER' }),
        );
        // One message split over two DATA frames, then one whole.
        const one = framed('first answer');
        stream.write(one.subarray(0, 7));
        setTimeout(() => {
          stream.write(one.subarray(7));
          stream.end(framed('second'));
        }, 20);
      });
    });
    const { call: c, seen } = call(sessions(), address, { 'quorumq-session': 'session-1', authorization: 'Basic dTpw' });
    c.write('hello');
    c.write('world');
    c.end();
    const status = await seen.status;
    expect(request?.[':method']).toBe('POST');
    expect(request?.[':path']).toBe('/test.Service/Stream');
    expect(request?.['content-type']).toBe('application/grpc');
    expect(request?.te).toBe('trailers');
    expect(request?.['quorumq-session']).toBe('session-1');
    expect(request?.authorization).toBe('Basic dTpw');
    expect(Buffer.concat(received)).toEqual(Buffer.concat([framed('hello'), framed('world')]));
    expect(seen.data).toEqual(['first answer', 'second']);
    expect(status.code).toBe(Status.UNAVAILABLE);
    expect(status.details).toBe('not the leader: 100% sure');
    // As the publisher reads it: retriable, towards the leader the trailer names.
    const error = toQuorumqError(seen.errors[0], address);
    expect(error.code).toBe('UNAVAILABLE');
    expect(error.leader).toBe('127.0.0.1:7001');
    expect(error.reason).toBe('NOT_LEADER');
  });

  it('ends OK with a status and no error when the server ends the call OK', async () => {
    const { address } = await server((stream) => {
      stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
      stream.on('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0', 'grpc-message': 'OK' }));
      stream.end(framed('only'));
    });
    const { seen } = call(sessions(), address);
    const status = await seen.status;
    expect(status.code).toBe(Status.OK);
    expect(seen.data).toEqual(['only']);
    expect(seen.errors).toEqual([]);
  });

  it('reads a status sent alone (trailers-only)', async () => {
    const { address } = await server((stream) => {
      stream.respond({ ':status': 200, 'content-type': 'application/grpc', 'grpc-status': String(Status.PERMISSION_DENIED), 'grpc-message': 'no' }, { endStream: true });
    });
    const { seen } = call(sessions(), address);
    const status = await seen.status;
    expect(status.code).toBe(Status.PERMISSION_DENIED);
    expect(status.details).toBe('no');
    expect(seen.errors).toHaveLength(1);
  });

  it('maps an HTTP error without a gRPC status as grpc-js does (503: UNAVAILABLE)', async () => {
    const { address } = await server((stream) => {
      stream.respond({ ':status': 503 }, { endStream: true });
    });
    const { seen } = call(sessions(), address);
    expect((await seen.status).code).toBe(Status.UNAVAILABLE);
  });

  it('ends UNAVAILABLE when the stream is reset, or the connection lost, before a status', async () => {
    const { address } = await server((stream) => {
      stream.on('data', (chunk: Buffer) => {
        if (chunk.includes(Buffer.from('reset'))) stream.close(http2.constants.NGHTTP2_REFUSED_STREAM);
        else stream.session?.destroy();
      });
    });
    const on = sessions();
    const first = call(on, address);
    first.call.write('reset');
    const reset = await first.seen.status;
    expect(reset.code).toBe(Status.UNAVAILABLE);
    expect(toQuorumqError(first.seen.errors[0]).retriable).toBe(true);
    const second = call(on, address);
    second.call.write('drop');
    expect((await second.seen.status).code).toBe(Status.UNAVAILABLE);
    // A new connection for the next call: the lost one is not reused.
    const third = call(on, address);
    third.call.write('reset');
    expect((await third.seen.status).code).toBe(Status.UNAVAILABLE);
  });

  it('refuses an answer over the receive limit (RESOURCE_EXHAUSTED) or compressed (it offered no compression)', async () => {
    const { address } = await server((stream) => {
      stream.on('data', (chunk: Buffer) => {
        stream.respond({ ':status': 200, 'content-type': 'application/grpc' });
        stream.write(chunk.includes(Buffer.from('big')) ? framed('x'.repeat(100)) : framed('zz', true));
      });
    });
    const on = sessions();
    const big = call(on, address, {}, 50);
    big.call.write('big');
    const tooLarge = await big.seen.status;
    expect(tooLarge.code).toBe(Status.RESOURCE_EXHAUSTED);
    expect(big.seen.data).toEqual([]);
    const zipped = call(on, address);
    zipped.call.write('zip');
    expect((await zipped.seen.status).code).toBe(Status.UNIMPLEMENTED);
  });

  it('ends CANCELLED when cancelled, and a write after the end reports it', async () => {
    const { address } = await server(() => undefined);
    const { call: c, seen } = call(sessions(), address);
    c.write('one');
    c.cancel();
    expect((await seen.status).code).toBe(Status.CANCELLED);
    const error = await new Promise<Error | null | undefined>((resolve) => c.write('late', resolve));
    expect(error).toBeInstanceOf(Error);
  });

  it('gives up a connection whose keepalive ping is not answered: its streams end UNAVAILABLE', async () => {
    // A server whose process stops answering after the stream opened: its socket no longer read.
    const frozen: Array<() => void> = [];
    const { address: node } = await server((stream) => {
      stream.respond({ ':status': 200, 'content-type': 'application/grpc' });
      stream.write(framed('subscribed'));
      setTimeout(() => frozen[0]?.(), 50);
    });
    const { address, freeze } = await relay(node);
    frozen.push(freeze);
    const started = Date.now();
    const { seen } = call(sessions({ keepaliveMs: 100, keepaliveTimeoutMs: 300 }), address);
    const status = await seen.status;
    expect(seen.data).toEqual(['subscribed']);
    expect(status.code).toBe(Status.UNAVAILABLE);
    expect(status.details).toMatch(/closed|keepalive/);
    expect(Date.now() - started).toBeLessThan(5_000);
  });

  it('rejects a connection that is not up within connectTimeoutMs (a hung node), and connects to one that answers', async () => {
    // Accepts connections and never sends a byte: HTTP/2's handshake never completes.
    const accepted: net.Socket[] = [];
    const hung = net.createServer((socket) => {
      accepted.push(socket);
      socket.on('error', () => undefined);
    });
    const hungAddress = await listen(hung);
    closeAtEnd(hung, accepted);
    const on = sessions({ connectTimeoutMs: 200 });
    const started = Date.now();
    const failure = await on.connected(hungAddress).then(
      () => null,
      (error: unknown) => toQuorumqError(error),
    );
    expect(failure?.code).toBe('UNAVAILABLE');
    expect(failure?.message).toMatch(/within 200 ms/);
    expect(Date.now() - started).toBeGreaterThanOrEqual(150);
    expect(on.isConnected(hungAddress)).toBe(false);

    const { address } = await server(() => undefined);
    await on.connected(address);
    expect(on.isConnected(address)).toBe(true);
    // Closed while a caller waits for a connection: it is told the client closed (not retriable).
    const waiting = on.connected(hungAddress).then(
      () => null,
      (error: unknown) => toQuorumqError(error),
    );
    on.close();
    expect(await waiting).toMatchObject({ code: 'CANCELLED', reason: 'CLIENT_CLOSED', retriable: false });
    expect(() => on.connection(address)).toThrow(/closed/);
  });
});
