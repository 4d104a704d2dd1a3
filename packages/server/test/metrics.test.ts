/**
 * The node's /metrics endpoint (Prometheus text, prom-client): its own counters, the process
 * metrics, and an event-loop delay that still shows a stall although it is sampled only
 * every EVENT_LOOP_SAMPLE_MS.
 */
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import { afterEach, describe, expect, it } from 'vitest';

import { EVENT_LOOP_SAMPLE_MS, NodeMetrics } from '../src/metrics.js';

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
    expect(text).toMatch(/^quorumq_process_process_cpu_seconds_total /m);
    expect((await scrape('/other')).status).toBe(404);
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
    const maxSeconds = gauge((await scrape()).text, 'quorumq_process_nodejs_eventloop_lag_max_seconds');
    expect(maxSeconds).toBeGreaterThanOrEqual((stallMs - EVENT_LOOP_SAMPLE_MS) / 1000);
  });
});
