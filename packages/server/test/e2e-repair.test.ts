/**
 * Spec 10: a replica whose storage is damaged repairs itself from its peers. With a node
 * stopped, a byte is flipped in the middle of its WAL (a follower's, then separately the
 * leader's) or in its snapshot file; it starts, reports the repair, catches up from the
 * others and votes again; then the node that was damaged must be part of every majority
 * (another node is killed) and every confirmed message is consumed exactly once.
 */
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { QuorumqClient } from '@quorumq/client';

import { TestCluster, waitFor } from './cluster.js';

let cluster: TestCluster | null = null;

afterEach(async () => {
  await cluster?.close();
  cluster = null;
});

const COUNT = 300;

async function metricsOf(node: { metricsAddress: string | null }): Promise<string> {
  if (node.metricsAddress === null) throw new Error('no metrics address');
  return (await fetch(`http://${node.metricsAddress}/metrics`)).text();
}

function series(text: string, name: string): number {
  const line = text.split('\n').find((l) => l.startsWith(name));
  return line === undefined ? 0 : Number(line.slice(line.lastIndexOf(' ') + 1));
}

/** Drains a queue: every body it holds now, acked, stopping after `idleMs` without a delivery. */
async function drain(client: QuorumqClient, queue: string, idleMs = 3000, maxMs = 90_000): Promise<string[]> {
  const bodies: string[] = [];
  const consumer = client.consume(queue, { prefetch: 200 });
  let idle = setTimeout(() => void consumer.cancel(), idleMs);
  const hard = setTimeout(() => void consumer.cancel(), maxMs);
  for await (const delivery of consumer) {
    clearTimeout(idle);
    bodies.push(delivery.body.toString());
    await delivery.ack();
    idle = setTimeout(() => void consumer.cancel(), idleMs);
  }
  clearTimeout(idle);
  clearTimeout(hard);
  return bodies;
}

async function publishAll(client: QuorumqClient, queue: string, from: number, to: number): Promise<string[]> {
  const publisher = client.createPublisher({ maxInFlight: 64, producerId: `repair-${queue}-${from}` });
  const bodies = Array.from({ length: to - from }, (_, i) => `m${from + i}`.padEnd(300, '.'));
  const results = await Promise.all(bodies.map((body) => publisher.publish(queue, body)));
  await publisher.close();
  expect(results.every((r) => r.outcome === 'confirmed')).toBe(true);
  return bodies;
}

function flipInWal(dataDir: string): string {
  const walDir = join(dataDir, 'wal');
  const segment = readdirSync(walDir).filter((f) => f.endsWith('.wal')).sort()[0];
  if (segment === undefined) throw new Error(`no WAL segment in ${walDir}`);
  const file = join(walDir, segment);
  const bytes = readFileSync(file);
  expect(bytes.length).toBeGreaterThan(50_000);
  const at = Math.floor(bytes.length / 2);
  bytes[at] = (bytes[at] ?? 0) ^ 0xff;
  writeFileSync(file, bytes);
  return `${file} at ${at}`;
}

function flipInSnapshots(dataDir: string): number {
  const dir = join(dataDir, 'wal', 'snapshots');
  const files = readdirSync(dir).filter((f) => f.endsWith('.snap'));
  for (const name of files) {
    const file = join(dir, name);
    const bytes = readFileSync(file);
    const at = Math.floor(bytes.length / 2);
    bytes[at] = (bytes[at] ?? 0) ^ 0xff;
    writeFileSync(file, bytes);
  }
  return files.length;
}

/**
 * Starts the damaged node, waits for its repair to be reported and for every repaired group
 * to catch up (it votes again), then kills `spare` so that it is in every majority, and
 * checks every confirmed message is consumed exactly once.
 */
async function repairAndConsume(c: TestCluster, client: QuorumqClient, damaged: string, spare: string, kind: string, confirmed: string[]): Promise<void> {
  const node = c.nodes.find((n) => n.id === damaged)!;
  const started = Date.now();
  c.startNode(damaged);
  await c.waitHealthy();
  let text = '';
  await waitFor(async () => {
    text = await metricsOf(node).catch(() => '');
    const repaired = series(text, `quorumq_repairs_total{kind="${kind}"}`);
    return repaired > 0 && series(text, 'quorumq_repairs_total{kind="recovered"}') >= repaired && series(text, 'quorumq_raft_groups{state="recovering"}') === 0;
  }, 60_000);
  expect(series(text, 'quorumq_repair_fetched_bytes_total')).toBeGreaterThan(0);
  console.log(
    `[e2e-repair] ${kind} on ${damaged}: ${series(text, `quorumq_repairs_total{kind="${kind}"}`)} groups repaired, ` +
      `${series(text, 'quorumq_repair_fetched_bytes_total')} bytes fetched, all caught up ${Date.now() - started} ms after start`,
  );
  // More traffic while the repaired node is back, then it must carry the queue with one other node.
  confirmed.push(...(await publishAll(client, 'precious', COUNT, COUNT + 50)));
  await c.kill(spare);
  const bodies = await drain(client, 'precious');
  const unique = new Set(bodies);
  expect({ consumed: bodies.length, unique: unique.size }).toEqual({ consumed: confirmed.length, unique: confirmed.length });
  expect([...unique].sort()).toEqual([...confirmed].sort());
}

describe('spec 10: a damaged replica repairs itself from its peers', () => {
  for (const role of ['follower', 'leader'] as const) {
    it(`a byte flipped in the middle of the ${role}'s WAL: it repairs, catches up, and every confirmed message is consumed once`, async () => {
      cluster = await TestCluster.start({ metrics: true, env: { QUORUMQ_REQUEST_TIMEOUT_MS: '5000' } });
      const client = cluster.client({ failoverTimeoutMs: 30_000 });
      await client.declareQueue('precious');
      const confirmed = await publishAll(client, 'precious', 0, COUNT);
      const leader = await cluster.leaderOf('precious', client);
      const others = cluster.nodes.map((n) => n.id).filter((id) => id !== leader);
      const damaged = role === 'leader' ? leader : others[0]!;
      const spare = role === 'leader' ? others[0]! : leader;
      await cluster.kill(damaged);
      flipInWal(cluster.nodes.find((n) => n.id === damaged)!.dataDir);
      await repairAndConsume(cluster, client, damaged, spare, 'wal', confirmed);
    });
  }

  it("a corrupted snapshot file: the follower drops it, fetches the leader's, and every confirmed message is consumed once", async () => {
    cluster = await TestCluster.start({
      metrics: true,
      env: { QUORUMQ_REQUEST_TIMEOUT_MS: '5000', QUORUMQ_SNAPSHOT_INTERVAL: '64', QUORUMQ_SNAPSHOT_LOG_BYTES_MIN: '1024' },
    });
    const client = cluster.client({ failoverTimeoutMs: 30_000 });
    await client.declareQueue('precious');
    const confirmed = await publishAll(client, 'precious', 0, COUNT);
    const leader = await cluster.leaderOf('precious', client);
    const damaged = cluster.nodes.map((n) => n.id).find((id) => id !== leader)!;
    const node = cluster.nodes.find((n) => n.id === damaged)!;
    await waitFor(async () => readdirSync(join(node.dataDir, 'wal', 'snapshots')).some((f) => f.endsWith('.snap')), 30_000);
    await cluster.kill(damaged);
    expect(flipInSnapshots(node.dataDir)).toBeGreaterThan(0);
    await repairAndConsume(cluster, client, damaged, leader, 'snapshot', confirmed);
  });
});
