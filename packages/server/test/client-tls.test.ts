/**
 * Issue 17: the client listener's TLS modes (tls-credentials.ts), in process, with a handler
 * that answers who the caller is (`clientCertificateIdentity`, tls-identity.ts): none (no
 * certificate asked for), optional (verified when presented; one the CA does not verify
 * gives no identity), required (the handshake fails without one).
 */
import { Server, credentials, makeGenericClientConstructor, type ChannelCredentials, type ServerUnaryCall, type ServiceError, type sendUnaryData } from '@grpc/grpc-js';
import { makeCertificate, makeClusterCertificates, type ClusterCertificates } from '@quorumq/cli';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';

import type { ClientCertificateMode } from '../src/config.js';
import { clientListenerCredentials } from '../src/tls-credentials.js';
import { clientCertificateIdentity } from '../src/tls-identity.js';

/** One unary method whose answer is the caller's identity ('' for none). */
const WHO = {
  who: {
    path: '/quorumq.test.Who/Who',
    requestStream: false,
    responseStream: false,
    requestSerialize: (value: string) => Buffer.from(value),
    requestDeserialize: (bytes: Buffer) => bytes.toString(),
    responseSerialize: (value: string) => Buffer.from(value),
    responseDeserialize: (bytes: Buffer) => bytes.toString(),
  },
};
const WhoClient = makeGenericClientConstructor(WHO, 'Who');

let dir: string;
let certs: ClusterCertificates;
let foreign: ClusterCertificates;
const closers: Array<() => void> = [];

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'quorumq-client-tls-'));
  certs = makeClusterCertificates(join(dir, 'cluster'), ['n1']);
  foreign = makeClusterCertificates(join(dir, 'foreign'), ['n1']);
});
afterEach(() => {
  for (const close of closers.splice(0)) close();
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

async function listener(clientCerts: ClientCertificateMode): Promise<string> {
  const own = certs.nodes.get('n1')!;
  const tls = { certFile: own.cert, keyFile: own.key, caFile: clientCerts === 'none' ? null : certs.ca.cert, clientCerts };
  const server = new Server();
  server.addService(WHO, {
    who: (call: ServerUnaryCall<string, string>, callback: sendUnaryData<string>) => callback(null, clientCertificateIdentity(call) ?? ''),
  });
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', clientListenerCredentials({ tls, tlsRefreshMs: 60_000 }, pino({ level: 'silent' })), (error, bound) => (error ? reject(error) : resolve(bound))),
  );
  closers.push(() => server.forceShutdown());
  return `127.0.0.1:${port}`;
}

/** The identity the listener saw, or `error <code>`. */
function who(address: string, channel: ChannelCredentials): Promise<string> {
  const client = new WhoClient(address, channel);
  closers.push(() => client.close());
  return new Promise((resolve) => {
    client.makeUnaryRequest(WHO.who.path, WHO.who.requestSerialize, WHO.who.responseDeserialize, 'who?', { deadline: Date.now() + 5_000 }, (error: ServiceError | null, answer?: string) =>
      resolve(error !== null ? `error ${error.code}` : (answer ?? '')),
    );
  });
}

const ssl = (pair?: { cert: string; key: string }, ca = certs.ca.cert): ChannelCredentials =>
  credentials.createSsl(readFileSync(ca), pair === undefined ? null : readFileSync(pair.key), pair === undefined ? null : readFileSync(pair.cert));

describe('the client listener over TLS', () => {
  it('none: serves TLS clients, asks for no certificate (so none gives an identity); refuses plaintext', async () => {
    const address = await listener('none');
    expect(await who(address, ssl())).toBe('');
    expect(await who(address, ssl(certs.client))).toBe('');
    expect(await who(address, credentials.createInsecure())).toBe('error 14');
  });

  it('optional: a verified certificate identifies the caller (CN); none, or one of another CA, is served without identity', async () => {
    const address = await listener('optional');
    expect(await who(address, ssl(certs.client))).toBe('client');
    const alice = makeCertificate(certs.ca, join(dir, 'alice'), 'alice', 'alice');
    expect(await who(address, ssl(alice))).toBe('alice');
    const svc = makeCertificate(certs.ca, join(dir, 'svc'), 'svc', '', { dnsNames: ['svc.example'] });
    expect(await who(address, ssl(svc))).toBe('svc.example');
    expect(await who(address, ssl())).toBe('');
    expect(await who(address, ssl(foreign.client))).toBe('');
  });

  it('required: the handshake fails without a certificate the CA verifies', async () => {
    const address = await listener('required');
    expect(await who(address, ssl(certs.client))).toBe('client');
    expect(await who(address, ssl())).toBe('error 14');
    expect(await who(address, ssl(foreign.client))).toBe('error 14');
  });

  it('a client that does not trust the listener\'s CA fails', async () => {
    const address = await listener('none');
    expect(await who(address, ssl(undefined, foreign.ca.cert))).toBe('error 14');
  });
});
