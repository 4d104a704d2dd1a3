/**
 * Issue 18: the operator's verbs against a real cluster (authentication required, so the
 * connection options are exercised too), each as a user runs it: the table by default,
 * `--json` for scripts, a clear error and exit 1 when the broker refuses.
 */
import { CLI_MAIN, LocalCluster } from '@quorumq/cli';
import { connect, type QuorumqClient } from '@quorumq/client';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const ADMIN = { username: 'root', password: 'first-admin-password-123' };
let cluster: LocalCluster;
let admin: QuorumqClient;

async function cli(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const env = { ...process.env, QUORUMQ_NODES: cluster.addresses.join(','), QUORUMQ_USER: ADMIN.username, QUORUMQ_PASSWORD: ADMIN.password };
  try {
    const { stdout, stderr } = await promisify(execFile)(process.execPath, [CLI_MAIN, ...args], { env, timeout: 30_000 });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const e = error as { code: number; stdout: string; stderr: string };
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
}
const json = async (...args: string[]): Promise<unknown> => {
  const result = await cli(...args, '--json');
  expect(result.code, result.stderr).toBe(0);
  return JSON.parse(result.stdout);
};

beforeAll(async () => {
  cluster = await LocalCluster.start({ env: { QUORUMQ_REQUIRE_AUTHENTICATION: 'true', QUORUMQ_ADMIN_USER: ADMIN.username, QUORUMQ_ADMIN_PASSWORD: ADMIN.password } });
  admin = connect({ nodes: cluster.addresses, auth: ADMIN });
  for (let i = 0; i < 100 && (await admin.whoAmI().catch(() => null)) === null; i++) await new Promise((r) => setTimeout(r, 100));
}, 120_000);

afterAll(async () => {
  await admin?.close();
  await cluster?.close();
});

describe('quorumq admin verbs', () => {
  it('--version and a man-style --help', async () => {
    expect((await cli('--version')).stdout.trim()).toMatch(/^\d+\.\d+\.\d+$/);
    const help = await cli('queues', '--help');
    expect(help.stdout).toContain('list');
    expect(help.stdout).toContain('move');
  });

  it('queues declare, list, status, purge, move, delete', async () => {
    expect((await cli('queues', 'declare', 'orders', '--arguments', '{"maxLength": 1000}')).stdout).toContain('declared orders');
    await cli('queues', 'declare', 'archive');
    for (let i = 0; i < 5; i++) await admin.publish('', 'orders', `m${i}`);
    const table = await cli('queues', 'list');
    expect(table.stdout).toMatch(/^NAME\s+LEADER\s+MEMBERS\s+READY/m);
    expect(table.stdout).toMatch(/^orders\s+n\d\s+\S+\s+5\s/m);
    expect(await json('queues', 'status', 'orders')).toMatchObject({ name: 'orders', ready: 5 });
    expect(await json('queues', 'move', 'orders', '', '--routing-key', 'archive', '--limit', '2')).toMatchObject({ moved: 2, done: true });
    expect(await json('queues', 'purge', 'orders')).toEqual({ messagesDropped: 3 });
    expect((await json('queues', 'list')) as Array<{ name: string; ready: number }>).toEqual(
      expect.arrayContaining([expect.objectContaining({ name: 'archive', ready: 2 }), expect.objectContaining({ name: 'orders', ready: 0 })]),
    );
    expect((await cli('queues', 'delete', 'archive')).stdout).toContain('deleted archive (2 messages dropped)');
  });

  it('queues declare --arg compactionKey=...: status shows keys, replaced and tombstones; a bad value is refused with the reason', async () => {
    const declared = await cli('queues', 'declare', 'prices', '--arg', 'compactionKey=$routing_key', '--arg', 'compactionMinLagMs=0');
    expect(declared.stdout, declared.stderr).toContain('declared prices');
    for (let i = 0; i < 6; i++) await admin.publish('', 'prices', `v${i}`);
    // Every publish keys on the routing key "prices": the last one is left.
    expect(await json('queues', 'status', 'prices')).toMatchObject({ name: 'prices', ready: 1, compaction: { keys: 1, replaced: 5, tombstones: 0 } });
    expect((await cli('queues', 'status', 'prices')).stdout).toMatch(/KEYS\s+REPLACED\s+TOMBSTONES/);
    const bad = await cli('queues', 'declare', 'bad-compaction', '--arg', 'compactionMinLagMs=-5', '--arg', 'compactionKey=id');
    expect(bad.code).toBe(1);
    expect(bad.stderr).toContain('compactionMinLagMs');
    await cli('queues', 'delete', 'prices');
  });

  it('exchanges and bindings: declare, list, add, remove, delete', async () => {
    expect((await cli('exchanges', 'declare', 'events', 'topic')).stdout).toContain('declared events');
    expect(((await json('exchanges', 'list')) as Array<{ name: string }>).map((e) => e.name)).toContain('events');
    expect((await cli('bindings', 'add', 'events', '--queue', 'orders', '--key', 'order.#')).stdout).toContain('bound');
    expect(await json('bindings', 'list', '--source', 'events')).toEqual([{ source: 'events', destination: { queue: 'orders' }, bindingKey: 'order.#', arguments: {} }]);
    expect((await cli('bindings', 'list')).stdout).toMatch(/^events\s+queue orders\s+order\.#/m);
    expect((await cli('bindings', 'remove', 'events', '--queue', 'orders', '--key', 'order.#')).stdout).toContain('removed');
    expect((await cli('exchanges', 'delete', 'events')).stdout).toContain('deleted events');
  });

  it('consumers list and cluster status', async () => {
    const consumer = admin.consume('orders', { prefetch: 3, consumerTag: 'cli-test' });
    await consumer.ready();
    expect(await json('consumers', 'list', 'orders')).toEqual([{ consumerTag: 'cli-test', prefetch: 3, priority: 0, unacked: 0, active: true }]);
    await consumer.cancel();
    const status = (await json('cluster', 'status')) as { nodes: Array<{ id: string; reachable: boolean }>; metadataLeader: string };
    expect(status.nodes.map((n) => n.id).sort()).toEqual(['n1', 'n2', 'n3']);
    expect(status.nodes.every((n) => n.reachable)).toBe(true);
    expect((await cli('cluster', 'status')).stdout).toMatch(/^ID\s+ADDRESS\s+REACHABLE/m);
  });

  it('users put, set-permissions, list, whoami, clear-permissions, delete', async () => {
    expect((await cli('users', 'put', 'ops', '--new-password', 'ops-password-1', '--tags', 'monitoring')).stdout).toContain('created user ops');
    await cli('users', 'set-permissions', 'ops', '', '', '^orders$');
    expect(((await json('users', 'list')) as Array<{ name: string }>).find((u) => u.name === 'ops')).toEqual({
      name: 'ops',
      tags: ['monitoring'],
      hasPassword: true,
      permissions: { configure: '', write: '', read: '^orders$' },
    });
    const whoami = await cli('whoami', '--json', '--user', 'ops', '--password', 'ops-password-1');
    expect(JSON.parse(whoami.stdout)).toMatchObject({ user: 'ops', mechanism: 'password', authenticationRequired: true });
    expect((await cli('users', 'clear-permissions', 'ops')).stdout).toContain('cleared');
    expect((await cli('users', 'delete', 'ops')).stdout).toContain('deleted user ops');
  });

  it('a refusal prints the broker message and reason and exits 1', async () => {
    const missing = await cli('queues', 'purge', 'no-such-queue');
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain('queue "no-such-queue" does not exist (NOT_FOUND QUEUE_NOT_FOUND)');
    const wrong = await cli('queues', 'list', '--user', 'root', '--password', 'wrong');
    expect(wrong.code).toBe(1);
    expect(wrong.stderr).toContain('UNAUTHENTICATED');
  });
});
