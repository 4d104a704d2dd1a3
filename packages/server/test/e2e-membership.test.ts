/**
 * Issue 18, membership: a node joins a running cluster and a queue grows onto it while
 * publishing (the queue's leader killed -9 during the change); leaders rebalance; `check
 * quorum-critical` answers yes and no; a node is removed (its replicas shrink away); a node
 * whose data directory was lost is replaced by a new one. Nothing confirmed is lost.
 */
import { rmSync } from 'node:fs';

import type { QuorumqClient } from '@quorumq/client';
import { afterAll, beforeAll, expect, it } from 'vitest';

import { TestCluster, refusal, waitFor } from './cluster.js';

let cluster: TestCluster;
let client: QuorumqClient;
const QUEUE = 'orders';
const confirmed = new Set<string>();
let published = 0;

beforeAll(async () => {
  cluster = await TestCluster.start(process.env.MEMBERSHIP_DEBUG ? { inheritOutput: true, env: { QUORUMQ_LOG_LEVEL: 'info' } } : {});
  client = cluster.client();
  await client.declareQueue(QUEUE);
}, 120_000);

afterAll(async () => {
  await cluster?.close();
});

/** Publishes numbered messages until `stop` resolves, recording the confirmed ones. */
async function publishUntil(stop: Promise<void>): Promise<void> {
  let done = false;
  void stop.then(() => (done = true));
  const inFlight = new Set<Promise<void>>();
  while (!done) {
    const body = `m${published++}`;
    const p = client.publish('', QUEUE, body).then(
      (result) => void (result.outcome === 'confirmed' && confirmed.add(body)),
      () => undefined,
    );
    inFlight.add(p);
    void p.finally(() => inFlight.delete(p));
    if (inFlight.size >= 32) await Promise.race(inFlight);
  }
  await Promise.all(inFlight);
}

async function status(queue = QUEUE, via?: QuorumqClient) {
  return (via ?? client).queueStatus(queue);
}

it('check quorum-critical: no node is critical while all three are up; unknown nodes are refused', async () => {
  for (const id of ['n1', 'n2', 'n3']) expect(await client.quorumCritical(id)).toEqual({ queues: [], metadata: false });
  expect(await refusal(client.quorumCritical('n9'))).toMatchObject({ code: 'NOT_FOUND', reason: 'NODE_NOT_FOUND' });
  expect(await refusal(client.quorumCritical('bad id!'))).toMatchObject({ code: 'INVALID_ARGUMENT' });
});

it('rebalance spreads the leaders of 30 queues within ±10 % over the nodes', async () => {
  const names = Array.from({ length: 30 }, (_, i) => `r${String(i).padStart(2, '0')}`);
  for (const name of names) await client.declareQueue(name);
  // All on n1 first.
  for (const name of names) await client.transferLeadership(name, 'n1');
  await waitFor(async () => {
    const cs = await client.clusterStatus();
    return names.every((name) => cs.queues[name]?.leader === 'n1');
  }, 60_000);
  expect((await client.rebalance()).changed).toBe(true);
  await waitFor(async () => {
    const cs = await client.clusterStatus();
    const counts = new Map<string, number>();
    for (const name of names) counts.set(cs.queues[name]!.leader, (counts.get(cs.queues[name]!.leader) ?? 0) + 1);
    return ['n1', 'n2', 'n3'].every((id) => Math.abs((counts.get(id) ?? 0) - 10) <= 1);
  }, 60_000);
  for (const name of names) await client.deleteQueue(name);
}, 180_000);

