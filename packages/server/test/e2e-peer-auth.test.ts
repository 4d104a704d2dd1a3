/**
 * Issue 12 item 4 and issue 17: the peer services are not callable by clients. They are
 * served only on the peer listener (on the client port they do not exist: UNIMPLEMENTED),
 * and there only to authenticated peers: a client there can neither propose through Peer/ProposeBatch (before: an unknown metadata command
 * made every node exit, for good, and any queue could be deleted) nor step Raft messages
 * through RaftTransport/Stream (before: a forged term of 10^12 moved every group's term).
 * An authenticated peer cannot send in another node's name, nor into a group it is no
 * replica of, and its malformed proposals are refused before they reach the log.
 */
import { Metadata, credentials, makeGenericClientConstructor, type Client, type ServiceError } from '@grpc/grpc-js';
import { BrokerService, PeerService, RaftTransportService, quorumq } from '@quorumq/proto';
import type { Message } from '@quorumq/raft';
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { encodeJson } from '../src/json-codec.js';
import { encodeRaftBatch, type GroupMessage } from '../src/raft-codec.js';
import { TestCluster, waitFor } from './cluster.js';

import pb = quorumq.v1;

const PeerClient = makeGenericClientConstructor(PeerService, 'Peer');
const RaftClient = makeGenericClientConstructor(RaftTransportService, 'RaftTransport');

let cluster: TestCluster;
let secret: string;
const grpcClients: Client[] = [];

beforeAll(async () => {
  cluster = await TestCluster.start({ metrics: true });
  secret = readFileSync(cluster.local.secretFile, 'utf8').trim();
});

afterAll(async () => {
  for (const client of grpcClients) client.close();
  await cluster?.close();
});

function credentialsOf(nodeId: string | null, key: string | null): Metadata {
  const metadata = new Metadata();
  if (nodeId !== null) metadata.set('quorumq-node-id', nodeId);
  if (key !== null) metadata.set('quorumq-cluster-secret', key);
  return metadata;
}

function proposeBatch(address: string, items: pb.ProposeRequest.$Properties[], metadata = new Metadata()): Promise<pb.ProposeBatchResponse> {
  const client = new PeerClient(address, credentials.createInsecure());
  grpcClients.push(client);
  return new Promise((resolve, reject) => {
    client.makeUnaryRequest(
      PeerService.proposeBatch.path,
      PeerService.proposeBatch.requestSerialize,
      PeerService.proposeBatch.responseDeserialize,
      { items },
      metadata,
      { deadline: Date.now() + 10_000 },
      (error: ServiceError | null, response?: pb.ProposeBatchResponse) => (error !== null ? reject(error) : resolve(response as pb.ProposeBatchResponse)),
    );
  });
}

/** Opens a Raft stream to `address`, writes `messages`, and reports how the stream ended (or 'open'). */
async function raftStream(address: string, messages: readonly GroupMessage[], metadata = new Metadata()): Promise<string> {
  const client = new RaftClient(address, credentials.createInsecure());
  grpcClients.push(client);
  const stream = client.makeBidiStreamRequest(RaftTransportService.stream.path, encodeRaftBatch, RaftTransportService.stream.responseDeserialize, metadata);
  const ended = new Promise<string>((resolve) => {
    stream.on('error', (error: ServiceError) => resolve(`${error.code}: ${error.details}`));
    stream.on('end', () => resolve('ended'));
    stream.on('data', () => {});
  });
  stream.write(messages);
  const outcome = await Promise.race([ended, new Promise<string>((resolve) => setTimeout(() => resolve('open'), 1500))]);
  stream.cancel();
  return outcome;
}

const nodeIndex = (id: string): number => cluster.nodes.findIndex((n) => n.id === id);
const peerAddresses = (): string[] => cluster.nodes.map((n) => n.peerAddress);

function clusterStatus(address: string, metadata = new Metadata()): Promise<pb.ClusterStatusResponse> {
  const BrokerClient = makeGenericClientConstructor(BrokerService, 'Broker');
  const client = new BrokerClient(address, credentials.createInsecure());
  grpcClients.push(client);
  return new Promise((resolve, reject) => {
    client.makeUnaryRequest(
      BrokerService.clusterStatus.path,
      BrokerService.clusterStatus.requestSerialize,
      BrokerService.clusterStatus.responseDeserialize,
      {},
      metadata,
      { deadline: Date.now() + 10_000 },
      (error: ServiceError | null, response?: pb.ClusterStatusResponse) => (error !== null ? reject(error) : resolve(response as pb.ClusterStatusResponse)),
    );
  });
}

