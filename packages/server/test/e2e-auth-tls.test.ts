/**
 * Issue 17: users over TLS. A client certificate names its user (RabbitMQ's x.509 EXTERNAL);
 * a client call proxied to a queue's leader through the peer listener carries the user the
 * proxying node authenticated, and the leader checks its permissions again; a client cannot
 * name a user by the metadata the proxy uses.
 */
import { Metadata, credentials, makeGenericClientConstructor, type Client, type ServiceError } from '@grpc/grpc-js';
import { makeCertificate, type ClusterCertificates } from '@quorumq/cli';
import type { QuorumqClient } from '@quorumq/client';
import { BrokerService } from '@quorumq/proto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { TestCluster, refusal, waitFor } from './cluster.js';

const ADMIN = { username: 'root', password: 'first-admin-password-123' };
let cluster: TestCluster;
let certs: ClusterCertificates;
let scratch: string;
let admin: QuorumqClient;
let leader: number;
let follower: number;
const grpcClients: Client[] = [];

/** A client of node `node` only, presenting a certificate whose CN is `user`. */
function certificateClient(node: number, user: string): QuorumqClient {
  const pair = makeCertificate(certs.ca, scratch, user, user);
  return cluster.client({ nodes: [cluster.addresses[node]!], tls: { ca: certs.ca.cert, cert: pair.cert, key: pair.key }, failoverTimeoutMs: 3_000 });
}

beforeAll(async () => {
  cluster = await TestCluster.start({
    tls: { clientCerts: 'optional' },
    env: { QUORUMQ_REQUIRE_AUTHENTICATION: 'true', QUORUMQ_ADMIN_USER: ADMIN.username, QUORUMQ_ADMIN_PASSWORD: ADMIN.password },
  });
  certs = cluster.local.certificates!;
  scratch = mkdtempSync(join(tmpdir(), 'quorumq-auth-tls-'));
  admin = cluster.client({ tls: { ca: certs.ca.cert }, auth: ADMIN });
  await waitFor(async () => (await admin.whoAmI().catch(() => null))?.user === ADMIN.username);
  await admin.declareQueue('orders');
  await admin.putUser('cert-reader');
  await admin.setPermissions('cert-reader', { configure: '', write: '', read: '^orders$' });
  await admin.putUser('cert-nothing');
  const leaderId = await cluster.leaderOf('orders', admin);
  leader = cluster.nodes.findIndex((n) => n.id === leaderId);
  follower = (leader + 1) % 3;
}, 120_000);

afterAll(async () => {
  for (const client of grpcClients) client.close();
  await cluster?.close();
  rmSync(scratch, { recursive: true, force: true });
});

describe('client certificates name users', () => {
  it('a certificate whose CN is a user authenticates as that user, without a password', async () => {
    const reader = certificateClient(leader, 'cert-reader');
    expect(await reader.whoAmI()).toMatchObject({ user: 'cert-reader', mechanism: 'certificate', authenticationRequired: true });
    expect(await refusal(reader.get('orders'))).toBeNull();
    expect(await refusal(reader.publish('', 'orders', 'x'))).toMatchObject({ code: 'PERMISSION_DENIED', reason: 'ACCESS_REFUSED' });
  });

  it('a certificate of the cluster CA whose CN is no user is refused', async () => {
    expect(await refusal(certificateClient(leader, 'stranger').whoAmI())).toMatchObject({ code: 'UNAUTHENTICATED', message: expect.stringContaining('invalid credentials') });
  });

  it('a user without a password cannot authenticate by password', async () => {
    const guess = cluster.client({ nodes: [cluster.addresses[leader]!], tls: { ca: certs.ca.cert }, auth: { username: 'cert-reader', password: 'anything' }, failoverTimeoutMs: 3_000 });
    expect(await refusal(guess.whoAmI())).toMatchObject({ code: 'UNAUTHENTICATED' });
  });
});

describe('calls proxied to the leader', () => {
  it('carry the user: a consume and a get through a follower work for a reader, and are refused for a user without permissions', async () => {
    await admin.publish('', 'orders', 'one');
    await admin.publish('', 'orders', 'two');
    const reader = certificateClient(follower, 'cert-reader');
    const consumer = reader.consume('orders', { prefetch: 1 });
    await consumer.ready();
    const iterator = consumer[Symbol.asyncIterator]();
    const first = await iterator.next();
    expect(first.done).toBe(false);
    await first.value!.ack();
    await consumer.cancel();
    expect((await reader.get('orders'))?.body.toString()).toBeDefined();
    const nothing = certificateClient(follower, 'cert-nothing');
    expect(await refusal(nothing.get('orders'))).toMatchObject({ code: 'PERMISSION_DENIED' });
    expect(await refusal(nothing.consume('orders', { prefetch: 1 }).ready())).toMatchObject({ code: 'PERMISSION_DENIED' });
  });

  it('a client cannot name a user with the metadata a proxying node uses', async () => {
    const BrokerClient = makeGenericClientConstructor(BrokerService, 'Broker');
    const client = new BrokerClient(cluster.addresses[leader]!, credentials.createSsl(readFileSync(certs.ca.cert)));
    grpcClients.push(client);
    const metadata = new Metadata();
    metadata.set('quorumq-user', ADMIN.username);
    const code = await new Promise<number>((resolve) => {
      client.makeUnaryRequest(
        BrokerService.whoAmI.path,
        BrokerService.whoAmI.requestSerialize,
        BrokerService.whoAmI.responseDeserialize,
        {},
        metadata,
        { deadline: Date.now() + 5_000 },
        (error: ServiceError | null) => resolve(error?.code ?? 0),
      );
    });
    expect(code).toBe(16);
  });
});
