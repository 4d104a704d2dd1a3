import http2 from 'node:http2';
import { grpcFrame } from '@quorumq/proto/grpc-frames';
import zlib from 'node:zlib';
import { Metadata, Server, ServerCredentials, credentials, makeGenericClientConstructor, status as Status, type ServiceError } from '@grpc/grpc-js';
import { BrokerService } from '@quorumq/proto';
import { afterEach, describe, expect, it } from 'vitest';

import { invalidArgument } from '../src/errors.js';
import { brokerStreamMethods, serveBrokerStreams } from '../src/served-broker-streams.js';
import { UnreadableRequest } from '../src/unreadable.js';

const closers: Array<() => void> = [];
afterEach(() => {
  for (const close of closers.splice(0)) close();
});

const identity = (bytes: Buffer): Buffer => bytes;
const ECHO = { path: '/test.Served/Echo', requestStream: true, responseStream: true, requestSerialize: identity, requestDeserialize: identity, responseSerialize: identity, responseDeserialize: identity };
const EchoClient = makeGenericClientConstructor({ echo: ECHO }, 'Served');

interface Served {
  write(value: Buffer): boolean;
  end(): void;
  emit(event: 'error', status: { code: number; details: string; metadata?: Metadata }): boolean;
  on(event: string, listener: (...args: never[]) => void): unknown;
  readonly cancelled: boolean;
}

/**
 * A grpc-js server whose Echo stream is served by serveBrokerStreams: each message is answered
 * `got:<message>`; "fail" ends the call with FAILED_PRECONDITION and a trailer; "hang" is never
 * answered and the call is not ended; "bad" is unreadable (as server.ts's lenient deserializers
 * return it).
 */
async function echoServer(): Promise<{ address: string; events: string[] }> {
  const events: string[] = [];
  const server = new Server();
  const handler = (call: Served): void => {
    let hanging = false;
    call.on('data', (message: Buffer) => {
      const text = message.toString();
      events.push(`data:${text}`);
      if (text === 'hang') hanging = true;
      else if (text === 'fail') {
        const metadata = new Metadata();
        metadata.set('quorumq-leader', '127.0.0.1:9999');
        call.emit('error', { code: Status.FAILED_PRECONDITION, details: 'not here', metadata });
      } else call.write(Buffer.from(`got:${text}`));
    });
    call.on('end', () => {
      events.push('end');
      if (!hanging) call.end();
    });
    call.on('cancelled', () => events.push('cancelled'));
  };
  const deserialize = (bytes: Buffer): Buffer | UnreadableRequest => (bytes.toString() === 'bad' ? new UnreadableRequest(invalidArgument('bad is unreadable')) : bytes);
  serveBrokerStreams(server, { echo: handler as never }, [{ path: ECHO.path, handler: 'echo', deserialize, serialize: identity as never }], 1024);
  server.addService({ echo: ECHO }, { echo: () => events.push('grpc-js served it') });
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', ServerCredentials.createInsecure(), (error, bound) => (error ? reject(error) : resolve(bound))),
  );
  closers.push(() => server.forceShutdown());
  return { address: `127.0.0.1:${port}`, events };
}

function framed(body: Buffer, compressed = false): Buffer {
  const out = grpcFrame(body);
  out[0] = compressed ? 1 : 0;
  return out;
}

/** A raw HTTP/2 call: sends `messages` (already framed) with `headers`, ends, and reads the answer. */
async function rawCall(address: string, headers: Record<string, string>, messages: Buffer[], endInput = true): Promise<{ headers: http2.IncomingHttpHeaders; trailers: http2.IncomingHttpHeaders; data: Buffer }> {
  const session = http2.connect(`http://${address}`);
  closers.push(() => session.destroy());
  const request = session.request({ ':method': 'POST', ':path': ECHO.path, 'content-type': 'application/grpc', te: 'trailers', ...headers });
  for (const message of messages) request.write(message);
  if (endInput) request.end();
  return new Promise((resolve) => {
    let responseHeaders: http2.IncomingHttpHeaders = {};
    let trailers: http2.IncomingHttpHeaders = {};
    const chunks: Buffer[] = [];
    request.on('response', (h) => {
      responseHeaders = h;
    });
    request.on('trailers', (t) => {
      trailers = t;
    });
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    // The server's side ended (its input may still be open: the call ended without it).
    request.on('end', () => resolve({ headers: responseHeaders, trailers, data: Buffer.concat(chunks) }));
  });
}

