/**
 * Issue 17: clients over TLS, the nodes among themselves over mutual TLS on their own
 * listener. A cluster of real node processes with certificates from a CA made for the test
 * (LocalCluster's `tls`, no cluster secret: the certificates alone prove who a peer is).
 */
import { Metadata, credentials, makeGenericClientConstructor, type ChannelCredentials, type Client, type ServiceError } from '@grpc/grpc-js';
import { makeCertificate, makeClusterCertificates, makeNodeCertificate, type ClusterCertificates } from '@quorumq/cli';
import { connect } from '@quorumq/client';
import { PeerService, RaftTransportService } from '@quorumq/proto';
import { X509Certificate } from 'node:crypto';
import { copyFileSync, mkdtempSync, readFileSync, renameSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect as tlsConnect } from 'node:tls';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { encodeRaftBatch } from '../src/raft-codec.js';
import { TestCluster, waitFor } from './cluster.js';

const PeerClient = makeGenericClientConstructor(PeerService, 'Peer');
const RaftClient = makeGenericClientConstructor(RaftTransportService, 'RaftTransport');
const REFRESH_MS = 300;

let cluster: TestCluster;
let certs: ClusterCertificates;
/** Certificates from a CA the cluster does not know. */
let foreign: ClusterCertificates;
let scratch: string;
const grpcClients: Client[] = [];

beforeAll(async () => {
  cluster = await TestCluster.start({ tls: { refreshMs: REFRESH_MS }, metrics: true });
  certs = cluster.local.certificates!;
  scratch = mkdtempSync(join(tmpdir(), 'quorumq-tls-test-'));
  foreign = makeClusterCertificates(join(scratch, 'foreign'), ['n1', 'n2', 'n3']);
});

afterAll(async () => {
  for (const client of grpcClients) client.close();
  await cluster?.close();
  rmSync(scratch, { recursive: true, force: true });
});

const sslWith = (ca: string, pair?: { cert: string; key: string }): ChannelCredentials =>
  credentials.createSsl(readFileSync(ca), pair === undefined ? null : readFileSync(pair.key), pair === undefined ? null : readFileSync(pair.cert));

/** A FetchBodies call (harmless) to a peer port, as node `claimed`, over `channel`; its status code (0: answered). */
function peerCall(address: string, channel: ChannelCredentials, claimed: string): Promise<number> {
  const client = new PeerClient(address, channel);
  grpcClients.push(client);
  const metadata = new Metadata();
  metadata.set('quorumq-node-id', claimed);
  return new Promise((resolve) => {
    client.makeUnaryRequest(
      PeerService.fetchBodies.path,
      PeerService.fetchBodies.requestSerialize,
      PeerService.fetchBodies.responseDeserialize,
      { groupId: 'q/none', snapshotIndex: 1, messageIds: [], bytesMax: 1 },
      metadata,
      { deadline: Date.now() + 5_000 },
      (error: ServiceError | null) => resolve(error === null ? 0 : error.code),
    );
  });
}

/** Opens a Raft stream as `claimed`; how it ended ('open' when it stayed up). */
async function raftStream(address: string, channel: ChannelCredentials, claimed: string): Promise<string> {
  const client = new RaftClient(address, channel);
  grpcClients.push(client);
  const metadata = new Metadata();
  metadata.set('quorumq-node-id', claimed);
  const stream = client.makeBidiStreamRequest(RaftTransportService.stream.path, encodeRaftBatch, RaftTransportService.stream.responseDeserialize, metadata);
  const ended = new Promise<string>((resolve) => {
    stream.on('error', (error: ServiceError) => resolve(`${error.code}: ${error.details}`));
    stream.on('end', () => resolve('ended'));
    stream.on('data', () => {});
  });
  stream.write([]);
  const outcome = await Promise.race([ended, new Promise<string>((resolve) => setTimeout(() => resolve('open'), 1500))]);
  stream.cancel();
  return outcome;
}

