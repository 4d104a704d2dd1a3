/**
 * Issue 17: the peer channels over mutual TLS (tls-credentials.ts, transport.ts), in
 * process: messages flow between nodes whose certificates name them; a peer address that
 * leads to a node with another node's certificate is refused at the handshake (the check is
 * against the node id dialled, not the address's host, here an IP address).
 */
import { Server } from '@grpc/grpc-js';
import { makeClusterCertificates, type ClusterCertificates } from '@quorumq/cli';
import type { Message } from '@quorumq/raft';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';

import type { NodeConfig } from '../src/config.js';
import { PeerAuthenticator } from '../src/peer-auth.js';
import type { GroupMessage } from '../src/raft-codec.js';
import { PeerCredentials } from '../src/tls-credentials.js';
import { PeerTransport, raftStreamHandler, serveRaftStreams } from '../src/transport.js';

let dir: string;
let certs: ClusterCertificates;
const closers: Array<() => void> = [];

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'quorumq-peer-tls-'));
  certs = makeClusterCertificates(dir, ['n1', 'n2', 'n3']);
});
afterEach(() => {
  for (const close of closers.splice(0)) close();
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function logger(lines: string[]) {
  return pino(
    { level: 'info' },
    new Writable({
      write(chunk: Buffer, _encoding, done) {
        lines.push(chunk.toString());
        done();
      },
    }),
  );
}

const PEERS = new Map([
  ['n1', '127.0.0.1:1'],
  ['n2', '127.0.0.1:2'],
  ['n3', '127.0.0.1:3'],
]);

function credentialsOf(id: string, lines: string[]): PeerCredentials {
  const own = certs.nodes.get(id)!;
  const peerTls: NodeConfig['peerTls'] = { certFile: own.cert, keyFile: own.key, caFile: certs.ca.cert };
  return new PeerCredentials({ peerTls, tlsRefreshMs: 60_000 }, logger(lines));
}

/** A peer listener of node `id` (its certificate), on a free loopback port. */
async function peerListener(id: string, received: GroupMessage[], clientAddresses: Array<[string, string]>): Promise<string> {
  const credentials = credentialsOf(id, []);
  const server = new Server();
  serveRaftStreams(
    server,
    raftStreamHandler({
      selfId: id,
      authenticator: new PeerAuthenticator(id, PEERS, null, true),
      onMessage: (m) => received.push(m),
      onClientAddress: (peer, address) => clientAddresses.push([peer, address]),
    }),
  );
  const port = await new Promise<number>((resolve, reject) => server.bindAsync('127.0.0.1:0', credentials.listener(), (error, bound) => (error ? reject(error) : resolve(bound))));
  closers.push(() => server.forceShutdown());
  return `127.0.0.1:${port}`;
}

const heartbeat = (to: string): Message => ({ type: 'heartbeat', from: 'n2', to, term: 3, commit: 7, readSeq: 0, quiesce: false });

async function until(condition: () => boolean, ms = 5000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!condition() && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
}

describe('peer channels over mutual TLS', () => {
  it('carry Raft messages and the client address between nodes whose certificates name them, without a secret', async () => {
    const received: GroupMessage[] = [];
    const told: Array<[string, string]> = [];
    const address = await peerListener('n1', received, told);
    const transport = new PeerTransport('n2', new Map([['n1', address], ['n2', '127.0.0.1:9']]), null, logger([]), () => {}, {
      credentials: credentialsOf('n2', []),
      clientAddress: '127.0.0.1:7002',
    });
    closers.push(() => transport.close());
    transport.send('meta', [heartbeat('n1')]);
    await until(() => received.length > 0 && transport.isConnected('n1'));
    expect(received).toEqual([{ groupId: 'meta', message: heartbeat('n1') }]);
    expect(told).toEqual([['n2', '127.0.0.1:7002']]);
  });

  it('refuse, at the handshake, an address that leads to another node (its certificate names n3, not n1)', async () => {
    const received: GroupMessage[] = [];
    const address = await peerListener('n3', received, []);
    const lines: string[] = [];
    // n2 believes n1 is at n3's address.
    const transport = new PeerTransport('n2', new Map([['n1', address], ['n2', '127.0.0.1:9']]), null, logger(lines), () => {}, { credentials: credentialsOf('n2', []) });
    closers.push(() => transport.close());
    for (let i = 0; i < 10 && !lines.some((l) => l.includes('another certificate')); i++) {
      transport.send('meta', [heartbeat('n1')]);
      transport.keepAlive();
      await new Promise((resolve) => setTimeout(resolve, 300));
    }
    expect(received).toEqual([]);
    expect(transport.isConnected('n1')).toBe(false);
    expect(lines.join('')).toMatch(/peer address reached a node with another certificate; resolving it again/);
    expect(lines.join('')).toMatch(/not node n1/);
  });
});