describe("the client's streams on node:http2 (served-broker-streams.ts)", () => {
  it('serves PublishStream and Consume, by their paths', () => {
    expect(brokerStreamMethods(BrokerService).map((m) => [m.path, m.handler])).toEqual([
      [BrokerService.publishStream.path, 'publishStream'],
      [BrokerService.consume.path, 'consume'],
    ]);
  });

  it('answers a grpc-js client, and a status with its metadata reaches it in the trailers', async () => {
    const { address, events } = await echoServer();
    const client = new EchoClient(address, credentials.createInsecure());
    closers.push(() => client.close());
    const call = client.makeBidiStreamRequest(ECHO.path, identity, identity);
    const got: string[] = [];
    call.on('data', (m: Buffer) => got.push(m.toString()));
    const status = new Promise<ServiceError>((resolve) => call.on('error', resolve));
    call.write(Buffer.from('a'));
    call.write(Buffer.from('b'));
    call.write(Buffer.from('fail'));
    const error = await status;
    expect(got).toEqual(['got:a', 'got:b']);
    expect(error.code).toBe(Status.FAILED_PRECONDITION);
    expect(error.details).toBe('not here');
    expect(error.metadata.get('quorumq-leader')).toEqual(['127.0.0.1:9999']);
    expect(events).not.toContain('grpc-js served it');
  });

  it("ends a call at its deadline with DEADLINE_EXCEEDED, and the handler sees 'cancelled'", async () => {
    const { address, events } = await echoServer();
    const client = new EchoClient(address, credentials.createInsecure());
    closers.push(() => client.close());
    const call = client.makeBidiStreamRequest(ECHO.path, identity, identity, new Metadata(), { deadline: Date.now() + 300 });
    const status = new Promise<ServiceError>((resolve) => call.on('error', resolve));
    call.write(Buffer.from('hang'));
    expect((await status).code).toBe(Status.DEADLINE_EXCEEDED);
    // The server's own timer, not only the client's: a raw call with grpc-timeout.
    const raw = await rawCall(address, { 'grpc-timeout': '200m' }, [framed(Buffer.from('hang'))], false);
    expect(raw.trailers['grpc-status'] ?? raw.headers['grpc-status']).toBe(String(Status.DEADLINE_EXCEEDED));
    expect(events.filter((e) => e === 'cancelled').length).toBeGreaterThanOrEqual(1);
  });

  it('reads gzip and deflate messages, and refuses another encoding with UNIMPLEMENTED', async () => {
    const { address } = await echoServer();
    const gzip = await rawCall(address, { 'grpc-encoding': 'gzip' }, [framed(zlib.gzipSync(Buffer.from('zipped')), true), framed(Buffer.from('plain'))]);
    expect(gzip.trailers['grpc-status']).toBe('0');
    expect(gzip.headers['grpc-accept-encoding']).toBe('identity,deflate,gzip');
    expect(gzip.data.toString()).toContain('got:zipped');
    expect(gzip.data.toString()).toContain('got:plain');
    const deflate = await rawCall(address, { 'grpc-encoding': 'deflate' }, [framed(zlib.deflateSync(Buffer.from('squeezed')), true)]);
    expect(deflate.data.toString()).toContain('got:squeezed');
    const snappy = await rawCall(address, { 'grpc-encoding': 'snappy' }, [framed(Buffer.from('x'), true)]);
    expect(snappy.headers['grpc-status']).toBe(String(Status.UNIMPLEMENTED));
    expect(snappy.headers['grpc-accept-encoding']).toBe('identity,deflate,gzip');
    // Compressed without an encoding named: refused, as on the Raft stream.
    const unnamed = await rawCall(address, {}, [framed(Buffer.from('x'), true)]);
    expect(unnamed.headers['grpc-status'] ?? unnamed.trailers['grpc-status']).toBe(String(Status.UNIMPLEMENTED));
  });

  it('a message that inflates past the limit is RESOURCE_EXHAUSTED, one that does not inflate INTERNAL', async () => {
    const { address } = await echoServer();
    const bomb = await rawCall(address, { 'grpc-encoding': 'gzip' }, [framed(zlib.gzipSync(Buffer.alloc(64 * 1024)), true)]);
    expect(bomb.headers['grpc-status'] ?? bomb.trailers['grpc-status']).toBe(String(Status.RESOURCE_EXHAUSTED));
    const broken = await rawCall(address, { 'grpc-encoding': 'gzip' }, [framed(Buffer.from('not gzip at all'), true)]);
    expect(broken.headers['grpc-status'] ?? broken.trailers['grpc-status']).toBe(String(Status.INTERNAL));
  });

  it('an unreadable message ends the input: what came before is answered, then the call ends with the refusal', async () => {
    const { address, events } = await echoServer();
    const raw = await rawCall(address, {}, [framed(Buffer.from('one')), framed(Buffer.from('bad')), framed(Buffer.from('never'))], false);
    expect(raw.data.toString()).toContain('got:one');
    expect(raw.data.toString()).not.toContain('never');
    expect(raw.trailers['grpc-status']).toBe(String(Status.INVALID_ARGUMENT));
    expect(decodeURIComponent(String(raw.trailers['grpc-message']))).toContain('bad is unreadable');
    expect(events).toEqual(['data:one', 'end']);
  });
});