it('a fourth node joins, and a queue grows onto it while publishing, its leader killed -9 during the change', async () => {
  let stop!: () => void;
  const stopped = new Promise<void>((resolve) => (stop = resolve));
  const publishing = publishUntil(stopped);
  await waitFor(async () => confirmed.size >= 200, 30_000);

  const n4 = await cluster.local.prepareJoiner();
  cluster.startNode(n4.id);
  expect((await client.addNode(n4.id, n4.peerAddress)).changed).toBe(true);
  await cluster.waitHealthy([n4.id]);
  await waitFor(async () => (await client.clusterStatus()).nodes['n4']?.voter === true, 30_000);

  const leader = await cluster.leaderOf(QUEUE, client);
  expect((await client.growQueue(QUEUE, 'n4')).changed).toBe(true);
  await cluster.kill(leader);
  await waitFor(async () => confirmed.size >= 600, 60_000);
  cluster.startNode(leader);
  await cluster.waitHealthy([leader]);
  const viaN4 = cluster.client({ nodes: [n4.address], leaderRouting: false });
  await waitFor(async () => {
    const s = await status(QUEUE, viaN4).catch(() => null);
    return s !== null && s.voters.includes('n4') && s.voters.length === 4 && s.learners.length === 0;
  }, 60_000);
  stop();
  await publishing;
  expect((await status()).members).toEqual(expect.arrayContaining(['n1', 'n2', 'n3', 'n4']));
  // n4's replica holds every message the others hold.
  await waitFor(async () => {
    const all = await Promise.all(cluster.nodes.map((n) => status(QUEUE, cluster.client({ nodes: [n.address], leaderRouting: false })).catch(() => null)));
    return all.every((s) => s !== null && s.commitIndex === all[0]!.commitIndex);
  }, 30_000);
}, 240_000);

it('with n3 down, n1 is quorum-critical for the queues n1 and n3 replicate and for the metadata', async () => {
  await cluster.kill('n3');
  // `orders` has four voters (n1-n4): without n3 and n1, two of four is no majority; the same for the metadata.
  await waitFor(async () => {
    const critical = await client.quorumCritical('n1').catch(() => null);
    return critical !== null && critical.queues.includes(QUEUE) && critical.metadata;
  }, 20_000);
  expect(await client.quorumCritical('n3')).toEqual({ queues: [], metadata: false });
  cluster.startNode('n3');
  await cluster.waitHealthy(['n3']);
  await waitFor(async () => JSON.stringify(await client.quorumCritical('n1')) === JSON.stringify({ queues: [], metadata: false }), 20_000);
}, 120_000);

it('removing a node shrinks its replicas away; the node then leaves the metadata group', async () => {
  expect(await refusal(client.removeNode('n9'))).toMatchObject({ code: 'NOT_FOUND', reason: 'NODE_NOT_FOUND' });
  expect((await client.removeNode('n1')).changed).toBe(true);
  // Read from the nodes that stay: n1 leaves the metadata group before the entry that marks it
  // removed, so its own view never shows that entry.
  const stayers = cluster.client({ nodes: ['n2', 'n3', 'n4'].map((id) => cluster.local.node(id).address) });
  await waitFor(async () => {
    const cs = await stayers.clusterStatus().catch(() => null);
    return cs !== null && cs.nodes['n1'] === undefined && !cs.queues[QUEUE]!.members.includes('n1') && cs.queues[QUEUE]!.retiring.length === 0;
  }, 60_000);
  const viaN2 = cluster.client({ nodes: [cluster.local.node('n2').address], leaderRouting: false });
  await waitFor(async () => {
    const s = await status(QUEUE, viaN2).catch(() => null);
    return s !== null && !s.voters.includes('n1');
  }, 30_000);
  // A removed node's id cannot come back.
  expect(await refusal(client.addNode('n1', cluster.local.node('n1').peerAddress))).toMatchObject({ code: 'FAILED_PRECONDITION' });
  // n1 itself learns it from its peers (which refuse it as removed): its own ClusterStatus says
  // so, and it refuses clients UNAVAILABLE / NODE_REMOVED at once (before, it kept saying
  // 'removing' and proxied calls its peers refused, so a client waited for its timeout).
  const viaN1 = cluster.client({ nodes: [cluster.local.node('n1').address], leaderRouting: false, failoverTimeoutMs: 2_000 });
  await waitFor(async () => (await viaN1.clusterStatus().catch(() => null))?.nodes['n1']?.state === 'removed', 20_000);
  const started = Date.now();
  expect(await refusal(viaN1.queueStatus(QUEUE))).toMatchObject({ code: 'UNAVAILABLE', reason: 'NODE_REMOVED' });
  expect(Date.now() - started).toBeLessThan(10_000);
  const removedLines = (): number => cluster.local.node('n1').output.split('node n1 was removed from the cluster: it takes no part any more').length - 1;
  expect(removedLines()).toBe(1);
  // Restarted on its old data (its metadata still says 'removing'), it learns it again at once.
  await cluster.kill('n1');
  cluster.startNode('n1');
  await waitFor(async () => removedLines() === 2, 20_000);
  expect(await refusal(viaN1.queueStatus(QUEUE))).toMatchObject({ code: 'UNAVAILABLE', reason: 'NODE_REMOVED' });
  await cluster.kill('n1');
}, 120_000);

