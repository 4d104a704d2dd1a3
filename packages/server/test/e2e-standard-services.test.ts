/**
 * The standard services every node serves: gRPC health checking and server reflection, the
 * latter checked with a real reflection client too (`buf curl --reflect`, from @bufbuild/buf).
 */
import { credentials, loadPackageDefinition, type ServiceClientConstructor } from '@grpc/grpc-js';
import { loadSync } from '@grpc/proto-loader';
import { healthStatus } from '@quorumq/cli';
import { execFile } from 'node:child_process';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { TestCluster } from './cluster.js';

let cluster: TestCluster;

beforeAll(async () => {
  cluster = await TestCluster.start();
});

afterAll(async () => {
  await cluster?.close();
});

it('grpc.health.v1: every node answers SERVING once the cluster has a quorum, and NOT reachable when killed', async () => {
  for (const address of cluster.addresses) expect(await healthStatus(address)).toBe('SERVING');
  expect(await healthStatus(cluster.addresses[0] ?? '', 1000, 'quorumq.v1.Broker')).toBe('SERVING');
  await cluster.kill('n3');
  expect(await healthStatus(cluster.addresses[2] ?? '', 500)).toMatch(/^unreachable/);
  await cluster.restart('n3');
  expect(await healthStatus(cluster.addresses[2] ?? '')).toBe('SERVING');
});

it('server reflection lists the broker, peer, Raft and health services', async () => {
  const require = createRequire(import.meta.url);
  const protoDir = join(dirname(require.resolve('@grpc/reflection/package.json')), 'build/proto');
  const definition = loadSync('grpc/reflection/v1/reflection.proto', { includeDirs: [protoDir] });
  const loaded = loadPackageDefinition(definition) as unknown as {
    grpc: { reflection: { v1: { ServerReflection: ServiceClientConstructor } } };
  };
  const client = new loaded.grpc.reflection.v1.ServerReflection(cluster.addresses[0] ?? '', credentials.createInsecure()) as unknown as {
    serverReflectionInfo(): NodeJS.EventEmitter & { write(m: unknown): void; end(): void };
    close(): void;
  };
  const services = await new Promise<string[]>((resolve, reject) => {
    const call = client.serverReflectionInfo();
    call.on('data', (response: { listServicesResponse?: { service: Array<{ name: string }> } }) => {
      resolve((response.listServicesResponse?.service ?? []).map((s) => s.name).sort());
      call.end();
    });
    call.on('error', reject);
    call.write({ listServices: '' });
  });
  expect(services).toEqual(expect.arrayContaining(['grpc.health.v1.Health', 'quorumq.v1.Broker', 'quorumq.v1.Peer', 'quorumq.v1.RaftTransport']));
  client.close();
});

const bufBinary = join(dirname(createRequire(import.meta.url).resolve('@bufbuild/buf/package.json')), 'bin', 'buf');

/** `buf curl` over gRPC (plaintext HTTP/2), the schema from the node's reflection service; its stdout. */
async function bufCurl(address: string, args: string[]): Promise<string> {
  const { stdout } = await promisify(execFile)(process.execPath, [bufBinary, 'curl', '--protocol', 'grpc', '--http2-prior-knowledge', '--reflect', '--timeout', '30s', ...args.map((a) => a.replace('ADDRESS', address))]);
  return stdout;
}

describe.each(['grpc-v1', 'grpc-v1alpha'])('buf curl with reflection protocol %s', (protocol) => {
  const curl = (path: string, data?: unknown): Promise<unknown> =>
    bufCurl(cluster.addresses[0] ?? '', [
      '--reflect-protocol',
      protocol,
      ...(data === undefined ? [] : ['--data', JSON.stringify(data)]),
      `http://ADDRESS/${path}`,
    ]).then((out) => JSON.parse(out));

  it('lists the services and finds them in the schema', async () => {
    const out = await bufCurl(cluster.addresses[0] ?? '', ['--reflect-protocol', protocol, '--list-methods', 'http://ADDRESS']);
    const methods = out.trim().split('\n');
    expect(methods).toEqual(
      expect.arrayContaining([
        'quorumq.v1.Broker/ClusterStatus',
        'quorumq.v1.Broker/DeclareQueue',
        'quorumq.v1.Broker/Consume',
        'quorumq.v1.Peer/ProposeBatch',
        'quorumq.v1.RaftTransport/Stream',
        'grpc.health.v1.Health/Check',
      ]),
    );
  });

  it('calls ClusterStatus and the health check', async () => {
    const status = (await curl('quorumq.v1.Broker/ClusterStatus')) as { node: string; metadataLeader: string; nodes: Array<{ id: string; address: string }> };
    expect(status.node).toBe('n1');
    expect(cluster.nodes.map((n) => n.id)).toContain(status.metadataLeader);
    expect(status.nodes.map((n) => [n.id, n.address])).toEqual(cluster.nodes.map((n) => [n.id, n.address]));
    expect(await curl('grpc.health.v1.Health/Check', { service: 'quorumq.v1.Broker' })).toEqual({ status: 'SERVING' });
  });

  it('declares a queue, publishes with headers (a map field), reads its status and gets the message back', async () => {
    const queue = `reflected-${protocol}`;
    const declared = (await curl('quorumq.v1.Broker/DeclareQueue', { name: queue, arguments: { maxPriority: 5 } })) as { name: string; created: boolean; members: string[] };
    expect(declared).toMatchObject({ name: queue, created: true });
    expect(declared.members.sort()).toEqual(cluster.nodes.map((n) => n.id).sort());
    const body = Buffer.from('via reflection').toString('base64');
    const published = await curl('quorumq.v1.Broker/Publish', {
      message: { body, routingKey: queue, headers: { origin: { stringValue: 'buf curl' }, n: { intValue: '7' } } },
    });
    // `leader` is there when the node curl called forwarded the publish to the queue's leader.
    const { leader, ...outcome } = published as { leader?: string };
    expect(outcome).toEqual({ outcome: 'PUBLISH_OUTCOME_CONFIRMED', queues: [queue] });
    if (leader !== undefined) expect(leader).toMatch(/^127\.0\.0\.1:\d+$/);
    const status = (await curl('quorumq.v1.Broker/QueueStatus', { name: queue })) as { name: string; ready: string; leader: string };
    expect(status).toMatchObject({ name: queue, ready: '1' });
    expect(cluster.nodes.map((n) => n.id)).toContain(status.leader);
    const got = (await curl('quorumq.v1.Broker/Get', { queue })) as { delivery: { message: { body: string; headers: unknown } } };
    expect(got.delivery.message.body).toBe(body);
    expect(got.delivery.message.headers).toEqual({ origin: { stringValue: 'buf curl' }, n: { intValue: '7' } });
  });
});