async function metric(id: string, name: string): Promise<number> {
  const address = cluster.local.node(id).metricsAddress;
  const text = await (await fetch(`http://${address}/metrics`)).text();
  let total = 0;
  for (const line of text.split('\n')) if (line.startsWith(name)) total += Number(line.slice(line.lastIndexOf(' ') + 1));
  return total;
}

/** The SHA-256 fingerprint of the certificate a new TLS connection to `address` is shown. */
function servedFingerprint(address: string): Promise<string> {
  const [host, port] = address.split(':');
  return new Promise((resolve, reject) => {
    const socket = tlsConnect({ host, port: Number(port), ca: readFileSync(certs.ca.cert), ALPNProtocols: ['h2'], servername: 'localhost' }, () => {
      const fingerprint = socket.getPeerCertificate().fingerprint256;
      socket.destroy();
      resolve(fingerprint);
    });
    socket.once('error', reject);
  });
}

const fingerprintOf = (file: string): string => new X509Certificate(readFileSync(file)).fingerprint256;

describe('clients over TLS', () => {
  it('publish and consume end to end through the SDK, from any node (proxied to the leader over the peers\' mutual TLS)', async () => {
    const client = cluster.client();
    await client.declareQueue('tls-orders');
    const publisher = client.createPublisher({ producerId: 'tls-test' });
    await Promise.all(Array.from({ length: 50 }, (_, i) => publisher.publish('tls-orders', `m${i}`)));
    await publisher.close();
    expect((await client.queueStatus('tls-orders')).ready).toBe(50);
    // A node that is not the leader proxies the consume to it, on the leader's peer listener.
    const leader = await cluster.leaderOf('tls-orders', client);
    const other = cluster.nodes.find((n) => n.id !== leader)!;
    const proxied = cluster.client({ nodes: [other.address], leaderRouting: false });
    const consumer = proxied.consume('tls-orders', { prefetch: 10 });
    const seen = new Set<string>();
    for await (const delivery of consumer) {
      seen.add(delivery.body.toString());
      await delivery.ack();
      if (seen.size === 50) break;
    }
    await consumer.close();
    expect(seen.size).toBe(50);
    expect((await proxied.queueStatus('tls-orders')).ready).toBe(0);
    // ClusterStatus tells the client addresses (learnt from the peers), never the peer ports.
    const addresses = async (): Promise<string[]> => Object.values((await client.clusterStatus()).nodes).map((n) => n.address);
    await waitFor(async () => (await addresses()).every((address) => address !== ''));
    expect((await addresses()).sort()).toEqual([...cluster.addresses].sort());
  });

  it('a client without a certificate is served (client certificates are optional here)', async () => {
    const client = cluster.client({ tls: { ca: certs.ca.cert } });
    expect(Object.keys((await client.clusterStatus()).nodes)).toHaveLength(3);
  });

  it('a plaintext client fails against the TLS port', async () => {
    const plain = connect({ nodes: [cluster.addresses[0]!], failoverTimeoutMs: 1_000, callTimeoutMs: 1_000 });
    const error = await plain.clusterStatus().then(
      () => null,
      (e: unknown) => e,
    );
    await plain.close();
    expect(error).not.toBeNull();
    expect((error as { code: string }).code).toBe('UNAVAILABLE');
  });

  it('a client that trusts another CA fails the handshake', async () => {
    const wrong = connect({ nodes: [cluster.addresses[0]!], tls: { ca: foreign.ca.cert }, failoverTimeoutMs: 1_000, callTimeoutMs: 1_000 });
    const error = await wrong.clusterStatus().then(
      () => null,
      (e: unknown) => e,
    );
    await wrong.close();
    expect((error as { code: string } | null)?.code).toBe('UNAVAILABLE');
  });
});

