import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, expect, it } from 'vitest';

import { PORT_ATTEMPTS, freePorts, warmUp } from '../src/warm-up.js';

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

function dataDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'quorumq-warm-up-test-'));
  dirs.push(dir);
  return dir;
}

it('runs publishes and consumes through a cluster of three nodes in this process, then removes its directory (and what a killed one left)', async () => {
  const parent = dataDir();
  const dir = join(parent, 'warm-up');
  // What a node killed during its warm-up leaves behind.
  mkdirSync(join(dir, 'w1', 'wal'), { recursive: true });
  writeFileSync(join(dir, 'w1', 'wal', 'left-over'), 'x');
  const outcome = await warmUp({ dir, windowPublishes: 300, singlePublishes: 20 });
  expect(outcome).toMatchObject({ kind: 'warmed' });
  if (outcome.kind !== 'warmed') return;
  expect(outcome.ms).toBeGreaterThan(0);
  expect(outcome.cpuMs).toBeGreaterThan(0);
  expect(readdirSync(parent)).toEqual([]);
}, 60_000);

it('reports a warm-up it cannot run instead of throwing, and one that takes too long is abandoned and cleaned up', async () => {
  const blocked = join(dataDir(), 'a-file');
  writeFileSync(blocked, 'not a directory');
  const refused = await warmUp({ dir: join(blocked, 'warm-up') });
  expect(refused).toMatchObject({ kind: 'skipped' });
  expect(refused.kind === 'skipped' ? refused.reason : '').toMatch(/ENOTDIR/);

  const parent = dataDir();
  const slow = await warmUp({ dir: join(parent, 'warm-up'), timeoutMs: 1 });
  expect(slow).toMatchObject({ kind: 'skipped', reason: 'it took over 1 ms' });
  expect(readdirSync(parent)).toEqual([]);
}, 60_000);

/** How many of this process's handles are of `type` (a listening server is a TCPServerWrap). */
function handles(type: string): number {
  return process.getActiveResourcesInfo().filter((t) => t === type).length;
}

it('an abandoned warm-up leaves nothing running: no node started after it ended, no listener, no directory written again', async () => {
  // Each timeout ends the warm-up at a different step: making its directory, starting its
  // nodes, publishing. Before the fix the work went on in the background: it started its
  // nodes after the directory was removed, and they served (and wrote) from then on.
  for (const timeoutMs of [1, 20, 100, 300, 800]) {
    const parent = dataDir();
    const listening = handles('TCPServerWrap');
    const outcome = await warmUp({ dir: join(parent, 'warm-up'), timeoutMs });
    expect(outcome, `timeout ${timeoutMs} ms`).toMatchObject({ kind: 'skipped', reason: `it took over ${timeoutMs} ms` });
    for (let i = 0; i < 15; i++) {
      expect(readdirSync(parent), `timeout ${timeoutMs} ms, ${i * 100} ms after`).toEqual([]);
      expect(handles('TCPServerWrap'), `timeout ${timeoutMs} ms, ${i * 100} ms after`).toBeLessThanOrEqual(listening);
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}, 90_000);

/** A listener on a loopback port: what takes a port the warm-up picked before its node binds it. */
async function occupy(): Promise<{ port: number; server: Server }> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  return { port: typeof address === 'object' && address !== null ? address.port : 0, server };
}

it('picks new ports when one it picked was taken before its node bound it, and gives up after PORT_ATTEMPTS sets', async () => {
  const taken = await occupy();
  try {
    // The first set: w2's peer port taken, so w1 starts and w2 fails to bind.
    const picked: number[][] = [];
    const pickPorts = async (count: number): Promise<number[]> => {
      const ports = await freePorts(count);
      if (picked.length === 0) ports[4] = taken.port;
      picked.push(ports);
      return ports;
    };
    const parent = dataDir();
    const listening = handles('TCPServerWrap');
    const outcome = await warmUp({ dir: join(parent, 'warm-up'), windowPublishes: 300, singlePublishes: 20, pickPorts });
    expect(outcome).toMatchObject({ kind: 'warmed' });
    expect(picked).toHaveLength(2);
    expect(readdirSync(parent)).toEqual([]);
    expect(handles('TCPServerWrap')).toBe(listening);

    // Every set taken: the warm-up is skipped, saying why, and leaves nothing.
    let sets = 0;
    const alwaysTaken = async (count: number): Promise<number[]> => {
      sets += 1;
      const ports = await freePorts(count);
      ports[0] = taken.port;
      return ports;
    };
    const refused = await warmUp({ dir: join(parent, 'warm-up'), windowPublishes: 300, singlePublishes: 20, pickPorts: alwaysTaken });
    expect(refused).toMatchObject({ kind: 'skipped' });
    expect(refused.kind === 'skipped' ? refused.reason : '').toMatch(/EADDRINUSE/);
    expect(sets).toBe(PORT_ATTEMPTS);
    expect(readdirSync(parent)).toEqual([]);
    expect(handles('TCPServerWrap')).toBe(listening);
  } finally {
    taken.server.close();
  }
}, 90_000);
