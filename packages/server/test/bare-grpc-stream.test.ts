import { Metadata, Server, ServerCredentials, makeGenericClientConstructor, credentials, status as Status, type ServerDuplexStream, type ServiceError } from '@grpc/grpc-js';
import { grpcFrame } from '@quorumq/proto/grpc-frames';
import { createServer, type Server as NetServer } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';

import { DialledStream, GrpcMessageReader, ServedStream, type DialOptions, type StreamStatus } from '../src/bare-grpc-stream.js';
import { onHttp2Server, serveOnHttp2Server } from '../src/grpc-http2-server.js';

const closers: Array<() => void> = [];
afterEach(() => {
  for (const close of closers.splice(0)) close();
});

const identity = (bytes: Buffer): Buffer => bytes;
const STREAM = { path: '/test.Bare/Stream', requestStream: true, responseStream: true, requestSerialize: identity, requestDeserialize: identity, responseSerialize: identity, responseDeserialize: identity };
const UNARY = { path: '/test.Bare/Unary', requestStream: false, responseStream: false, requestSerialize: identity, requestDeserialize: identity, responseSerialize: identity, responseDeserialize: identity };
const BareClient = makeGenericClientConstructor({ stream: STREAM, unary: UNARY }, 'Bare');

/** A gRPC message as it travels: flag byte, 4-byte length, body. */
function framed(body: Buffer, compressed = false): Buffer {
  const out = grpcFrame(body);
  out[0] = compressed ? 1 : 0;
  return out;
}

async function until(condition: () => boolean, ms = 5000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!condition() && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 10));
}

/**
 * A grpc-js server whose STREAM calls the test serves itself (as the node serves its Raft
 * stream) and whose UNARY call grpc-js serves; the served streams are collected.
 */
async function bareServer(
  decode: (bytes: Buffer) => unknown = (bytes) => bytes.toString(),
  bytesMax = 1024,
): Promise<{ address: string; served: Array<ServedStream<unknown>>; got: unknown[][]; shutdown: () => void }> {
  const served: Array<ServedStream<unknown>> = [];
  const got: unknown[][] = [];
  const server = new Server();
  onHttp2Server(server, (http2Server) =>
    serveOnHttp2Server(http2Server, STREAM.path, (stream, headers) => {
      const call = new ServedStream(stream, headers, decode, bytesMax);
      const messages: unknown[] = [];
      call.on('data', (message: unknown) => messages.push(message));
      served.push(call);
      got.push(messages);
    }),
  );
  server.addService({ stream: STREAM, unary: UNARY }, {
    stream: (call: ServerDuplexStream<Buffer, Buffer>) => call.emit('error', { code: Status.INTERNAL, details: 'grpc-js served the stream' }),
    unary: (call: { request: Buffer }, callback: (error: null, reply: Buffer) => void) => callback(null, Buffer.concat([Buffer.from('echo:'), call.request])),
  });
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', ServerCredentials.createInsecure(), (error, bound) => (error ? reject(error) : resolve(bound))),
  );
  closers.push(() => server.forceShutdown());
  return { address: `127.0.0.1:${port}`, served, got, shutdown: () => server.forceShutdown() };
}

function grpcClient(address: string): InstanceType<typeof BareClient> {
  const client = new BareClient(address, credentials.createInsecure());
  closers.push(() => client.close());
  return client;
}

const dialOptions = (address: string, overrides: Partial<DialOptions> = {}): DialOptions => ({
  address,
  tls: null,
  windowBytes: 1024 * 1024,
  connectTimeoutMs: 2000,
  keepaliveMs: 10_000,
  keepaliveTimeoutMs: 5_000,
  bufferedBytesMax: 1024 * 1024,
  ...overrides,
});

function dial(address: string, metadata = new Metadata(), overrides: Partial<DialOptions> = {}): { stream: DialledStream; events: Array<[string, unknown]> } {
  const stream = new DialledStream(dialOptions(address, overrides), STREAM.path, metadata);
  const events: Array<[string, unknown]> = [];
  stream.on('metadata', (md: Metadata) => events.push(['metadata', md.getMap()]));
  stream.on('error', (status: StreamStatus) => events.push(['error', status]));
  stream.on('end', () => events.push(['end', null]));
  closers.push(() => stream.end());
  return { stream, events };
}