describe('listeners', () => {
  it('the client port serves no peer service (UNIMPLEMENTED), whatever the credentials', async () => {
    for (const node of cluster.nodes) {
      for (const metadata of [new Metadata(), credentialsOf(otherThan(node.id), secret)]) {
        const propose = await proposeBatch(node.address, [{ groupId: 'meta', command: encodeJson({ type: 'deleteQueue', name: 'x', reason: 'delete' }) }], metadata).then(
          () => null,
          (e: ServiceError) => e,
        );
        expect(propose?.code).toBe(12); // UNIMPLEMENTED
        expect(await raftStream(node.address, forgedTerm(otherThan(node.id), node.id, 'x'), metadata)).toMatch(/^12: /);
      }
    }
    expect(cluster.local.unexpectedExits).toEqual([]);
  });

  it('the peer port serves the peer services and the Broker service to peers with credentials only', async () => {
    const node = cluster.nodes[0]!;
    const peer = otherThan(node.id);
    // A peer's forwarded proposal is answered (by the leader, or with where the leader is).
    const response = await proposeBatch(node.peerAddress, [{ groupId: 'meta', command: Buffer.from('{"type":"wipeEverything"}') }], credentialsOf(peer, secret));
    expect(response.results).toHaveLength(1);
    // The Broker calls other nodes proxy: with the peer's credentials only.
    const status = await clusterStatus(node.peerAddress, credentialsOf(peer, secret));
    expect(status.node).toBe(node.id);
    // The addresses it tells are the client addresses, never the peer ports.
    await waitFor(async () => (await clusterStatus(node.address)).nodes.every((n) => n.address !== ''));
    expect((await clusterStatus(node.address)).nodes.map((n) => n.address).sort()).toEqual([...cluster.addresses].sort());
    const before = await metric(node.id, 'quorumq_peer_calls_refused_total{call="broker"}');
    for (const metadata of [new Metadata(), credentialsOf(peer, 'wrong-secret-wrong-secret'), credentialsOf(node.id, secret), credentialsOf('client', secret)]) {
      const error = await clusterStatus(node.peerAddress, metadata).then(
        () => null,
        (e: ServiceError) => e,
      );
      expect(error?.code).toBe(16); // UNAUTHENTICATED
    }
    expect(await metric(node.id, 'quorumq_peer_calls_refused_total{call="broker"}')).toBe(before + 4);
  });
});
const otherThan = (id: string): string => cluster.nodes.find((n) => n.id !== id)?.id ?? '';

async function metric(id: string, name: string): Promise<number> {
  const address = cluster.nodes[nodeIndex(id)]?.metricsAddress;
  const text = await (await fetch(`http://${address}/metrics`)).text();
  let total = 0;
  for (const line of text.split('\n')) if (line.startsWith(name)) total += Number(line.slice(line.lastIndexOf(' ') + 1));
  return total;
}

/** Forged messages of a huge term for every group id a queue may have (and the metadata group's). */
function forgedTerm(from: string, to: string, queue: string, meta = true): GroupMessage[] {
  const heartbeat = (groupId: string): GroupMessage => ({ groupId, message: { type: 'heartbeat', from, to, term: 1e12, commit: 0, readSeq: 0, quiesce: false } as Message });
  return [...(meta ? [heartbeat('meta')] : []), ...Array.from({ length: 60 }, (_, i) => heartbeat(`q/${i + 1}/${queue}`))];
}

async function terms(names: readonly string[]): Promise<number[]> {
  const client = cluster.client();
  return Promise.all(names.map(async (name) => (await client.queueStatus(name)).term));
}

/** Terms as elections move them (a leader hand-off, say), nowhere near the forged 10^12. */
const unforged = (values: readonly number[]): boolean => values.every((term) => term >= 1 && term < 1000);

