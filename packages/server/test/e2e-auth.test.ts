/**
 * Issue 17: users, authentication and RabbitMQ-style permissions on a three-node cluster
 * that requires authentication, with a first administrator from the environment. Users and
 * permissions are changed through one node and enforced by every node at once.
 */
import type { QuorumqClient } from '@quorumq/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { TestCluster, refusal, waitFor } from './cluster.js';

const ADMIN = { username: 'root', password: 'first-admin-password-123' };
let cluster: TestCluster;
let admin: QuorumqClient;

/** A client of one node only (no failover to another), as `user`. */
function clientOf(node: number, auth?: { username: string; password: string }): QuorumqClient {
  return cluster.client({ nodes: [cluster.addresses[node]!], ...(auth === undefined ? {} : { auth }), failoverTimeoutMs: 3_000 });
}

beforeAll(async () => {
  cluster = await TestCluster.start({
    env: { QUORUMQ_REQUIRE_AUTHENTICATION: 'true', QUORUMQ_ADMIN_USER: ADMIN.username, QUORUMQ_ADMIN_PASSWORD: ADMIN.password },
  });
  admin = clientOf(0, ADMIN);
  // Every node proposes the first administrator once it serves.
  await waitFor(async () => (await admin.whoAmI().catch(() => null))?.user === ADMIN.username);
  await admin.declareQueue('orders');
  await admin.putUser('reader', { password: 'reader-pass' });
  await admin.setPermissions('reader', { configure: '', write: '', read: '^orders$' });
  await admin.putUser('writer', { password: 'writer-pass' });
  await admin.setPermissions('writer', { configure: '', write: '^amq\\.default$', read: '' });
}, 120_000);

afterAll(async () => {
  await cluster?.close();
});

describe('authentication', () => {
  it('refuses a client without credentials, with a wrong password, and an unknown user: UNAUTHENTICATED, one message for both wrong cases', async () => {
    const none = await refusal(clientOf(1).declareQueue('x'));
    expect(none).toMatchObject({ code: 'UNAUTHENTICATED', reason: 'UNAUTHENTICATED' });
    expect(none?.message).toContain('requires authentication');
    const wrong = await refusal(clientOf(1, { username: 'reader', password: 'nope' }).get('orders'));
    const unknown = await refusal(clientOf(1, { username: 'nobody', password: 'nope' }).get('orders'));
    expect(wrong).toMatchObject({ code: 'UNAUTHENTICATED', reason: 'UNAUTHENTICATED' });
    expect(unknown?.message).toBe(wrong?.message);
    expect(wrong?.message).toContain('invalid credentials');
  });

  it('writes an audit line for each failure and each user change, with the user', async () => {
    await refusal(clientOf(0, { username: 'reader', password: 'wrong-again' }).get('orders'));
    await waitFor(async () => cluster.nodes[0]!.output.includes('"audit":"authentication_failed"'));
    const node0 = cluster.nodes[0]!.output;
    expect(node0).toMatch(/"audit":"authentication_failed","user":"reader","mechanism":"password"/);
    expect(node0).toMatch(/"audit":"putUser","by":"root","user":"reader"/);
    expect(node0).toMatch(/"audit":"setPermissions","by":"root","user":"writer"/);
  });
});

