/**
 * A node that was down while the cluster's nodes changed comes back: n3 is down while n4
 * joins and replaces n2, then n1 goes down too. n3's metadata names n1, n2 and n3 only, and
 * the one node it can hear from is n4, which it has never heard of. n3 admits n4 by the peer
 * address n4 tells on its calls (ClusterDirectory.introduce): n3 and n4 elect the metadata's
 * and the queue's leaders, n3 catches up, and every confirmed message is still there.
 * (Before, n3 dropped every message of a node its metadata did not name, and the cluster
 * stayed without a metadata leader until n1 came back.) n4 is added through n4 itself: a
 * joining node forwards the command to the metadata's leader (before, it waited for its own
 * replica to hear of a leader, which it never does until it is added).
 */
import { LocalCluster } from '@quorumq/cli';
import type { QuorumqClient } from '@quorumq/client';
import { afterAll, beforeAll, expect, it } from 'vitest';

import { TestCluster, refusal, waitFor } from './cluster.js';

let cluster: TestCluster;
const QUEUE = 'orders';

beforeAll(async () => {
  // Each founder's configuration names the founders only, as its file did when the cluster
  // was made (a node added later is in the metadata, not in the founders' files).
  let founders: string | undefined;
  const peers = (): string => local.nodes.map((n) => `${n.id}=${n.peerAddress}`).join(',');
  const local: LocalCluster = await LocalCluster.prepare(
    TestCluster.options({
      ...(process.env.STALE_DEBUG ? { inheritOutput: true, env: { QUORUMQ_LOG_LEVEL: 'info' } } : {}),
      peersOf: (id) => (['n1', 'n2', 'n3'].includes(id) ? (founders ??= peers()) : peers()),
    }),
  );
  cluster = TestCluster.of(local);
  await local.startAll();
}, 120_000);

afterAll(async () => {
  await cluster?.close();
});

async function publishAll(client: QuorumqClient, prefix: string, count: number): Promise<string[]> {
  const bodies = Array.from({ length: count }, (_, i) => `${prefix}-${i}`);
  const results = await Promise.all(bodies.map((body) => client.publish('', QUEUE, body)));
  for (const result of results) expect(result.outcome).toBe('confirmed');
  return bodies;
}

it('a node away while another joined and replaced a founder rejoins through the newcomer alone; nothing confirmed is lost', async () => {
  const client = cluster.client();
  await client.declareQueue(QUEUE);
  const confirmed = await publishAll(client, 'before', 50);

  // n3 is away while n4 joins and replaces n2.
  await cluster.kill('n3');
  const n4 = await cluster.local.prepareJoiner();
  cluster.startNode(n4.id);
  const n1n4 = cluster.client({ nodes: [cluster.local.node('n1').address, n4.address] });
  // Added through itself: the joining node, whose metadata replica knows no leader, finds it
  // among the nodes it was configured with.
  const viaJoiner = cluster.client({ nodes: [n4.address], leaderRouting: false, failoverTimeoutMs: 0 });
  // Before it is added it knows no metadata: anything else made through it is refused at once.
  let refused: Awaited<ReturnType<typeof refusal>> = null;
  await waitFor(async () => {
    // (ECONNREFUSED until its client listener is up.)
    refused = await refusal(viaJoiner.declareQueue('via-joiner'));
    return refused?.reason !== '';
  }, 30_000);
  expect(refused).toMatchObject({ code: 'UNAVAILABLE', reason: 'METADATA_BEHIND' });
  expect(refused!.message).toContain('not a member of the cluster');
  expect((await viaJoiner.addNode(n4.id, n4.peerAddress)).changed).toBe(true);
  await cluster.waitHealthy([n4.id]);
  expect((await n1n4.removeNode('n2', { replacement: n4.id })).changed).toBe(true);
  await waitFor(async () => {
    const cs = await n1n4.clusterStatus().catch(() => null);
    const q = cs?.queues[QUEUE];
    return cs !== null && q !== undefined && cs.nodes['n2'] === undefined && q.members.includes(n4.id) && !q.members.includes('n2') && q.retiring.length === 0;
  }, 90_000);
  const viaN4 = cluster.client({ nodes: [n4.address], leaderRouting: false });
  await waitFor(async () => {
    const s = await viaN4.queueStatus(QUEUE).catch(() => null);
    return s !== null && s.voters.includes(n4.id) && !s.voters.includes('n2');
  }, 60_000);
  confirmed.push(...(await publishAll(n1n4, 'during', 50)));
  await cluster.kill('n2');

  // n1 goes too: of the voters n1, n3, n4 only n4 is up, and n3 comes back knowing n1, n2, n3.
  await cluster.kill('n1');
  cluster.startNode('n3');
  const n3n4 = cluster.client({ nodes: [cluster.local.node('n3').address, n4.address] });
  await waitFor(async () => {
    const result = await n3n4.publish('', QUEUE, 'after').catch(() => null);
    return result?.outcome === 'confirmed';
  }, 90_000);
  confirmed.push('after');
  // n3 applied the metadata n4 led it to: it knows n4 and that n2 left.
  const viaN3 = cluster.client({ nodes: [cluster.local.node('n3').address], leaderRouting: false });
  await waitFor(async () => {
    const cs = await viaN3.clusterStatus().catch(() => null);
    return cs !== null && cs.nodes[n4.id] !== undefined && cs.nodes['n2'] === undefined;
  }, 60_000);
  expect(cluster.local.node('n3').output).toContain('admitted a peer the metadata here does not name yet');

  const seen = new Map<string, number>();
  const consumer = n3n4.consume(QUEUE, { prefetch: 200 });
  const timer = setTimeout(() => void consumer.cancel(), 60_000);
  for await (const delivery of consumer) {
    const body = Buffer.from(delivery.body).toString();
    seen.set(body, (seen.get(body) ?? 0) + 1);
    await delivery.ack();
    if (seen.size >= confirmed.length) break;
  }
  clearTimeout(timer);
  await consumer.close();
  for (const body of confirmed) expect(seen.get(body), body).toBe(1);
}, 300_000);
