/**
 * Spec 2 flow control, the memory alarm: above its memory high watermark a node refuses
 * publishes (the Publish call and the publish stream) with RESOURCE_EXHAUSTED / MEMORY_ALARM,
 * while consumers, acks and gets go on; back below, the alarm clears by itself. A real node
 * in this process, its resident memory driven by the test (BrokerNodeHost).
 */
import { freePort } from '@quorumq/cli';
import { connect, QuorumqError, Reason, type QuorumqClient } from '@quorumq/client';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';

import { loadConfig } from '../src/config.js';
import { startNode, type RunningNode } from '../src/server.js';

const MIB = 1024 * 1024;
const WATERMARK = 100 * MIB;

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function start(env: NodeJS.ProcessEnv, residentMemoryBytes?: () => number): Promise<{ running: RunningNode; client: QuorumqClient }> {
  const dataDir = mkdtempSync(join(tmpdir(), 'quorumq-memory-alarm-'));
  cleanups.push(() => rmSync(dataDir, { recursive: true, force: true }));
  const config = loadConfig(null, { QUORUMQ_DISK_FREE_LIMIT_BYTES: '1048576', ...env }, { nodeId: 'n1', listen: `127.0.0.1:${await freePort()}`, dataDir, logLevel: 'silent' });
  const fatals: unknown[] = [];
  const running = await startNode(config, {
    logger: pino({ level: 'silent' }),
    onFatal: (error) => fatals.push(error),
    ...(residentMemoryBytes === undefined ? {} : { residentMemoryBytes }),
  });
  cleanups.push(() => running.stop());
  cleanups.push(() => expect(fatals).toEqual([]));
  expect(await running.node.waitForMetaLeader(10_000)).toBe(true);
  const client = connect({ nodes: [config.advertise] });
  cleanups.push(() => client.close());
  return { running, client };
}

async function memoryAlarmOf(client: QuorumqClient): Promise<boolean | undefined> {
  return (await client.clusterStatus()).nodes['n1']?.memoryAlarm;
}

/** Polls until the node reports `alarm` (the node samples its memory every 2 s). */
async function waitForAlarm(client: QuorumqClient, alarm: boolean, timeoutMs = 10_000): Promise<void> {
  const until = Date.now() + timeoutMs;
  while ((await memoryAlarmOf(client)) !== alarm) {
    if (Date.now() > until) throw new Error(`the memory alarm did not become ${alarm} within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

async function gauge(running: RunningNode, name: string): Promise<number> {
  const match = new RegExp(`^${name} (\\S+)$`, 'm').exec(await running.node.metrics.registry.metrics());
  expect(match, `${name} in /metrics`).not.toBeNull();
  return Number(match?.[1]);
}

const failure = (promise: Promise<unknown>): Promise<unknown> =>
  promise.then(
    () => null,
    (error: unknown) => error,
  );

describe('spec 2: the memory alarm refuses publishes while the node is above its memory high watermark', () => {
  it('refuses Publish and the publish stream with MEMORY_ALARM, keeps consumers, acks and gets working, and clears by itself', async () => {
    let resident = 50 * MIB;
    const { running, client } = await start({ QUORUMQ_MEMORY_HIGH_WATERMARK_BYTES: String(WATERMARK) }, () => resident);
    await client.declareQueue('backlog');
    for (const body of ['a', 'b', 'c']) expect((await client.publish('', 'backlog', body)).outcome).toBe('confirmed');
    expect(await memoryAlarmOf(client)).toBe(false);
    expect(await gauge(running, 'quorumq_memory_alarm')).toBe(0);
    expect(await gauge(running, 'quorumq_memory_high_watermark_bytes')).toBe(WATERMARK);

    resident = 200 * MIB;
    await waitForAlarm(client, true);
    expect(await gauge(running, 'quorumq_memory_alarm')).toBe(1);

    const unary = await failure(client.publish('', 'backlog', 'refused'));
    expect(unary).toBeInstanceOf(QuorumqError);
    expect(unary).toMatchObject({ code: 'RESOURCE_EXHAUSTED', reason: Reason.MEMORY_ALARM, retriable: true });
    // The message names the resident memory and the watermark.
    expect((unary as QuorumqError).message).toContain(`${200 * MIB} bytes`);
    expect((unary as QuorumqError).message).toContain(`${WATERMARK} bytes`);

    const publisher = client.createPublisher();
    const streamed = await failure(publisher.publish('backlog', 'refused too'));
    expect(streamed).toBeInstanceOf(QuorumqError);
    expect(streamed).toMatchObject({ code: 'RESOURCE_EXHAUSTED', reason: Reason.MEMORY_ALARM, retriable: true });
    expect((streamed as QuorumqError).message).toContain(`${WATERMARK} bytes`);
    await publisher.close();

    // The backlog drains: a consumer receives and acks, a get takes the last one.
    const consumer = client.consume('backlog', { prefetch: 10 });
    const consumed: string[] = [];
    for await (const delivery of consumer) {
      consumed.push(delivery.body.toString());
      await delivery.ack();
      if (consumed.length === 2) break;
    }
    await consumer.close();
    expect(consumed).toEqual(['a', 'b']);
    expect((await client.get('backlog'))?.body.toString()).toBe('c');
    const drained = await client.queueStatus('backlog');
    expect([drained.ready, drained.unacked]).toEqual([0, 0]);

    // Back below the watermark, the alarm clears with no one's help.
    resident = 60 * MIB;
    await waitForAlarm(client, false);
    expect(await gauge(running, 'quorumq_memory_alarm')).toBe(0);
    expect((await client.publish('', 'backlog', 'after')).outcome).toBe('confirmed');
    expect((await client.get('backlog'))?.body.toString()).toBe('after');
  }, 60_000);

  it("measures the process's own resident memory against the fraction of the memory limit", async () => {
    // A millionth of any machine's (or container's) memory: below what a node takes to run.
    const { client } = await start({ QUORUMQ_MEMORY_HIGH_WATERMARK: '0.000001' });
    await client.declareQueue('q');
    expect(await memoryAlarmOf(client)).toBe(true);
    expect(await failure(client.publish('', 'q', 'x'))).toMatchObject({ code: 'RESOURCE_EXHAUSTED', reason: Reason.MEMORY_ALARM });
    expect((await client.queueStatus('q')).ready).toBe(0);
  }, 60_000);
});