it('a node whose data directory was lost refuses to rejoin under its id, and says what to do', async () => {
  const lost = cluster.local.node('n2');
  await cluster.kill('n2');
  rmSync(lost.dataDir, { recursive: true, force: true });
  cluster.startNode('n2');
  // Its peers knew another incarnation of n2: it stops before it takes part.
  await waitFor(async () => !cluster.local.isRunning('n2'), 30_000);
  expect(lost.output).toContain("must not rejoin under the same id");
  expect(lost.output).toContain('remove-node n2 --replace-with');
  const exit = cluster.local.unexpectedExits.find((e) => e.id === 'n2');
  expect(exit?.code).toBe(70);
  // The others noticed and refused it; the queue still serves.
  expect((await client.publish('', QUEUE, 'after-n2-lost')).outcome).toBe('confirmed');
  confirmed.add('after-n2-lost');
}, 60_000);

it('a node whose data directory was lost is replaced by a new node; every confirmed message is consumed', async () => {
  const lost = cluster.local.node('n2');
  await cluster.kill('n2');
  rmSync(lost.dataDir, { recursive: true, force: true });
  const n5 = await cluster.local.prepareJoiner();
  cluster.startNode(n5.id);
  const survivors = cluster.client({ nodes: [cluster.local.node('n3').address, cluster.local.node('n4').address] });
  expect((await survivors.addNode(n5.id, n5.peerAddress)).changed).toBe(true);
  await cluster.waitHealthy([n5.id]);
  expect((await survivors.removeNode('n2', { replacement: 'n5' })).changed).toBe(true);
  await waitFor(async () => {
    const cs = await survivors.clusterStatus().catch(() => null);
    const q = cs?.queues[QUEUE];
    return cs !== null && q !== undefined && cs.nodes['n2'] === undefined && q.members.includes('n5') && !q.members.includes('n2') && q.retiring.length === 0;
  }, 90_000);
  const viaN5 = cluster.client({ nodes: [n5.address], leaderRouting: false });
  await waitFor(async () => {
    const s = await status(QUEUE, viaN5).catch(() => null);
    return s !== null && s.voters.includes('n5') && !s.voters.includes('n2');
  }, 60_000);

  // Every confirmed message is there, once.
  const seen = new Map<string, number>();
  const total = (await survivors.queueStatus(QUEUE)).ready;
  const consumer = survivors.consume(QUEUE, { prefetch: 500 });
  const timer = setTimeout(() => void consumer.cancel(), 60_000);
  expect(total).toBeGreaterThanOrEqual(confirmed.size);
  for await (const delivery of consumer) {
    const body = Buffer.from(delivery.body).toString();
    seen.set(body, (seen.get(body) ?? 0) + 1);
    await delivery.ack();
    if (seen.size >= total) break;
  }
  clearTimeout(timer);
  await consumer.close();
  for (const body of confirmed) expect(seen.get(body), body).toBe(1);
}, 240_000);

it('ClusterStatus with depths gives the depths of queues the answering node holds no replica of', async () => {
  // After the replacement: n3, n4, n5. A one-replica queue on n4, asked through n3.
  const via = cluster.client({ nodes: [cluster.local.node('n3').address], leaderRouting: false });
  await via.declareQueue('single', { replicas: 1 });
  const holder = (await via.clusterStatus()).queues['single']!.members[0]!;
  const asked = ['n3', 'n4', 'n5'].find((id) => id !== holder)!;
  const client2 = cluster.client({ nodes: [cluster.local.node(asked).address], leaderRouting: false });
  const publisher = cluster.client();
  for (let i = 0; i < 7; i++) await publisher.publish('', 'single', `s${i}`);
  const plain = (await client2.clusterStatus()).queues['single']!;
  expect(plain.leader).toBe('');
  const deep = (await client2.clusterStatus({ depths: true })).queues['single']!;
  expect(deep).toMatchObject({ leader: holder, members: [holder], ready: 7 });
}, 60_000);
