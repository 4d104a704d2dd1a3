/** The standard services every node serves: gRPC health checking and server reflection. */
import { credentials, loadPackageDefinition, type ServiceClientConstructor } from '@grpc/grpc-js';
import { loadSync } from '@grpc/proto-loader';
import { healthStatus } from '@quorumq/cli';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';

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

it('server reflection lists the broker, peer and health services', async () => {
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
  expect(services).toEqual(expect.arrayContaining(['quorumq.v1.Broker', 'quorumq.v1.Peer', 'quorumq.v1.RaftTransport']));
  client.close();
});
