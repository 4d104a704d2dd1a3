/**
 * LocalCluster (what the tests, benches and chaos runner start): a cluster one of whose nodes
 * cannot start fails at once, saying why, and leaves no node running (before, the start
 * waited 60 s, and the nodes that had started outlived the test run).
 */
import { freePort, LocalCluster } from '@quorumq/cli';
import { createServer, type Server, type Socket } from 'node:net';
import { afterEach, expect, it } from 'vitest';

let blocker: Server | null = null;
const sockets: Socket[] = [];
let cluster: LocalCluster | null = null;

afterEach(async () => {
  await cluster?.close();
  cluster = null;
  // The health checks that reached the blocker hold connections open: close would wait for them.
  for (const socket of sockets.splice(0)) socket.destroy();
  await new Promise<void>((done) => (blocker === null ? done() : blocker.close(() => done())));
  blocker = null;
});

it('a node that cannot bind its port fails the start within seconds and the others are killed', async () => {
  cluster = await LocalCluster.prepare();
  const taken = cluster.nodes[1]!.address;
  const [host, port] = [taken.slice(0, taken.lastIndexOf(':')), Number(taken.slice(taken.lastIndexOf(':') + 1))];
  blocker = createServer((socket) => sockets.push(socket));
  await new Promise<void>((done) => blocker!.listen(port, host, () => done()));
  const started = Date.now();
  await expect(cluster.startAll()).rejects.toThrow(/node n2 exited before it served/);
  expect(Date.now() - started).toBeLessThan(30_000);
  expect(cluster.nodes.map((n) => cluster!.isRunning(n.id))).toEqual([false, false, false]);
}, 60_000);

it('freePort never hands out the same port twice (a node once got one port for client and peer)', async () => {
  const ports = new Set<number>();
  for (let i = 0; i < 2_000; i++) ports.add(await freePort());
  expect(ports.size).toBe(2_000);
});
