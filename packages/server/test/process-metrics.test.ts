import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, expect, it } from 'vitest';

import { loadConfig, startNode, type RunningNode } from '../src/index.js';

let running: RunningNode | null = null;
let dir: string | null = null;
afterEach(async () => {
  await running?.stop();
  running = null;
  if (dir !== null) rmSync(dir, { recursive: true, force: true });
  dir = null;
});

async function start(processMetrics?: boolean): Promise<RunningNode> {
  dir = mkdtempSync(join(tmpdir(), 'quorumq-process-metrics-'));
  const config = loadConfig(null, { QUORUMQ_NODE_ID: 'n1', QUORUMQ_LISTEN: '127.0.0.1:0', QUORUMQ_DATA_DIR: dir, QUORUMQ_LOG_LEVEL: 'silent' });
  running = await startNode(config, processMetrics === undefined ? {} : { processMetrics });
  return running;
}

it("a node's metrics include the process's by default, and not for a node that is not the process's own (processMetrics: false)", async () => {
  const own = await start();
  expect(own.node.metrics.registry.getSingleMetric('process_cpu_seconds_total')).toBeDefined();
  expect(own.node.metrics.registry.getSingleMetric('nodejs_eventloop_lag_seconds')).toBeDefined();
  await own.stop();
  running = null;
  rmSync(dir!, { recursive: true, force: true });

  const other = await start(false);
  expect(other.node.metrics.registry.getSingleMetric('process_cpu_seconds_total')).toBeUndefined();
  expect(other.node.metrics.registry.getSingleMetric('nodejs_eventloop_lag_seconds')).toBeUndefined();
  expect(other.node.metrics.registry.getSingleMetric('quorumq_wal_flushes_total')).toBeDefined();
});
