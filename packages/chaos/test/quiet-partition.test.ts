/**
 * Quiet queues and a partition, on real node processes whose peer traffic goes through
 * proxies (ChaosCluster): the node leading the most quiet queues is cut off from its peers.
 * A quiet leader sends no heartbeats, so only the node-level failure detection can tell it
 * that it lost its majority: it must stop leading within a few election timeouts, while the
 * majority elects new leaders and serves; after the heal nothing confirmed is lost.
 */
import { connect, type QuorumqClient } from '@quorumq/client';
import { afterAll, beforeAll, expect, it } from 'vitest';

import { ChaosCluster } from '../src/cluster.js';

const QUEUES = 60;
const name = (i: number): string => `quiet-${i}`;
let cluster: ChaosCluster;

beforeAll(async () => {
  cluster = await ChaosCluster.start({ metrics: true });
  await cluster.local.waitHealthy();
}, 60_000);

afterAll(async () => {
  await cluster?.close();
});

async function activeGroups(metricsAddress: string): Promise<number> {
  const text = await (await fetch(`http://${metricsAddress}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith('quorumq_raft_groups{state="active"} '));
  if (line === undefined) throw new Error('no quorumq_raft_groups series');
  return Number(line.slice(line.lastIndexOf(' ') + 1));
}

async function waitFor(what: string, check: () => Promise<boolean>, timeoutMs: number): Promise<number> {
  const started = Date.now();
  for (;;) {
    try {
      if (await check()) return Date.now() - started;
    } catch {
      // asked again
    }
    if (Date.now() - started > timeoutMs) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** Publishes `body` to every queue until each is confirmed once. */
async function publishToAll(client: QuorumqClient, body: string, timeoutMs: number): Promise<void> {
  const pending = new Set(Array.from({ length: QUEUES }, (_, i) => name(i)));
  const started = Date.now();
  while (pending.size > 0 && Date.now() - started < timeoutMs) {
    await Promise.all(
      [...pending].map(async (queue) => {
        try {
          if ((await client.publish('', queue, body)).outcome === 'confirmed') pending.delete(queue);
        } catch {
          // no leader yet
        }
      }),
    );
  }
  expect([...pending]).toEqual([]);
}

it('a quiet leader cut off from its peers stops leading; the majority elects and serves; after the heal nothing confirmed is lost', async () => {
  const client = connect({ nodes: cluster.addresses });
  for (let i = 0; i < QUEUES; i += 10) await Promise.all(Array.from({ length: 10 }, (_, k) => client.declareQueue(name(i + k))));
  await publishToAll(client, 'one', 30_000);
  await waitFor(
    'every group quiet',
    async () => (await Promise.all(cluster.nodes.map((n) => activeGroups(n.metricsAddress!)))).every((active) => active === 0),
    30_000,
  );

  const status = await client.clusterStatus();
  const led = new Map<string, string[]>();
  for (const queue of Object.values(status.queues)) led.set(queue.leader, [...(led.get(queue.leader) ?? []), queue.name]);
  const [victim, victimQueues] = [...led.entries()].sort((a, b) => b[1].length - a[1].length)[0]!;
  expect(victimQueues.length).toBeGreaterThan(QUEUES / 5);
  const victimAddress = cluster.nodes.find((n) => n.id === victim)!.address;
  const majority = cluster.nodes.filter((n) => n.id !== victim).map((n) => n.address);
  const cutOff = connect({ nodes: [victimAddress] });
  const others = connect({ nodes: majority });

  cluster.isolate(victim);
  // The cut-off node's own view: it leads none of its queues any more (check-quorum once
  // the node found its peers silent and woke them).
  const steppedDownMs = await waitFor(
    `${victim} to stop leading`,
    async () => {
      const view = await cutOff.clusterStatus();
      return Object.values(view.queues).every((queue) => queue.leader !== victim);
    },
    15_000,
  );
  process.stderr.write(`quiet partition: ${victim} (led ${victimQueues.length}) stopped leading ${steppedDownMs} ms after the cut\n`);
  // A publish through it is not confirmed (it can commit nothing alone).
  const alone = await cutOff.publish('', victimQueues[0]!, 'never').then(
    (result) => result.outcome,
    () => 'failed',
  );
  expect(alone).not.toBe('confirmed');
  // The majority elects leaders of their own and serves every queue.
  await publishToAll(others, 'two', 30_000);
  const majorityView = await others.clusterStatus();
  for (const queue of victimQueues) expect(majorityView.queues[queue]?.leader).not.toBe(victim);

  cluster.heal();
  await waitFor(
    `${victim} to rejoin`,
    async () => {
      const view = await cutOff.clusterStatus();
      return Object.values(view.queues).every((queue) => queue.leader !== '');
    },
    30_000,
  );
  // Both confirmed messages of every queue are there ('never' may or may not have been stored).
  for (let i = 0; i < QUEUES; i++) expect((await others.queueStatus(name(i))).ready).toBeGreaterThanOrEqual(2);
  await Promise.all([client.close(), cutOff.close(), others.close()]);
}, 180_000);
