/**
 * The node's /metrics endpoint (Prometheus text, prom-client): its own counters, the process
 * metrics under their standard names, an event-loop delay that still shows a stall although
 * it is sampled only every EVENT_LOOP_SAMPLE_MS, and the queue depths read at scrape time.
 */
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import { afterEach, describe, expect, it } from 'vitest';

import { EVENT_LOOP_SAMPLE_MS, NodeMetrics, type QueueMessageCounts } from '../src/metrics.js';

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
    const counts = (queue: string, ready: number, unacked = 0, delayed = 0, deadLettering = 0): QueueMessageCounts => ({ queue, ready, unacked, delayed, deadLettering });

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
});