describe('permissions', () => {
  it('a read-only user cannot publish or declare; it can get from its queue', async () => {
    // Through another node than the one the users were made on, right after.
    const reader = clientOf(2, { username: 'reader', password: 'reader-pass' });
    expect(await refusal(reader.publish('', 'orders', 'x'))).toMatchObject({
      code: 'PERMISSION_DENIED',
      reason: 'ACCESS_REFUSED',
      message: expect.stringContaining('user "reader" has no write permission on exchange "amq.default"'),
    });
    expect(await refusal(reader.declareQueue('reader-own'))).toMatchObject({
      code: 'PERMISSION_DENIED',
      message: expect.stringContaining('no configure permission on queue "reader-own"'),
    });
    expect(await refusal(reader.get('orders'))).toBeNull();
  });

  it('a write-only user can publish but cannot consume or get', async () => {
    const writer = clientOf(1, { username: 'writer', password: 'writer-pass' });
    expect((await writer.publish('', 'orders', 'hello')).outcome).toBe('confirmed');
    const consumer = writer.consume('orders', { prefetch: 1 });
    expect(await refusal(consumer.ready())).toMatchObject({ code: 'PERMISSION_DENIED', message: expect.stringContaining('no read permission on queue "orders"') });
    expect(await refusal(writer.get('orders'))).toMatchObject({ code: 'PERMISSION_DENIED', reason: 'ACCESS_REFUSED' });
    const reader = clientOf(0, { username: 'reader', password: 'reader-pass' });
    expect((await reader.get('orders'))?.body.toString()).toBe('hello');
  });

  it('user administration needs the administrator tag', async () => {
    const reader = clientOf(0, { username: 'reader', password: 'reader-pass' });
    expect(await refusal(reader.listUsers())).toMatchObject({ code: 'PERMISSION_DENIED', message: expect.stringContaining('administrator tag') });
    expect(await refusal(reader.putUser('reader', { tags: ['administrator'] }))).toMatchObject({ code: 'PERMISSION_DENIED' });
    const users = await admin.listUsers();
    expect(users.map((u) => u.name)).toEqual(['reader', 'root', 'writer']);
    expect(users.find((u) => u.name === 'root')).toMatchObject({ tags: ['administrator'], hasPassword: true, permissions: { configure: '.*', write: '.*', read: '.*' } });
  });

  it('a change of permissions, a password change and a deleted user apply on every node', async () => {
    await admin.putUser('temp', { password: 'temp-pass-1' });
    await admin.setPermissions('temp', { configure: '', write: '', read: '^orders$' });
    for (let node = 0; node < 3; node++) expect(await refusal(clientOf(node, { username: 'temp', password: 'temp-pass-1' }).get('orders'))).toBeNull();
    // A revocation applies on a node once it applied the change: within a heartbeat or so.
    const eventually = (check: () => Promise<boolean>) => waitFor(check, 2_000);
    await admin.setPermissions('temp', { configure: '', write: '', read: '' });
    for (let node = 0; node < 3; node++) {
      const temp = clientOf(node, { username: 'temp', password: 'temp-pass-1' });
      await eventually(async () => (await refusal(temp.get('orders')))?.code === 'PERMISSION_DENIED');
    }
    // A new password works at once on every node (a node that does not know it yet catches up first).
    await admin.putUser('temp', { password: 'temp-pass-2' });
    for (let node = 0; node < 3; node++) {
      expect((await clientOf(node, { username: 'temp', password: 'temp-pass-2' }).whoAmI()).user).toBe('temp');
      const old = clientOf(node, { username: 'temp', password: 'temp-pass-1' });
      await eventually(async () => (await refusal(old.whoAmI()))?.code === 'UNAUTHENTICATED');
    }
    await admin.deleteUser('temp');
    for (let node = 0; node < 3; node++) {
      const gone = clientOf(node, { username: 'temp', password: 'temp-pass-2' });
      await eventually(async () => (await refusal(gone.whoAmI()))?.code === 'UNAUTHENTICATED');
    }
    expect(await refusal(admin.deleteUser('temp'))).toMatchObject({ code: 'NOT_FOUND', reason: 'USER_NOT_FOUND' });
  });

  it('lists only what the user has a permission on: queues, exchanges, bindings; consumers of a queue it may see', async () => {
    await admin.declareQueue('hidden');
    await admin.bind({ source: 'amq.direct', queue: 'orders', bindingKey: 'o' });
    await admin.bind({ source: 'amq.direct', queue: 'hidden', bindingKey: 'h' });
    const reader = clientOf(1, { username: 'reader', password: 'reader-pass' });
    expect(Object.keys((await reader.clusterStatus()).queues)).toEqual(['orders']);
    expect(await reader.listExchanges()).toEqual([]);
    expect((await reader.listBindings()).map((b) => b.destination)).toEqual([{ queue: 'orders' }]);
    expect(await reader.listConsumers('orders')).toEqual([]);
    expect(await refusal(reader.listConsumers('hidden'))).toMatchObject({ code: 'PERMISSION_DENIED' });
    expect((await admin.listBindings()).length).toBe(2);
  });

  it('bad administration input is INVALID_ARGUMENT naming the problem', async () => {
    expect(await refusal(admin.setPermissions('reader', { configure: '(', write: '', read: '' }))).toMatchObject({
      code: 'INVALID_ARGUMENT',
      message: expect.stringContaining('configure is not a regular expression'),
    });
    expect(await refusal(admin.setPermissions('reader', { configure: '', write: '^(a+)+$', read: '' }))).toMatchObject({
      code: 'INVALID_ARGUMENT',
      message: expect.stringContaining('exponential time'),
    });
    expect(await refusal(admin.putUser('a:b', { password: 'x' }))).toMatchObject({ code: 'INVALID_ARGUMENT', message: expect.stringContaining('":"') });
  });
});
