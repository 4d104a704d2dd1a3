/**
 * Issue 18: the operator's verbs against a real cluster (authentication required, so the
 * connection options are exercised too), each as a user runs it: the table by default,
 * `--json` for scripts, a clear error and exit 1 when the broker refuses. Then the
 * membership verbs on the same cluster: a fourth node joins, a queue grows onto it, is led by
 * it and shrinks off it, the leaders rebalance, `check quorum-critical` answers with its exit
 * status, and a node is replaced by a fifth.
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
  // The running nodes (a joiner is added to the list once it runs; a removed node leaves it).
  const nodes = cluster.nodes.filter((n) => cluster.isRunning(n.id)).map((n) => n.address);
  const env = { ...process.env, QUORUMQ_NODES: nodes.join(','), QUORUMQ_USER: ADMIN.username, QUORUMQ_PASSWORD: ADMIN.password };
  try {
    const { stdout, stderr } = await promisify(execFile)(process.execPath, [CLI_MAIN, ...args], { env, timeout: 90_000 });
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
    for (const verb of ['grow', 'shrink', 'transfer-leader']) expect(help.stdout).toContain(verb);
    for (const verb of [['cluster', 'add-node'], ['cluster', 'remove-node'], ['cluster', 'rebalance'], ['queues', 'grow'], ['queues', 'shrink'], ['queues', 'transfer-leader'], ['check', 'quorum-critical']]) {
      const page = await cli(...verb, '--help');
      expect(page.code, verb.join(' ')).toBe(0);
      expect(page.stdout).toMatch(/^Usage: quorumq /m);
      expect(page.stdout).toMatch(/^Description:\n {2}\S/m);
      expect(page.stdout).toMatch(/^Exit status:\n {2}0 /m);
      expect(page.stdout).toMatch(/^Examples:\n {2}\$ quorumq /m);
    }
    expect((await cli('cluster', 'add-node', '--help')).stdout).toMatch(/--no-wait[\s\S]*--timeout <ms>/);
    expect((await cli('cluster', 'remove-node', '--help')).stdout).toContain('--replace-with <id>');
    const node = await cli('node', '--help');
    expect(node.stdout).toMatch(/--join\s+join a running cluster/);
    expect(node.stdout).toContain('QUORUMQ_JOIN');
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

interface NodeJson {
  id: string;
  state: string;
  voter: boolean;
  peerAddress: string;
  reachable: boolean;
}
interface GroupJson {
  queue: string;
  node: string;
  changed: boolean;
  waited: boolean;
  leader: string;
  members: string[];
  voters: string[];
  learners: string[];
  retiring: string[];
}

async function until(what: string, check: () => Promise<boolean>, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check().catch(() => false))) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

describe('quorumq membership verbs', () => {
  it('check quorum-critical: exit 0 and "not quorum-critical" for every node while all are up', async () => {
    for (const id of ['n1', 'n2', 'n3']) {
      const result = await cli('check', 'quorum-critical', id);
      expect(result.code, result.stderr).toBe(0);
      expect(result.stdout).toBe(`node ${id} is not quorum-critical\n`);
    }
    expect(await json('check', 'quorum-critical', 'n2')).toEqual({ critical: false, queues: [], metadata: false });
    const unknown = await cli('check', 'quorum-critical', 'n9');
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toContain('NODE_NOT_FOUND');
  });

  it('cluster add-node: a node started with join is added and waited for until it votes; cluster status shows it', async () => {
    const n4 = await cluster.prepareJoiner();
    cluster.startNode(n4.id);
    const added = await cli('cluster', 'add-node', 'n4', n4.peerAddress, '--json');
    expect(added.code, added.stderr).toBe(0);
    expect(JSON.parse(added.stdout)).toEqual({ node: 'n4', peerAddress: n4.peerAddress, changed: true, waited: true });
    // Progress went to stderr (one line per change off a terminal), ending with the vote.
    expect(added.stderr.trimEnd().split('\n').at(-1)).toBe('n4 votes in the metadata group');
    await cluster.waitHealthy(['n4']);

    const status = (await json('cluster', 'status')) as { nodes: NodeJson[] };
    expect(status.nodes.find((n) => n.id === 'n4')).toMatchObject({ state: 'active', voter: true, peerAddress: n4.peerAddress });
    const table = (await cli('cluster', 'status')).stdout;
    expect(table).toMatch(/^ID\s+ADDRESS\s+REACHABLE\s+STATE\s+VOTER\s+METADATALEADER\s+DISKALARM\s+MEMORYALARM\s+PEERADDRESS$/m);
    expect(table).toMatch(new RegExp(`^n4\\s+${n4.address}\\s+yes\\s+active\\s+yes\\s+(yes|no)\\s+no\\s+no\\s+${n4.peerAddress}$`, 'm'));
    // Adding it again changes nothing.
    expect((await cli('cluster', 'add-node', 'n4', n4.peerAddress)).stdout).toBe('n4 is a member of the cluster (no change)\n');
  });

  it('queues grow onto the new node, transfer-leader to it, shrink off it: each waits, --json shows the group', async () => {
    const grown = await cli('queues', 'grow', 'orders', 'n4', '--json');
    expect(grown.code, grown.stderr).toBe(0);
    const group = JSON.parse(grown.stdout) as GroupJson;
    expect(group).toMatchObject({ queue: 'orders', node: 'n4', changed: true, waited: true, learners: [], retiring: [] });
    expect([...group.voters].sort()).toEqual(['n1', 'n2', 'n3', 'n4']);
    expect(grown.stderr).toContain('n4 votes in the group of queue orders');
    const status = await cli('queues', 'status', 'orders');
    expect(status.stdout).toMatch(/^NAME\s+LEADER\s+MEMBERS\s.*\sVOTERS\s+LEARNERS\s+RETIRING$/m);
    expect(status.stdout).toMatch(/\sn\d,n\d,n\d,n\d$/m);

    const transferred = await cli('queues', 'transfer-leader', 'orders', 'n4');
    expect(transferred.code, transferred.stderr).toBe(0);
    expect(transferred.stdout).toBe('queue orders is led by n4\n');
    expect(transferred.stderr).toContain('queue orders is led by n4');
    expect((await admin.queueStatus('orders')).leader).toBe('n4');

    // Off its leader: n4 hands leadership over first.
    const shrunk = await cli('queues', 'shrink', 'orders', 'n4', '--json');
    expect(shrunk.code, shrunk.stderr).toBe(0);
    const after = JSON.parse(shrunk.stdout) as GroupJson;
    expect(after).toMatchObject({ queue: 'orders', node: 'n4', changed: true, learners: [], retiring: [] });
    expect([...after.voters].sort()).toEqual(['n1', 'n2', 'n3']);
    expect(after.leader).not.toBe('n4');
    expect(shrunk.stderr).toContain('n4 holds no replica of queue orders');
    // Shrinking again changes nothing; --no-wait returns at once.
    expect(JSON.parse((await cli('queues', 'shrink', 'orders', 'n4', '--json', '--no-wait')).stdout)).toEqual({ queue: 'orders', node: 'n4', changed: false, waited: false });
    // A node that is no member of the cluster is refused.
    const refused = await cli('queues', 'grow', 'orders', 'n9');
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain('NODE_NOT_FOUND');
  });

  it("cluster rebalance: waits until each queue is led by its preferred leader, prints the leaders per node", async () => {
    for (const name of ['r1', 'r2', 'r3']) {
      await admin.declareQueue(name);
      const members = (await admin.queueStatus(name)).members;
      // Its last member leads and is preferred: rebalance has something to undo.
      await admin.transferLeadership(name, members[members.length - 1]!);
    }
    const result = await cli('cluster', 'rebalance', '--json');
    expect(result.code, result.stderr).toBe(0);
    const report = JSON.parse(result.stdout) as { changed: boolean; balanced: boolean; queues: number; nodes: Array<{ node: string; leaders: number; preferred: number }> };
    const cs = await admin.clusterStatus();
    const queueCount = Object.keys(cs.queues).length;
    expect(report).toMatchObject({ balanced: true, queues: queueCount });
    expect(report.nodes.map((n) => n.node)).toEqual(['n1', 'n2', 'n3', 'n4']);
    expect(report.nodes.reduce((sum, n) => sum + n.leaders, 0)).toBe(queueCount);
    for (const n of report.nodes) expect(n.leaders).toBe(n.preferred);
    expect(result.stderr).toContain(`${queueCount} of ${queueCount} queues led by their preferred leader`);
    for (const name of Object.keys(cs.queues)) {
      const q = await admin.queueStatus(name);
      expect(q.leader, name).toBe(q.members[0]);
    }
    const table = await cli('cluster', 'rebalance');
    expect(table.code, table.stderr).toBe(0);
    expect(table.stdout).toMatch(/^NODE\s+LEADERS\s+PREFERRED\n(n\d\s+\d+\s+\d+\n){4}$/);
  });

  it('check quorum-critical with n3 down: exit 1 for n1, listing the metadata and the queues n1 and n3 hold; 0 for n3; a transfer to n3 times out', async () => {
    await cluster.kill('n3');
    const cs = await admin.clusterStatus();
    const expected = Object.values(cs.queues).filter((q) => q.members.includes('n1') && q.members.includes('n3') && q.members.length <= 3).map((q) => q.name).sort();
    expect(expected).toContain('orders');
    // Four metadata voters, n3 down: without n1, two of four is no majority.
    await until('n1 to be quorum-critical', async () => (await cli('check', 'quorum-critical', 'n1')).code === 1);
    const critical = await cli('check', 'quorum-critical', 'n1');
    expect(critical.code).toBe(1);
    expect(critical.stderr).toBe('');
    expect(critical.stdout).toBe(
      `node n1 is quorum-critical: stopping it now leaves these ${expected.length + 1} groups without a majority:\n  the metadata group\n${expected.map((name) => `  queue ${name}\n`).join('')}`,
    );
    const asJson = await cli('check', 'quorum-critical', 'n1', '--json');
    expect(asJson.code).toBe(1);
    expect(JSON.parse(asJson.stdout)).toEqual({ critical: true, queues: expected, metadata: true });
    // The node that is down is not critical: its loss changes nothing.
    expect(await json('check', 'quorum-critical', 'n3')).toEqual({ critical: false, queues: [], metadata: false });

    const timedOut = await cli('queues', 'transfer-leader', 'orders', 'n3', '--timeout', '1500');
    expect(timedOut.code).toBe(1);
    expect(timedOut.stdout).toBe('');
    expect(timedOut.stderr).toMatch(/^quorumq: timed out after 1500 ms waiting for n3 to lead queue orders \(.+\)$/m);

    cluster.startNode('n3');
    await cluster.waitHealthy(['n3']);
    await until('n1 to be no longer quorum-critical', async () => (await cli('check', 'quorum-critical', 'n1')).code === 0);
  });

  it('cluster remove-node --replace-with: a fifth node takes over every replica of n3, which then leaves the cluster', async () => {
    const n5 = await cluster.prepareJoiner();
    cluster.startNode(n5.id);
    expect(await json('cluster', 'add-node', 'n5', n5.peerAddress, '--no-wait')).toEqual({ node: 'n5', peerAddress: n5.peerAddress, changed: true, waited: false });
    // Run again, it waits until n5 votes.
    expect((await cli('cluster', 'add-node', 'n5', n5.peerAddress)).stdout).toBe('n5 is a member of the cluster (no change)\n');
    await cluster.waitHealthy(['n5']);

    const before = await admin.clusterStatus();
    const holding = Object.values(before.queues).filter((q) => q.members.includes('n3')).map((q) => q.name).sort();
    expect(holding.length).toBeGreaterThan(0);
    const removed = await cli('cluster', 'remove-node', 'n3', '--replace-with', 'n5', '--json');
    expect(removed.code, removed.stderr).toBe(0);
    expect(JSON.parse(removed.stdout)).toEqual({ node: 'n3', replacement: 'n5', changed: true, replicas: holding.length, waited: true });
    const lines = removed.stderr.trimEnd().split('\n');
    expect(lines.at(-1)).toBe(`moved ${holding.length} of ${holding.length} replicas; n3 removed`);
    expect(lines.every((line) => /^moved \d+ of \d+ replicas/.test(line))).toBe(true);

    const after = await admin.clusterStatus();
    expect(after.nodes['n3']).toBeUndefined();
    for (const q of Object.values(after.queues)) {
      expect(q.members, q.name).not.toContain('n3');
      expect(q.retiring, q.name).toEqual([]);
    }
    for (const name of holding) expect(after.queues[name]!.members, name).toContain('n5');
    await cluster.kill('n3');
    // Every queue is served without n3: the replica n5 took over votes.
    const orders = await admin.queueStatus('orders');
    expect(orders.voters).toContain('n5');
    expect(orders.voters).not.toContain('n3');
    const again = await cli('cluster', 'remove-node', 'n3');
    expect(again.code).toBe(1);
  });
});
