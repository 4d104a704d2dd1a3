/**
 * Keyed compaction (spec 9, seed 003) against real node processes: 100,000 updates over
 * 1,000 keys leave 1,000 messages, a consumer reads the latest value of each key, and the
 * queue's disk use and restart follow its 1,000 keys, not its 100,000-message history
 * (seed 003's point: a compacted log replays 100 MB instead of 10 GB). Replaced messages
 * free their message-store records as acked ones do; snapshots hold the key index.
 * Waits are polls with generous deadlines; the figures are logged.
 */
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { PublishResult, QuorumqClient } from '@quorumq/client';

import { refusal, TestCluster, waitFor } from './cluster.js';

const MiB = 1024 * 1024;
const KEYS = 1_000;
const UPDATES = 100_000;
const BODY_BYTES = 512;
const HISTORY_BYTES = UPDATES * BODY_BYTES;
const QUEUE = 'latest';

function log(line: string): void {
  console.log(`[e2e-compaction] ${line}`);
}

function mb(bytes: number): string {
  return `${(bytes / 1e6).toFixed(2)} MB`;
}

/** Update `version` of key `version % KEYS`: the body says which (key:version), padded. */
function body(version: number): Buffer {
  const out = Buffer.alloc(BODY_BYTES, 0x2e);
  out.write(`${version % KEYS}:${version}:`, 0, 'latin1');
  return out;
}

function parse(bytes: Buffer): { key: number; version: number } | null {
  const match = /^(\d+):(\d+):/.exec(bytes.subarray(0, 32).toString('latin1'));
  return match === null ? null : { key: Number(match[1]), version: Number(match[2]) };
}

async function scrape(cluster: TestCluster, id: string): Promise<string> {
  const address = cluster.nodes.find((n) => n.id === id)?.metricsAddress;
  if (address == null) throw new Error(`${id} serves no metrics`);
  return (await fetch(`http://${address}/metrics`)).text();
}

function series(text: string, name: string, labels = ''): number | null {
  const prefix = labels === '' ? `${name} ` : `${name}{${labels}} `;
  const line = text.split('\n').find((l) => l.startsWith(prefix));
  return line === undefined ? null : Number(line.slice(line.lastIndexOf(' ') + 1));
}

async function perNode(cluster: TestCluster, name: string, labels = ''): Promise<Record<string, number>> {
  const values: Record<string, number> = {};
  for (const node of cluster.nodes) values[node.id] = series(await scrape(cluster, node.id), name, labels) ?? Number.NaN;
  return values;
}

function show(values: Record<string, number>, format: (v: number) => string = String): string {
  return Object.entries(values)
    .map(([id, v]) => `${id}=${format(v)}`)
    .join(' ');
}

/** The queue's snapshot files on a node (`<dataDir>/wal/snapshots/<hex group id>-<index>-<term>.snap`). */
function queueSnapshotBytes(dataDir: string): number[] {
  const dir = join(dataDir, 'wal', 'snapshots');
  let files: string[];
  try {
    files = readdirSync(dir);
  } catch {
    return [];
  }
  return files
    .filter((file) => {
      const match = /^([0-9a-f]+)-\d+-\d+\.snap$/.exec(file);
      return match !== null && Buffer.from(match[1]!, 'hex').toString('utf8').endsWith(`/${QUEUE}`);
    })
    .map((file) => statSync(join(dir, file)).size);
}

/**
 * Publishes updates `from..to-1` keyed by the `entity` header, a round of one update per key
 * (1,000 in flight) at a time: an update is published only once the key's previous one was
 * confirmed, so the log holds each key's updates in version order (a publisher's re-send
 * after a failover could otherwise commit an older version after a newer one, and "latest"
 * is the log's order). All must be confirmed.
 */
async function publishUpdates(client: QuorumqClient, from: number, to: number): Promise<void> {
  const publisher = client.createPublisher({ maxInFlight: KEYS });
  let notConfirmed = 0;
  for (let round = from; round < to; round += KEYS) {
    const results: Promise<PublishResult>[] = [];
    for (let version = round; version < Math.min(to, round + KEYS); version++) {
      results.push(publisher.publish(QUEUE, body(version), { headers: { entity: `k${version % KEYS}` } }));
    }
    for (const result of await Promise.all(results)) if (result.outcome !== 'confirmed') notConfirmed++;
  }
  await publisher.close();
  expect(notConfirmed).toBe(0);
}