describe('peer services on the peer port', () => {
  it('Peer/ProposeBatch without the cluster secret is UNAUTHENTICATED, and proposes nothing', async () => {
    const client = cluster.client();
    await client.declareQueue('precious');
    for (let i = 0; i < 5; i++) await client.publish('', 'precious', `m${i}`);
    const items = [
      { groupId: 'meta', command: Buffer.from('{"type":"wipeEverything"}') },
      { groupId: 'meta', command: encodeJson({ type: 'deleteQueue', name: 'precious', reason: 'delete' }) },
    ];
    const refusals: string[] = [];
    for (const address of peerAddresses()) {
      for (const metadata of [new Metadata(), credentialsOf('n2', 'wrong-secret-wrong-secret'), credentialsOf('n9', 'wrong-secret-wrong-secret'), credentialsOf('n9', secret)]) {
        const error = await proposeBatch(address, items, metadata).then(
          () => null,
          (e: ServiceError) => e,
        );
        expect(error?.code).toBe(16); // UNAUTHENTICATED
        refusals.push(error?.details ?? '');
      }
    }
    // One message whatever was wrong: it does not say whether a node id exists.
    expect(new Set(refusals).size).toBe(1);
    expect(refusals[0]).toMatch(/cluster credentials/);
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(cluster.local.unexpectedExits).toEqual([]);
    expect((await client.queueStatus('precious')).ready).toBe(5);
    expect(await metric('n1', 'quorumq_peer_calls_refused_total{call="propose_batch"}')).toBe(4);
  });

  it('an authenticated peer\'s unknown metadata command is refused INVALID_ARGUMENT; no node exits', async () => {
    const results: pb.ProposeResult.$Properties[] = [];
    for (const node of cluster.nodes) {
      const response = await proposeBatch(node.peerAddress, [{ groupId: 'meta', command: Buffer.from('{"type":"wipeEverything"}') }], credentialsOf(otherThan(node.id), secret));
      results.push(...response.results);
    }
    // The leader refuses it (3 = INVALID_ARGUMENT); the others say they do not lead.
    expect(results.filter((r) => r.errorCode === 3).map((r) => r.errorReason)).toEqual(['MALFORMED_COMMAND']);
    expect(results.every((r) => (r.errorCode ?? 0) !== 0)).toBe(true);
    await new Promise((resolve) => setTimeout(resolve, 1000));
    expect(cluster.local.unexpectedExits).toEqual([]);
    const client = cluster.client();
    expect((await client.publish('', 'precious', 'still-serving')).outcome).toBe('confirmed');
    expect((await client.declareQueue('after-forgery')).created).toBe(true);
  });

  it('RaftTransport/Stream without the secret is UNAUTHENTICATED: a forged term of 10^12 moves no group', async () => {
    const client = cluster.client();
    await client.declareQueue('steady');
    expect(unforged(await terms(['precious', 'steady']))).toBe(true);
    for (const node of cluster.nodes) {
      const from = otherThan(node.id);
      for (const metadata of [new Metadata(), credentialsOf(from, 'wrong-secret-wrong-secret')]) {
        for (const queue of ['precious', 'steady']) {
          expect(await raftStream(node.peerAddress, forgedTerm(from, node.id, queue), metadata)).toMatch(/^16: .*cluster credentials/);
        }
      }
    }
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(await terms(['precious', 'steady'])).toSatisfy(unforged);
    expect(await metric('n1', 'quorumq_peer_calls_refused_total{call="raft_stream"}')).toBeGreaterThanOrEqual(4);
    expect(cluster.local.unexpectedExits).toEqual([]);
  });

  it('an authenticated peer cannot step messages in another node\'s name, nor into a group it does not replicate', async () => {
    const client = cluster.client();
    const { members } = await client.declareQueue('pair', { replicas: 2 });
    const outsider = cluster.nodes.map((n) => n.id).find((id) => !members.includes(id)) ?? '';
    const member = members[0] ?? '';
    expect(unforged(await terms(['precious', 'pair']))).toBe(true);
    // As the outsider, with the secret: into the pair's group (it is no member of), and in a member's name.
    const asOutsider = credentialsOf(outsider, secret);
    const target = cluster.nodes[nodeIndex(member)]?.peerAddress ?? '';
    // (The outsider replicates the metadata group: it may send there, it is a peer.)
    expect(await raftStream(target, forgedTerm(outsider, member, 'pair', false), asOutsider)).toBe('open');
    expect(await raftStream(target, forgedTerm(members[1] ?? '', member, 'precious'), asOutsider)).toBe('open');
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(await terms(['precious', 'pair'])).toSatisfy(unforged);
    expect(await metric(member, 'quorumq_raft_messages_refused_total{reason="not_a_member"}')).toBeGreaterThanOrEqual(1);
    expect(await metric(member, 'quorumq_raft_messages_refused_total{reason="sender_mismatch"}')).toBeGreaterThanOrEqual(1);
    expect(cluster.local.unexpectedExits).toEqual([]);
    expect((await client.publish('', 'pair', 'fine')).outcome).toBe('confirmed');
  });
});