describe('gRPC messages read from a stream', () => {
  it('come whole however the bytes are split, several to a chunk or one split over many', () => {
    const bodies = [Buffer.from('first'), Buffer.alloc(0), Buffer.alloc(3000, 7), Buffer.from('last')];
    const wire = Buffer.concat(bodies.map((body) => framed(body)));
    for (const step of [1, 2, 5, 6, 4096, wire.length]) {
      const got: Buffer[] = [];
      const problems: StreamStatus[] = [];
      const reader = new GrpcMessageReader(4096, (m) => got.push(Buffer.from(m)), (p) => problems.push(p));
      for (let at = 0; at < wire.length; at += step) reader.push(wire.subarray(at, at + step));
      expect(problems).toEqual([]);
      expect(got).toEqual(bodies);
    }
  });

  it('stop at a message over the limit (RESOURCE_EXHAUSTED) or a compressed one (UNIMPLEMENTED), before anything after it', () => {
    for (const [bad, code] of [
      [framed(Buffer.alloc(101)), Status.RESOURCE_EXHAUSTED],
      [framed(Buffer.from('x'), true), Status.UNIMPLEMENTED],
    ] as const) {
      const got: string[] = [];
      const problems: StreamStatus[] = [];
      const reader = new GrpcMessageReader(100, (m) => got.push(m.toString()), (p) => problems.push(p));
      reader.push(Buffer.concat([framed(Buffer.from('ok')), bad, framed(Buffer.from('after'))]));
      expect(got).toEqual(['ok']);
      expect(problems.map((p) => p.code)).toEqual([code]);
    }
  });
});

describe('a stream served without grpc-js', () => {
  it("is an ordinary gRPC call to a grpc-js client: its metadata, its messages in order, the server's headers and status", async () => {
    const { address, served, got } = await bareServer();
    const client = grpcClient(address);
    const metadata = new Metadata();
    metadata.set('quorumq-node-id', 'n2');
    const call = client.makeBidiStreamRequest(STREAM.path, identity, identity, metadata);
    const seen: { headers?: Metadata; status?: ServiceError | 'ok' } = {};
    call.on('metadata', (md: Metadata) => (seen.headers = md));
    call.on('error', (error: ServiceError) => (seen.status = error));
    call.on('status', (status: { code: number }) => {
      if (status.code === Status.OK) seen.status = 'ok';
    });
    call.on('data', () => {});
    call.write(Buffer.from('one'));
    call.write(Buffer.from('two'));
    await until(() => served.length === 1);
    expect(served[0]!.metadata.get('quorumq-node-id')).toEqual(['n2']);
    const answer = new Metadata();
    answer.set('quorumq-answer', 'yes');
    served[0]!.sendMetadata(answer);
    await until(() => got[0]!.length === 2 && seen.headers !== undefined);
    expect(got[0]).toEqual(['one', 'two']);
    expect(seen.headers?.get('quorumq-answer')).toEqual(['yes']);
    served[0]!.emit('error', { code: Status.FAILED_PRECONDITION, details: 'WRONG_NODE: naïve % test' });
    await until(() => seen.status !== undefined);
    expect(seen.status).toMatchObject({ code: Status.FAILED_PRECONDITION, details: 'WRONG_NODE: naïve % test' });
  });

  it('ends with OK when the server ends it, and with a status alone when it refuses before its headers', async () => {
    const { address, served } = await bareServer();
    const client = grpcClient(address);
    const statuses: number[] = [];
    for (const refuse of [false, true]) {
      const call = client.makeBidiStreamRequest(STREAM.path, identity, identity, new Metadata());
      call.on('status', (status: { code: number }) => statuses.push(status.code));
      call.on('error', () => {});
      call.on('data', () => {});
      call.write(Buffer.from('x'));
      await until(() => served.length === statuses.length + 1);
      const stream = served[served.length - 1]!;
      if (refuse) stream.emit('error', { code: Status.UNAUTHENTICATED, details: 'no' });
      else {
        stream.sendMetadata(new Metadata());
        stream.end();
      }
      await until(() => statuses.length === (refuse ? 2 : 1));
    }
    expect(statuses).toEqual([Status.OK, Status.UNAUTHENTICATED]);
  });

  it('answers bytes its decoder cannot read with INVALID_ARGUMENT, and a message over the limit with RESOURCE_EXHAUSTED; the server serves on', async () => {
    const { address } = await bareServer((bytes) => {
      if (bytes.toString() === 'garbage') throw new Error('not a batch');
      return bytes.toString();
    }, 64);
    const client = grpcClient(address);
    const codes: number[] = [];
    for (const body of [Buffer.from('garbage'), Buffer.alloc(65, 1)]) {
      const call = client.makeBidiStreamRequest(STREAM.path, identity, identity, new Metadata());
      call.on('error', (error: ServiceError) => codes.push(error.code));
      call.on('data', () => {});
      call.write(body);
      const expected = codes.length + 1;
      await until(() => codes.length === expected);
    }
    expect(codes).toEqual([Status.INVALID_ARGUMENT, Status.RESOURCE_EXHAUSTED]);
    const reply = await new Promise<Buffer>((resolve, reject) =>
      client.makeUnaryRequest(UNARY.path, identity, identity, Buffer.from('hi'), (error, value) => (error ? reject(error) : resolve(value!))),
    );
    expect(reply.toString()).toBe('echo:hi');
  });

  it('leaves every other call to grpc-js, and refuses a request that is not gRPC (415)', async () => {
    const { address, served } = await bareServer();
    const { connect } = await import('node:http2');
    const session = connect(`http://${address}`);
    closers.push(() => session.close());
    const status = await new Promise<number>((resolve) => {
      const request = session.request({ ':method': 'POST', ':path': STREAM.path, 'content-type': 'text/plain' });
      request.on('response', (headers) => resolve(Number(headers[':status'])));
      request.end();
    });
    expect(status).toBe(415);
    expect(served).toHaveLength(0);
  });
});