describe('mutual TLS between the nodes', () => {
  it('a peer with its own certificate, claiming its own id, is served', async () => {
    const n1 = cluster.local.node('n1');
    expect(await peerCall(n1.peerAddress, sslWith(certs.ca.cert, certs.nodes.get('n2')), 'n2')).toBe(5); // NOT_FOUND: no such group, but served
    expect(await raftStream(n1.peerAddress, sslWith(certs.ca.cert, certs.nodes.get('n2')), 'n2')).toBe('open');
  });

  it('a certificate from the cluster CA that names no node, or another node than the one claimed, is refused UNAUTHENTICATED', async () => {
    const n1 = cluster.local.node('n1');
    const before = await metric('n1', 'quorumq_peer_calls_refused_total');
    const client = sslWith(certs.ca.cert, certs.client);
    expect(await peerCall(n1.peerAddress, client, 'client')).toBe(16);
    expect(await peerCall(n1.peerAddress, client, 'n2')).toBe(16);
    expect(await raftStream(n1.peerAddress, client, 'n2')).toMatch(/^16: .*cluster credentials/);
    // n2's own certificate, claiming to be n3; n1's, claiming to be n1 (itself).
    expect(await peerCall(n1.peerAddress, sslWith(certs.ca.cert, certs.nodes.get('n2')), 'n3')).toBe(16);
    expect(await peerCall(n1.peerAddress, sslWith(certs.ca.cert, certs.nodes.get('n1')), 'n1')).toBe(16);
    expect(await metric('n1', 'quorumq_peer_calls_refused_total')).toBe(before + 5);
    expect(cluster.local.unexpectedExits).toEqual([]);
  });

  it('a certificate from another CA, or none, fails at the handshake', async () => {
    const n1 = cluster.local.node('n1');
    // Another CA's certificate for "n2": the node does not trust it.
    expect(await peerCall(n1.peerAddress, sslWith(certs.ca.cert, foreign.nodes.get('n2')), 'n2')).toBe(14); // UNAVAILABLE
    // No client certificate at all.
    expect(await peerCall(n1.peerAddress, sslWith(certs.ca.cert), 'n2')).toBe(14);
    // Plaintext.
    expect(await peerCall(n1.peerAddress, credentials.createInsecure(), 'n2')).toBe(14);
  });
});

describe('certificate reload', () => {
  it('replaced certificate files are served to new connections without a restart; a broken pair keeps the last good one', async () => {
    const node = cluster.local.node('n3');
    const files = certs.nodes.get('n3')!;
    expect(await servedFingerprint(node.address)).toBe(fingerprintOf(files.cert));
    const fresh = makeNodeCertificate(certs.ca, join(scratch, 'fresh'), 'n3');
    // Key first, then certificate (each an atomic rename): between the two the pair does not
    // match, which the node must ride out.
    copyFileSync(fresh.key, `${files.key}.tmp`);
    renameSync(`${files.key}.tmp`, files.key);
    await new Promise((resolve) => setTimeout(resolve, REFRESH_MS * 3));
    expect(await servedFingerprint(node.address)).toBe(fingerprintOf(cluster.local.certificates!.nodes.get('n3')!.cert));
    copyFileSync(fresh.cert, `${files.cert}.tmp`);
    renameSync(`${files.cert}.tmp`, files.cert);
    await waitFor(async () => (await servedFingerprint(node.address)) === fingerprintOf(fresh.cert), 10_000);
    // The new certificate serves clients, and the peers (new channels check it names n3).
    const client = cluster.client({ nodes: [node.address], leaderRouting: false });
    expect((await client.clusterStatus()).node).toBe('n3');
    // A client certificate from the same CA still works after the reload.
    const extra = makeCertificate(certs.ca, join(scratch, 'extra'), 'alice', 'alice');
    const alice = cluster.client({ nodes: [node.address], tls: { ca: certs.ca.cert, cert: extra.cert, key: extra.key } });
    expect((await alice.clusterStatus()).node).toBe('n3');
    expect(cluster.local.unexpectedExits).toEqual([]);
  });
});
