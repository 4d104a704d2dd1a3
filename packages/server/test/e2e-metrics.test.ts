/**
 * The queue depth gauges of real nodes: the leader of a queue reports its messages by state
 * (quorumq_queue_messages, computed when /metrics is scraped), its followers do not, and a
 * deleted queue's series go.
 */
import { afterAll, beforeAll, expect, it, vi } from 'vitest';

import { TestCluster } from './cluster.js';

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

/** The value of one series, or null when the node does not report it. */
function series(text: string, name: string, labels: string): number | null {
  const line = text.split('\n').find((l) => l.startsWith(`${name}{${labels}} `));
  return line === undefined ? null : Number(line.slice(line.lastIndexOf(' ') + 1));
}

it("a queue's leader reports its ready and unacked messages; followers do not; deletion removes the series", async () => {
  const client = cluster.client();
  await client.declareQueue('depth');
  for (const body of ['a', 'b', 'c']) await client.publish('', 'depth', body);
  const held = await client.get('depth', { manualAck: true });
  expect(held).not.toBeNull();
  const leader = await cluster.leaderOf('depth', client);

  const text = await scrape(leader);
  expect(series(text, 'quorumq_queue_messages', 'queue="depth",state="ready"')).toBe(2);
  expect(series(text, 'quorumq_queue_messages', 'queue="depth",state="unacked"')).toBe(1);
  expect(series(text, 'quorumq_queue_messages', 'queue="depth",state="delayed"')).toBe(0);
  expect(series(text, 'quorumq_messages', 'state="ready"')).toBeGreaterThanOrEqual(2);
  for (const follower of cluster.nodes.map((n) => n.id).filter((id) => id !== leader)) {
    expect(await scrape(follower)).not.toContain('queue="depth"');
  }

  // Applied on the leader by the time the call returns, or very soon after (the replica is
  // removed when the node reconciles with the metadata).
  const settled = { timeout: 10_000, interval: 100 };
  await held?.ack();
  await vi.waitFor(async () => expect(series(await scrape(leader), 'quorumq_queue_messages', 'queue="depth",state="unacked"')).toBe(0), settled);
  await client.deleteQueue('depth');
  await vi.waitFor(async () => expect(await scrape(leader)).not.toContain('queue="depth"'), settled);
});