describe('a stream dialled without grpc-js', () => {
  it("reaches a grpc-js server as an ordinary call: its messages in order, the server's headers, then its status", async () => {
    const server = new Server();
    const received: string[] = [];
    let serverCall: ServerDuplexStream<Buffer, Buffer> | null = null;
    server.addService({ stream: STREAM, unary: UNARY }, {
      stream: (call: ServerDuplexStream<Buffer, Buffer>) => {
        serverCall = call;
        call.sendMetadata(new Metadata());
        call.on('data', (m: Buffer) => received.push(`${call.metadata.get('who')[0]}:${m.toString()}`));
      },
      unary: () => {},
    });
    const port = await new Promise<number>((resolve, reject) =>
      server.bindAsync('127.0.0.1:0', ServerCredentials.createInsecure(), (error, bound) => (error ? reject(error) : resolve(bound))),
    );
    closers.push(() => server.forceShutdown());
    const metadata = new Metadata();
    metadata.set('who', 'n2');
    const { stream, events } = dial(`127.0.0.1:${port}`, metadata);
    expect(stream.write(framed(Buffer.from('one')))).toBe(true);
    stream.write(framed(Buffer.from('two')));
    await until(() => received.length === 2 && events.length > 0);
    expect(received).toEqual(['n2:one', 'n2:two']);
    expect(events[0]![0]).toBe('metadata');
    serverCall!.emit('error', { code: Status.FAILED_PRECONDITION, details: 'INCARNATION_CHANGED: ünïcode' });
    await until(() => events.length === 2);
    expect(events[1]).toEqual(['error', { code: Status.FAILED_PRECONDITION, details: 'INCARNATION_CHANGED: ünïcode' }]);
    // Ended: a later write is dropped, not thrown.
    expect(stream.write(framed(Buffer.from('late')))).toBe(false);
  });

  it("ends with 'end' when the server ends it with OK", async () => {
    const { address, served } = await bareServer();
    const { stream, events } = dial(address);
    stream.write(framed(Buffer.from('x')));
    await until(() => served.length === 1);
    served[0]!.sendMetadata(new Metadata());
    served[0]!.end();
    await until(() => events.length === 2);
    expect(events.map(([kind]) => kind)).toEqual(['metadata', 'end']);
  });

  it('fails UNAVAILABLE when nothing listens, when the connection never comes up, or when the server goes away', async () => {
    // Nothing listening.
    const closed = createServer();
    const freePort = await new Promise<number>((resolve) => closed.listen(0, '127.0.0.1', () => resolve((closed.address() as { port: number }).port)));
    await new Promise((resolve) => closed.close(resolve));
    const refused = dial(`127.0.0.1:${freePort}`);
    // A listener that accepts and never speaks HTTP/2 (a hung host).
    const silent: NetServer = createServer(() => {});
    const silentPort = await new Promise<number>((resolve) => silent.listen(0, '127.0.0.1', () => resolve((silent.address() as { port: number }).port)));
    closers.push(() => silent.close());
    const hung = dial(`127.0.0.1:${silentPort}`, new Metadata(), { connectTimeoutMs: 300 });
    // A server that goes away mid-stream.
    const { address, served, shutdown } = await bareServer();
    const gone = dial(address);
    gone.stream.write(framed(Buffer.from('x')));
    await until(() => served.length === 1);
    served[0]!.sendMetadata(new Metadata());
    await until(() => gone.events.length === 1);
    shutdown();
    await until(() => refused.events.length > 0 && hung.events.length > 0 && gone.events.length > 1);
    expect(refused.events).toEqual([['error', expect.objectContaining({ code: Status.UNAVAILABLE })]]);
    expect(hung.events).toEqual([['error', { code: Status.UNAVAILABLE, details: 'no connection within 300 ms' }]]);
    expect(gone.events.map(([kind]) => kind)).toEqual(['metadata', 'error']);
    expect(gone.events[1]![1]).toMatchObject({ code: Status.UNAVAILABLE });
  });

  it("closes its connection once the server refuses it (a refused peer retries every 200 ms: no connection may be left behind)", async () => {
    const open = new Set<unknown>();
    const served: Array<ServedStream<unknown>> = [];
    const server = new Server();
    onHttp2Server(server, (http2Server) => {
      http2Server.on('session', (session) => {
        open.add(session);
        session.on('close', () => open.delete(session));
      });
      serveOnHttp2Server(http2Server, STREAM.path, (stream, headers) => served.push(new ServedStream(stream, headers, (bytes: Buffer) => bytes, 1024)));
    });
    server.addService({ stream: STREAM, unary: UNARY }, { stream: () => {}, unary: () => {} });
    const port = await new Promise<number>((resolve, reject) =>
      server.bindAsync('127.0.0.1:0', ServerCredentials.createInsecure(), (error, bound) => (error ? reject(error) : resolve(bound))),
    );
    closers.push(() => server.forceShutdown());
    for (let i = 0; i < 3; i++) {
      const { stream, events } = dial(`127.0.0.1:${port}`);
      stream.write(framed(Buffer.from('x')));
      await until(() => served.length === i + 1);
      // Refused before reading anything, as the Raft stream refuses a caller without credentials.
      served[i]!.emit('error', { code: Status.UNAUTHENTICATED, details: 'no' });
      await until(() => events.length === 1);
      expect(events[0]).toEqual(['error', { code: Status.UNAUTHENTICATED, details: 'no' }]);
    }
    await until(() => open.size === 0, 2000);
    expect(open.size).toBe(0);
  });

  it('drops a message that would put more than its limit in waiting (a peer that does not read), as a lossy network would', async () => {
    const silent: NetServer = createServer(() => {});
    const port = await new Promise<number>((resolve) => silent.listen(0, '127.0.0.1', () => resolve((silent.address() as { port: number }).port)));
    closers.push(() => silent.close());
    const { stream } = dial(`127.0.0.1:${port}`, new Metadata(), { bufferedBytesMax: 10_000 });
    const body = framed(Buffer.alloc(4000));
    expect([stream.write(body), stream.write(body), stream.write(body)]).toEqual([true, true, false]);
  });
});