describe('a compacted queue: 100,000 updates over 1,000 keys', () => {
  let cluster: TestCluster;
  let client: QuorumqClient;

  beforeAll(async () => {
    // Snapshots every MiB of log and 1 MiB store segments: what a long history would leave on
    // disk shows within the test's size.
    cluster = await TestCluster.start({ metrics: true, env: { QUORUMQ_SNAPSHOT_LOG_BYTES_MIN: String(MiB), QUORUMQ_MESSAGE_STORE_SEGMENT_BYTES: String(MiB) } });
    client = cluster.client({ failoverTimeoutMs: 30_000 });
  }, 120_000);

  afterAll(async () => {
    await cluster?.close();
  });

  it('leave 1,000 messages, the latest per key; disk and restart follow the keys, not the history', async () => {
    const declared = await client.declareQueue(QUEUE, { compactionKey: 'entity' });
    expect(declared.created).toBe(true);

    const started = Date.now();
    await publishUpdates(client, 0, UPDATES);
    const publishSeconds = (Date.now() - started) / 1000;
    log(`published ${UPDATES} updates over ${KEYS} keys (${mb(HISTORY_BYTES)} of history) with confirms in ${publishSeconds.toFixed(1)} s (${Math.round(UPDATES / publishSeconds)}/s)`);

    const status = await client.queueStatus(QUEUE);
    log(`status: ready=${status.ready} bytes=${status.bytes} compaction=${JSON.stringify(status.compaction)}`);
    expect(status.ready).toBe(KEYS);
    expect(status.bytes).toBe(KEYS * BODY_BYTES);
    expect(status.compaction).toEqual({ keys: KEYS, replaced: UPDATES - KEYS, tombstones: 0, tombstonesExpired: 0 });
    const leader = status.leader;
    expect(series(await scrape(cluster, leader), 'quorumq_queue_compacted_total', `queue="${QUEUE}"`)).toBe(UPDATES - KEYS);
    expect(series(await scrape(cluster, leader), 'quorumq_queue_compaction_keys', `queue="${QUEUE}"`)).toBe(KEYS);

    // Disk: every replica's message store releases the replaced messages' records, and its
    // segments are compacted: a few MiB at most, against 51 MB of history.
    const DISK_LIMIT = 4 * MiB;
    let records: Record<string, number> = {};
    let disk: Record<string, number> = {};
    await waitFor(async () => {
      records = await perNode(cluster, 'quorumq_message_store_records');
      disk = await perNode(cluster, 'quorumq_message_store_bytes', 'kind="disk"');
      return Object.values(records).every((v) => v <= KEYS) && Object.values(disk).every((v) => v < DISK_LIMIT);
    }, 60_000).catch(() => undefined);
    const live = await perNode(cluster, 'quorumq_message_store_bytes', 'kind="live"');
    const wal = await perNode(cluster, 'quorumq_wal_disk_bytes');
    log(`store records: ${show(records)}; live: ${show(live, mb)}; disk: ${show(disk, mb)} (limit ${mb(DISK_LIMIT)}); WAL disk: ${show(wal, mb)}`);
    for (const [id, count] of Object.entries(records)) expect(count, `${id}: store records`).toBeLessThanOrEqual(KEYS);
    for (const [id, bytes] of Object.entries(live)) expect(bytes, `${id}: store live bytes`).toBeLessThanOrEqual(KEYS * BODY_BYTES * 1.1);
    for (const [id, bytes] of Object.entries(disk)) expect(bytes, `${id}: store disk bytes`).toBeLessThan(DISK_LIMIT);
    // Snapshots hold 1,000 messages' metadata and the key index: tens of kilobytes (an id per
    // update of the history would be 400 KB).
    for (const node of cluster.nodes) {
      const sizes = queueSnapshotBytes(node.dataDir);
      log(`${node.id}: snapshots of ${QUEUE}: ${sizes.map((b) => `${(b / 1024).toFixed(1)} KiB`).join(', ') || 'none'}`);
      expect(sizes.length, `${node.id}: snapshots`).toBeGreaterThan(0);
      for (const bytes of sizes) expect(bytes, `${node.id}: snapshot bytes`).toBeLessThan(128 * 1024);
    }

    // Ten keys deleted: their values give way to tombstones.
    const publisher = client.createPublisher({ maxInFlight: 16 });
    const deletes = await Promise.all(Array.from({ length: 10 }, (_, key) => publisher.publish(QUEUE, '', { headers: { entity: `k${key}` } })));
    await publisher.close();
    expect(deletes.every((r) => r.outcome === 'confirmed')).toBe(true);
    const afterDeletes = await client.queueStatus(QUEUE);
    expect({ ready: afterDeletes.ready, compaction: afterDeletes.compaction }).toEqual({
      ready: KEYS,
      compaction: { keys: KEYS - 10, replaced: UPDATES - KEYS + 10, tombstones: 10, tombstonesExpired: 0 },
    });

    // Restart: kill -9 of every node; the queue comes back from its small snapshot and the log since.
    await Promise.all(cluster.nodes.map((n) => cluster.kill(n.id)));
    const restarted = Date.now();
    for (const node of cluster.nodes) cluster.startNode(node.id);
    await cluster.waitHealthy();
    const healthySeconds = (Date.now() - restarted) / 1000;
    const consumer = client.consume(QUEUE, { prefetch: 500 });
    const latest = new Map<number, number>();
    const tombstones = new Set<number>();
    let firstDeliverySeconds = Number.NaN;
    let stale = 0;
    let unreadable = 0;
    const hard = setTimeout(() => void consumer.cancel(), 60_000);
    for await (const delivery of consumer) {
      if (Number.isNaN(firstDeliverySeconds)) firstDeliverySeconds = (Date.now() - restarted) / 1000;
      if (delivery.tombstone || delivery.body.length === 0) {
        const entity = delivery.headers['entity'];
        tombstones.add(Number(String(entity).slice(1)));
      } else {
        const update = parse(delivery.body);
        if (update === null) unreadable++;
        else {
          if (latest.has(update.key)) stale++;
          latest.set(update.key, update.version);
        }
      }
      void delivery.ack();
      if (latest.size + tombstones.size === KEYS) break;
    }
    clearTimeout(hard);
    await consumer.close();
    log(`restart after kill -9 of every node: healthy in ${healthySeconds.toFixed(1)} s, first delivery ${firstDeliverySeconds.toFixed(1)} s after the restart`);
    expect(firstDeliverySeconds).toBeLessThan(20);

    // The consumer read the latest version of each live key, once, and a tombstone for each deleted one.
    expect({ unreadable, stale, values: latest.size, tombstones: [...tombstones].sort((a, b) => a - b) }).toEqual({
      unreadable: 0,
      stale: 0,
      values: KEYS - 10,
      tombstones: Array.from({ length: 10 }, (_, key) => key),
    });
    const wrong = [...latest].filter(([key, version]) => version !== UPDATES - KEYS + key);
    expect(wrong.slice(0, 10), `keys whose delivered version is not their latest (${wrong.length}), [key, version]`).toEqual([]);
    await waitFor(async () => (await client.queueStatus(QUEUE)).ready === 0, 15_000);
    expect(cluster.local.unexpectedExits).toEqual([]);
  }, 180_000);

  it('declare: bad compaction arguments are INVALID_ARGUMENT with the argument named; another key is a mismatch; the SDK tombstone flag and min lag work end to end', async () => {
    expect(await refusal(client.declareQueue('bad-lag', { compactionKey: 'id', compactionMinLagMs: -1 }))).toMatchObject({ code: 'INVALID_ARGUMENT', message: expect.stringContaining('compactionMinLagMs') });
    expect(await refusal(client.declareQueue('no-key', { compactionDeadLetter: true }))).toMatchObject({ code: 'INVALID_ARGUMENT', message: expect.stringContaining('needs compactionKey') });
    expect(await refusal(client.declareQueue('empty-key', { compactionKey: '' }))).toMatchObject({ code: 'INVALID_ARGUMENT', message: expect.stringContaining('compactionKey') });
    expect(await refusal(client.declareQueue(QUEUE, { compactionKey: 'other' }))).toMatchObject({ code: 'FAILED_PRECONDITION', message: expect.stringContaining('compactionKey') });
    expect(await refusal(client.declareQueue(QUEUE, { compactionKey: 'entity' }))).toBeNull();

    const queue = 'bursts';
    await client.declareQueue(queue, { compactionKey: '$routing_key', compactionMinLagMs: 60_000, compactionDeadLetter: true, deadLetterExchange: 'amq.direct' });
    for (let i = 0; i < 3; i++) await client.publish('', queue, `v${i}`);
    // Younger than the lag: nothing replaced, a consumer sees the burst.
    expect((await client.queueStatus(queue)).compaction).toEqual({ keys: 1, replaced: 0, tombstones: 0, tombstonesExpired: 0 });
    await client.publish('', queue, 'gone', { tombstone: true });
    const status = await client.queueStatus(queue);
    expect({ ready: status.ready, compaction: status.compaction }).toEqual({ ready: 4, compaction: { keys: 1, replaced: 0, tombstones: 1, tombstonesExpired: 0 } });
    const got = [];
    for (let i = 0; i < 4; i++) {
      const delivery = await client.get(queue);
      got.push({ body: delivery?.body.toString(), tombstone: delivery?.tombstone });
    }
    expect(got).toEqual([
      { body: 'v0', tombstone: false },
      { body: 'v1', tombstone: false },
      { body: 'v2', tombstone: false },
      { body: 'gone', tombstone: true },
    ]);
  });
});
