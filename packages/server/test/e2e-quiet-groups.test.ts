/**
 * Quiet groups on real nodes (issue: ten thousand queues): idle queues send no Raft messages
 * and are not ticked; kill -9 of the node leading a third of them wakes them through the
 * node-level failure detection, and every queue elects and serves again.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';

import { TestCluster } from './cluster.js';

const QUEUES = 150;
let cluster: TestCluster;

beforeAll(async () => {
  cluster = await TestCluster.start({ metrics: true });
});

afterAll(async () => {
  await cluster?.close();
});

async function scrape(id: string): Promise<string> {
  const address = cluster.nodes.find((n) => n.id === id)?.metricsAddress;
  if (address == null) throw new Error(`${id} serves no metrics`);
  return (await fetch(`http://${address}/metrics`)).text();
}

function series(text: string, name: string, labels = ''): number {
  const prefix = labels === '' ? `${name} ` : `${name}{${labels}} `;
  const line = text.split('\n').find((l) => l.startsWith(prefix));
  if (line === undefined) throw new Error(`no series ${prefix}`);
  return Number(line.slice(line.lastIndexOf(' ') + 1));
}

async function waitFor(what: string, check: () => Promise<boolean>, timeoutMs: number): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

it('idle queues go quiet: no group is ticked and no Raft message is sent, only beats', async () => {
  const client = cluster.client();
  for (let i = 0; i < QUEUES; i += 10) await Promise.all(Array.from({ length: 10 }, (_, k) => client.declareQueue(`idle-${i + k}`)));
  for (let i = 0; i < QUEUES; i += 10) await Promise.all(Array.from({ length: 10 }, (_, k) => client.publish('', `idle-${i + k}`, 'one')));
  await waitFor(
    'every group quiet',
    async () => {
      for (const node of cluster.nodes) if (series(await scrape(node.id), 'quorumq_raft_groups', 'state="active"') > 0) return false;
      return true;
    },
    30_000,
  );
  for (const node of cluster.nodes) expect(series(await scrape(node.id), 'quorumq_raft_groups', 'state="all"')).toBe(QUEUES + 1);
  const before = await Promise.all(cluster.nodes.map(async (node) => series(await scrape(node.id), 'quorumq_peer_messages_total')));
  await new Promise((resolve) => setTimeout(resolve, 2_000));
  const after = await Promise.all(cluster.nodes.map(async (node) => series(await scrape(node.id), 'quorumq_peer_messages_total')));
  // Before quiet groups: a heartbeat and its answer per group and follower every 100 ms
  // (thousands here). A scrape, a status call or a late answer may still send a few.
  for (let i = 0; i < after.length; i++) expect((after[i] ?? 0) - (before[i] ?? 0)).toBeLessThan(20);
  await client.close();
});

it('kill -9 of the node leading the most quiet queues: every queue elects and accepts a publish again, nothing lost', async () => {
  const client = cluster.client();
  const status = await client.clusterStatus();
  const led = new Map<string, number>();
  for (const queue of Object.values(status.queues)) led.set(queue.leader, (led.get(queue.leader) ?? 0) + 1);
  const victim = [...led.entries()].sort((a, b) => b[1] - a[1])[0]![0];
  expect(led.get(victim)).toBeGreaterThan(QUEUES / 5);
  await cluster.kill(victim);
  const survivors = cluster.nodes.filter((n) => n.id !== victim).map((n) => n.address);
  const live = cluster.client({ nodes: survivors });
  const pending = new Set(Array.from({ length: QUEUES }, (_, i) => `idle-${i}`));
  const started = Date.now();
  while (pending.size > 0 && Date.now() - started < 60_000) {
    await Promise.all(
      [...pending].map(async (queue) => {
        try {
          const result = await live.publish('', queue, 'two');
          if (result.outcome === 'confirmed') pending.delete(queue);
        } catch {
          // no leader yet
        }
      }),
    );
  }
  expect([...pending]).toEqual([]);
  for (let i = 0; i < QUEUES; i += 25) {
    const queue = `idle-${i}`;
    expect((await live.queueStatus(queue)).ready).toBe(2);
  }
  // The victim comes back and its replicas rejoin without disturbing the new leaders.
  await cluster.restart(victim);
  await cluster.waitHealthy();
  const again = await live.clusterStatus();
  for (let i = 0; i < QUEUES; i += 25) expect(again.queues[`idle-${i}`]?.leader).not.toBe('');
  await live.close();
  await client.close();
});
