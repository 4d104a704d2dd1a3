/**
 * A node serves (gRPC health SERVING) once the metadata group has a leader, however long
 * that takes: it used to give up after its first wait (60 s) and stay NOT_SERVING for good,
 * which a whole cluster restarting with many queues could exceed.
 */
import { freePort, healthStatus } from '@quorumq/cli';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterEach, expect, it } from 'vitest';

import { loadConfig } from '../src/config.js';
import { startNode, type RunningNode } from '../src/server.js';

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

it('a node that waited longer than its wait for a metadata leader serves once a majority is up', async () => {
  const ports = [await freePort(), await freePort(), await freePort()];
  const peerPorts = [await freePort(), await freePort(), await freePort()];
  const peers = peerPorts.map((port, i) => `n${i + 1}=127.0.0.1:${port}`).join(',');
  const start = async (i: number): Promise<RunningNode> => {
    const dataDir = mkdtempSync(join(tmpdir(), 'quorumq-serving-'));
    cleanups.push(() => rmSync(dataDir, { recursive: true, force: true }));
    const config = loadConfig(null, {}, { nodeId: `n${i + 1}`, listen: `127.0.0.1:${ports[i]}`, peerListen: `127.0.0.1:${peerPorts[i]}`, peers, clusterSecret: 'serving-test-secret-0123456789', dataDir, logLevel: 'silent' });
    const running = await startNode(config, { logger: pino({ level: 'silent' }), onFatal: () => {}, servingWaitLogMs: 200 });
    cleanups.push(() => running.stop());
    return running;
  };
  const first = await start(0);
  // Alone (no majority): not serving, past several waits.
  await new Promise((resolve) => setTimeout(resolve, 1_000));
  expect(await healthStatus(first.address)).not.toBe('SERVING');
  const second = await start(1);
  const until = Date.now() + 30_000;
  let statuses: string[] = [];
  while (Date.now() < until) {
    statuses = await Promise.all([healthStatus(first.address), healthStatus(second.address)]);
    if (statuses.every((s) => s === 'SERVING')) break;
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  expect(statuses).toEqual(['SERVING', 'SERVING']);
}, 60_000);
