/**
 * The node's /metrics endpoint (Prometheus text, prom-client): its own counters, the process
 * metrics under their standard names, an event-loop delay that still shows a stall although
 * it is sampled only every EVENT_LOOP_SAMPLE_MS, and the queue depths read at scrape time.
 */
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import { afterEach, describe, expect, it } from 'vitest';

import { EVENT_LOOP_SAMPLE_MS, NodeMetrics, QUORUMQ_VERSION, type GroupObservation, type QueueObservation } from '../src/metrics.js';

let server: Server | null = null;

afterEach(async () => {
  await new Promise((resolve) => (server === null ? resolve(undefined) : server.close(resolve)));
  server = null;
});

async function scrape(path = '/metrics'): Promise<{ status: number; text: string }> {
  const { port } = server!.address() as AddressInfo;
  const response = await fetch(`http://127.0.0.1:${port}${path}`);
  return { status: response.status, text: await response.text() };
}

function gauge(text: string, name: string): number {
  const match = new RegExp(`^${name} (\\S+)$`, 'm').exec(text);
  expect(match, `${name} in /metrics`).not.toBeNull();
  return Number(match![1]);
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

describe('/metrics', () => {
  it('serves the broker counters and the process metrics; other paths are 404', async () => {
    const metrics = new NodeMetrics();
    server = await metrics.listen('127.0.0.1:0');
    metrics.walFlushes.inc(3);
    const { status, text } = await scrape();
    expect(status).toBe(200);
    expect(gauge(text, 'quorumq_wal_flushes_total')).toBe(3);
    // The standard names of the process and Node.js metrics, not prefixed (once or twice).
    expect(text).toMatch(/^process_cpu_seconds_total /m);
    expect(text).toMatch(/^process_resident_memory_bytes /m);
    expect(text).toMatch(/^nodejs_heap_size_used_bytes /m);
    expect(text).not.toMatch(/^quorumq_process_/m);
    expect((await scrape('/other')).status).toBe(404);
  });

  it('counts what each operation adds exactly at every scrape, whether or not a batch of observations filled', async () => {
    const metrics = new NodeMetrics();
    server = await metrics.listen('127.0.0.1:0');
    const confirms = 300; // more than one batch of held observations (OBSERVATIONS_HELD)
    for (let i = 0; i < confirms; i++) metrics.publishConfirmed(false, i % 2 === 0 ? 0.0004 : 0.003);
    metrics.publishConfirmed(true, 0.0004);
    metrics.deliveryPushed();
    metrics.walFlushed(4, 4096, 1);
    metrics.walFlushed(1, 100, 2);
    metrics.peerBatchSent(5);
    let { text } = await scrape();
    expect(gauge(text, 'quorumq_publishes_total\\{outcome="confirmed"\\}')).toBe(confirms);
    expect(gauge(text, 'quorumq_publishes_total\\{outcome="duplicate"\\}')).toBe(1);
    expect(gauge(text, 'quorumq_publish_confirm_seconds_count')).toBe(confirms + 1);
    expect(gauge(text, 'quorumq_publish_confirm_seconds_bucket\\{le="0.0005"\\}')).toBe(confirms / 2 + 1);
    expect(gauge(text, 'quorumq_deliveries_total')).toBe(1);
    expect(gauge(text, 'quorumq_wal_flushes_total')).toBe(2);
    expect(gauge(text, 'quorumq_wal_records_total')).toBe(5);
    expect(gauge(text, 'quorumq_wal_bytes_total')).toBe(4196);
    expect(gauge(text, 'quorumq_wal_syncs_total')).toBe(3);
    expect(gauge(text, 'quorumq_peer_batches_total')).toBe(1);
    expect(gauge(text, 'quorumq_peer_messages_total')).toBe(5);
    // A second scrape counts nothing twice, and what came since.
    metrics.publishConfirmed(false, 0.003);
    metrics.peerBatchSent(2);
    ({ text } = await scrape());
    expect(gauge(text, 'quorumq_publishes_total\\{outcome="confirmed"\\}')).toBe(confirms + 1);
    expect(gauge(text, 'quorumq_publish_confirm_seconds_count')).toBe(confirms + 2);
    expect(gauge(text, 'quorumq_peer_batches_total')).toBe(2);
    expect(gauge(text, 'quorumq_peer_messages_total')).toBe(7);
    expect(gauge(text, 'quorumq_wal_flushes_total')).toBe(2);
  });

  it('reads the groups, and the elections running and waiting for a slot, at scrape time', async () => {
    const metrics = new NodeMetrics();
    server = await metrics.listen('127.0.0.1:0');
    let counts = { active: 3, all: 10, campaigning: 2, waiting: 5 };
    metrics.observeGroups(() => counts);
    let { text } = await scrape();
    expect(gauge(text, 'quorumq_raft_groups\\{state="active"\\}')).toBe(3);
    expect(gauge(text, 'quorumq_raft_elections\\{state="campaigning"\\}')).toBe(2);
    expect(gauge(text, 'quorumq_raft_elections\\{state="waiting"\\}')).toBe(5);
    counts = { active: 0, all: 10, campaigning: 0, waiting: 0 };
    ({ text } = await scrape());
    expect(gauge(text, 'quorumq_raft_elections\\{state="waiting"\\}')).toBe(0);
  });

  it(`shows a stalled event loop although the delay is sampled only every ${EVENT_LOOP_SAMPLE_MS} ms`, async () => {
    const metrics = new NodeMetrics();
    server = await metrics.listen('127.0.0.1:0');
    await sleep(3 * EVENT_LOOP_SAMPLE_MS);
    const stallMs = 4 * EVENT_LOOP_SAMPLE_MS;
    const until = Date.now() + stallMs;
    while (Date.now() < until) {
      // a handler that blocks the event loop
    }
    await sleep(2 * EVENT_LOOP_SAMPLE_MS);
    const maxSeconds = gauge((await scrape()).text, 'nodejs_eventloop_lag_max_seconds');
    expect(maxSeconds).toBeGreaterThanOrEqual((stallMs - EVENT_LOOP_SAMPLE_MS) / 1000);
  });

  describe('queue depths', () => {
    const counts = (queue: string, ready: number, unacked = 0, delayed = 0, deadLettering = 0): QueueObservation => ({
      ...observation(queue),
      ready,
      unacked,
      delayed,
      deadLettering,
    });

    it('reports each led queue by state when scraped, and forgets queues no longer led', async () => {
      const metrics = new NodeMetrics();
      server = await metrics.listen('127.0.0.1:0');
      let led = [counts('orders', 5, 2, 1, 3), counts('audit "log"', 7)];
      let reads = 0;
      metrics.observeQueues(() => {
        reads++;
        return led;
      });
      expect(reads).toBe(0); // nothing is computed until a scrape
      let text = (await scrape()).text;
      expect(gauge(text, 'quorumq_queue_messages\\{queue="orders",state="ready"\\}')).toBe(5);
      expect(gauge(text, 'quorumq_queue_messages\\{queue="orders",state="unacked"\\}')).toBe(2);
      expect(gauge(text, 'quorumq_queue_messages\\{queue="orders",state="delayed"\\}')).toBe(1);
      expect(gauge(text, 'quorumq_queue_messages\\{queue="orders",state="dead_lettering"\\}')).toBe(3);
      expect(gauge(text, 'quorumq_queue_messages\\{queue="audit \\\\"log\\\\"",state="ready"\\}')).toBe(7);
      expect(gauge(text, 'quorumq_messages\\{state="ready"\\}')).toBe(12);
      expect(gauge(text, 'quorumq_messages\\{state="unacked"\\}')).toBe(2);
      expect(gauge(text, 'quorumq_queues_led')).toBe(2);

      // Leadership of "orders" moved away (or it was deleted), "audit" grew.
      led = [counts('audit "log"', 9)];
      text = (await scrape()).text;
      expect(text).not.toContain('queue="orders"');
      expect(gauge(text, 'quorumq_queue_messages\\{queue="audit \\\\"log\\\\"",state="ready"\\}')).toBe(9);
      expect(gauge(text, 'quorumq_messages\\{state="ready"\\}')).toBe(9);
      expect(gauge(text, 'quorumq_queues_led')).toBe(1);
    });

    it('lists only the largest queues past the limit; the node totals still count them all', async () => {
      const metrics = new NodeMetrics(2);
      server = await metrics.listen('127.0.0.1:0');
      metrics.observeQueues(() => [counts('small', 1), counts('big', 100), counts('medium', 0, 10), counts('empty', 0)]);
      const text = (await scrape()).text;
      const listed = [...text.matchAll(/^quorumq_queue_messages\{queue="([^"]*)",state="ready"\}/gm)].map((m) => m[1]).sort();
      expect(listed).toEqual(['big', 'medium']);
      expect(gauge(text, 'quorumq_messages\\{state="ready"\\}')).toBe(101);
      expect(gauge(text, 'quorumq_messages\\{state="unacked"\\}')).toBe(10);
      expect(gauge(text, 'quorumq_queues_led')).toBe(4);
    });
  });

  describe('per queue and per Raft group', () => {
    it('reports each listed queue\'s bytes, consumers and counters, and its group, as counters and gauges of the right type', async () => {
      const metrics = new NodeMetrics();
      server = await metrics.listen('127.0.0.1:0');
      const orders: QueueObservation = {
        ...observation('orders'),
        ready: 4,
        readyBytes: 400,
        consumers: 2,
        enqueued: 10,
        acked: 5,
        deliveries: 7,
        deadLettered: new Map([['rejected', 1]]),
        group: () => group({ term: 3, commitIndex: 20, appliedIndex: 19, snapshotIndex: 8, lastIndex: 21, followerLag: new Map([['n2', 0], ['n3', 13]]), electionsStarted: 1, leaderChanges: 2 }),
      };
      metrics.observeQueues(() => [orders]);
      metrics.observeMetadataGroup(() => group({ term: 2, commitIndex: 40, appliedIndex: 40, lastIndex: 40, leader: false, followerLag: new Map(), electionsStarted: 0, leaderChanges: 1 }));
      const { text } = await scrape();
      expect(gauge(text, 'quorumq_queue_ready_bytes\\{queue="orders"\\}')).toBe(400);
      expect(gauge(text, 'quorumq_queue_consumers\\{queue="orders"\\}')).toBe(2);
      expect(gauge(text, 'quorumq_queue_enqueued_total\\{queue="orders"\\}')).toBe(10);
      expect(gauge(text, 'quorumq_queue_acked_total\\{queue="orders"\\}')).toBe(5);
      expect(gauge(text, 'quorumq_queue_deliveries_total\\{queue="orders"\\}')).toBe(7);
      expect(gauge(text, 'quorumq_queue_dead_lettered_total\\{queue="orders",reason="rejected"\\}')).toBe(1);
      // A reason never seen has no series (no zeros for every queue and reason).
      expect(text).not.toContain('reason="expired"');
      const q = 'group="orders",kind="queue"';
      expect(gauge(text, `quorumq_raft_term\\{${q}\\}`)).toBe(3);
      expect(gauge(text, `quorumq_raft_commit_index\\{${q}\\}`)).toBe(20);
      expect(gauge(text, `quorumq_raft_applied_index\\{${q}\\}`)).toBe(19);
      expect(gauge(text, `quorumq_raft_snapshot_index\\{${q}\\}`)).toBe(8);
      expect(gauge(text, `quorumq_raft_last_index\\{${q}\\}`)).toBe(21);
      expect(gauge(text, `quorumq_raft_leader\\{${q}\\}`)).toBe(1);
      expect(gauge(text, `quorumq_raft_follower_lag\\{${q},peer="n2"\\}`)).toBe(0);
      expect(gauge(text, `quorumq_raft_follower_lag\\{${q},peer="n3"\\}`)).toBe(13);
      expect(gauge(text, `quorumq_raft_elections_started_total\\{${q}\\}`)).toBe(1);
      expect(gauge(text, `quorumq_raft_leader_changes_total\\{${q}\\}`)).toBe(2);
      const m = 'group="metadata",kind="metadata"';
      expect(gauge(text, `quorumq_raft_term\\{${m}\\}`)).toBe(2);
      expect(gauge(text, `quorumq_raft_leader\\{${m}\\}`)).toBe(0);
      expect(gauge(text, `quorumq_raft_leader_changes_total\\{${m}\\}`)).toBe(1);
      expect(text).not.toContain(`quorumq_raft_follower_lag{${m}`);
      // Counters are declared counters (Prometheus's rate() needs that), depths gauges.
      for (const name of ['quorumq_queue_enqueued_total', 'quorumq_queue_acked_total', 'quorumq_queue_deliveries_total', 'quorumq_queue_dead_lettered_total', 'quorumq_raft_elections_started_total', 'quorumq_raft_leader_changes_total']) {
        expect(text).toContain(`# TYPE ${name} counter`);
      }
      for (const name of ['quorumq_queue_ready_bytes', 'quorumq_queue_consumers', 'quorumq_raft_term', 'quorumq_raft_follower_lag']) expect(text).toContain(`# TYPE ${name} gauge`);
    });

    it('reports a compacting queue\'s replaced count (counter), keys and tombstones (gauges); other queues have no such series', async () => {
      const metrics = new NodeMetrics();
      server = await metrics.listen('127.0.0.1:0');
      const prices: QueueObservation = { ...observation('prices'), ready: 1000, compaction: { keys: 1000, replaced: 99_000, tombstones: 3 } };
      metrics.observeQueues(() => [prices, observation('orders')]);
      const { text } = await scrape();
      expect(gauge(text, 'quorumq_queue_compacted_total\\{queue="prices"\\}')).toBe(99_000);
      expect(gauge(text, 'quorumq_queue_compaction_keys\\{queue="prices"\\}')).toBe(1000);
      expect(gauge(text, 'quorumq_queue_tombstones\\{queue="prices"\\}')).toBe(3);
      expect(text).toContain('# TYPE quorumq_queue_compacted_total counter');
      expect(text).toContain('# TYPE quorumq_queue_compaction_keys gauge');
      expect(text).not.toMatch(/quorumq_queue_(compacted_total|compaction_keys|tombstones)\{queue="orders"\}/);
    });

    it('reads the node once per scrape, and a queue group only when the queue is listed', async () => {
      const metrics = new NodeMetrics(1);
      server = await metrics.listen('127.0.0.1:0');
      let reads = 0;
      const groupReads: string[] = [];
      const queue = (name: string, ready: number): QueueObservation => ({
        ...observation(name),
        ready,
        group: () => {
          groupReads.push(name);
          return group({});
        },
      });
      metrics.observeQueues(() => {
        reads++;
        return [queue('big', 9), queue('small', 1)];
      });
      await scrape();
      expect(reads).toBe(1);
      expect(groupReads).toEqual(['big']);
      const { text } = await scrape();
      expect(reads).toBe(2);
      expect(groupReads).toEqual(['big', 'big']);
      // Every per-queue and per-group series lists the same queues: the largest.
      expect(text).not.toContain('"small"');
      expect(gauge(text, 'quorumq_queues_led')).toBe(2);
      expect(gauge(text, 'quorumq_messages\\{state="ready"\\}')).toBe(10);
    });

    it('with a limit of 0, lists no queue but keeps the node totals and the metadata group', async () => {
      const metrics = new NodeMetrics(0);
      server = await metrics.listen('127.0.0.1:0');
      metrics.observeQueues(() => [{ ...observation('q'), ready: 3 }]);
      metrics.observeMetadataGroup(() => group({ term: 5 }));
      const { text } = await scrape();
      expect(text).not.toContain('queue="q"');
      expect(text).not.toContain('group="q"');
      expect(gauge(text, 'quorumq_messages\\{state="ready"\\}')).toBe(3);
      expect(gauge(text, 'quorumq_raft_term\\{group="metadata",kind="metadata"\\}')).toBe(5);
    });
  });

  it('reports the build, the WAL files, the free disk space and the groups without a leader', async () => {
    const metrics = new NodeMetrics();
    server = await metrics.listen('127.0.0.1:0');
    metrics.identify('n7');
    metrics.observeWal(() => ({ segments: 3, bytes: 12345 }));
    metrics.observeGroups(() => ({ active: 1, all: 4, leaderless: 2 }));
    metrics.diskFreeBytes.set(5e9);
    metrics.diskFreeLimitBytes.set(1e9);
    metrics.walSyncs.inc(4);
    const { text } = await scrape();
    expect(QUORUMQ_VERSION).toMatch(/^\d+\.\d+\.\d+/);
    expect(gauge(text, `quorumq_build_info\\{version="${QUORUMQ_VERSION.replace(/\./g, '\\.')}",node="n7"\\}`)).toBe(1);
    expect(gauge(text, 'quorumq_wal_segments')).toBe(3);
    expect(gauge(text, 'quorumq_wal_disk_bytes')).toBe(12345);
    expect(gauge(text, 'quorumq_wal_syncs_total')).toBe(4);
    expect(gauge(text, 'quorumq_disk_free_bytes')).toBe(5e9);
    expect(gauge(text, 'quorumq_disk_free_limit_bytes')).toBe(1e9);
    expect(gauge(text, 'quorumq_raft_groups\\{state="leaderless"\\}')).toBe(2);
  });
});

/** A led queue with nothing in it and a group at rest. */
function observation(queue: string): QueueObservation {
  return {
    queue,
    ready: 0,
    unacked: 0,
    delayed: 0,
    deadLettering: 0,
    readyBytes: 0,
    consumers: 0,
    enqueued: 0,
    acked: 0,
    deliveries: 0,
    deadLettered: new Map(),
    group: () => group({}),
  };
}

function group(fields: Partial<GroupObservation>): GroupObservation {
  return { term: 1, commitIndex: 0, appliedIndex: 0, snapshotIndex: 0, lastIndex: 0, leader: true, followerLag: new Map(), electionsStarted: 0, leaderChanges: 0, ...fields };
}
