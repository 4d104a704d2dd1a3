/**
 * `npm run bench:queues`: many queues on three local node processes (loopback). Declares
 * `--queues` (default 10,000) queues, 32 declares at a time, and prints:
 * - the declare rate (for the first 1,000, and overall);
 * - the idle CPU of the whole cluster (the three node processes, from /proc) with 0, 1,000
 *   and all the queues declared, over `--idle` seconds (default 10) each;
 * - each node's resident memory with every queue declared;
 * - how the queues' leaders spread over the nodes;
 * - the rate of publishing one message to every queue (64 at a time);
 * - after kill -9 of the node leading the most queues: the time until every queue has a
 *   live leader (as a survivor sees it), then the rate of one publish to every queue;
 * - after kill -9 of every node and a start of all three: the same two figures.
 */
import { LocalCluster } from '@quorumq/cli';
import { connect, type QuorumqClient } from '@quorumq/client';
import { readFileSync } from 'node:fs';

const args = new Map<string, string>();
for (let i = 2; i < process.argv.length; i += 2) args.set(process.argv[i]?.replace(/^--/, '') ?? '', process.argv[i + 1] ?? '');
const QUEUES = Number(args.get('queues') ?? 10_000);
const IDLE_S = Number(args.get('idle') ?? 10);
const DECLARES_IN_FLIGHT = 32;
const PUBLISHES_IN_FLIGHT = 64;
const CLOCK_TICKS = 100; // USER_HZ on Linux

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));
const name = (i: number): string => `q-${String(i).padStart(6, '0')}`;

/** CPU seconds (user + system) used so far by each running node process. */
function cpuSeconds(cluster: LocalCluster): number[] {
  return cluster.nodes.map((node) => {
    const pid = node.process?.pid;
    if (pid === undefined) return 0;
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.split(' ') ?? [];
    return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS;
  });
}

function rssMb(cluster: LocalCluster): string {
  return cluster.nodes
    .map((node) => {
      const pid = node.process?.pid;
      if (pid === undefined) return 'down';
      const line = readFileSync(`/proc/${pid}/status`, 'utf8').split('\n').find((l) => l.startsWith('VmRSS:'));
      return `${(Number(line?.split(/\s+/)[1] ?? NaN) / 1024).toFixed(0)} MB`;
    })
    .join(' / ');
}

/** The cluster's CPU use while idle, in cores (CPU seconds per second). */
async function idleCores(cluster: LocalCluster): Promise<number> {
  await sleep(2_000); // let elections and declares settle
  const before = cpuSeconds(cluster);
  const started = performance.now();
  await sleep(IDLE_S * 1000);
  const after = cpuSeconds(cluster);
  const seconds = (performance.now() - started) / 1000;
  return after.reduce((sum, value, i) => sum + value - (before[i] ?? 0), 0) / seconds;
}

/** Runs `work(i)` for i in [from, to), `inFlight` at a time; returns per-second rate. */
async function pool(from: number, to: number, inFlight: number, work: (i: number) => Promise<unknown>): Promise<number> {
  const started = performance.now();
  let next = from;
  await Promise.all(
    Array.from({ length: inFlight }, async () => {
      while (next < to) {
        const i = next++;
        await work(i);
      }
    }),
  );
  return (to - from) / ((performance.now() - started) / 1000);
}

async function declare(client: QuorumqClient, from: number, to: number): Promise<number> {
  return pool(from, to, DECLARES_IN_FLIGHT, (i) => client.declareQueue(name(i)));
}

async function publishToAll(client: QuorumqClient, body: Buffer): Promise<number> {
  return pool(0, QUEUES, PUBLISHES_IN_FLIGHT, async (i) => {
    const result = await client.publish('', name(i), body);
    if (result.outcome !== 'confirmed') throw new Error(`publish to ${name(i)}: ${result.outcome}`);
  });
}

const seconds = (since: number): string => ((performance.now() - since) / 1000).toFixed(1);

function elapsedOr(since: number, leaderless: number, limitS: number): string {
  return leaderless === 0 ? `${seconds(since)} s` : `not within ${limitS} s (${leaderless} without)`;
}

/** Asks `client` every 500 ms until no queue's leader is `unled`; returns how many still are at the limit. */
async function untilLed(client: QuorumqClient, since: number, limitMs: number, unled: (leader: string) => boolean): Promise<number> {
  let leaderless = QUEUES;
  while (leaderless > 0 && performance.now() - since < limitMs) {
    await sleep(500);
    try {
      const status = await client.clusterStatus();
      const queues = Object.values(status.queues);
      leaderless = queues.filter((q) => unled(q.leader)).length + (QUEUES - queues.length);
    } catch {
      // the nodes are busy electing, or still starting: asked again
    }
  }
  return leaderless;
}

/** One publish to every queue, counting those not confirmed rather than stopping at the first. */
async function publishCounted(client: QuorumqClient, body: Buffer): Promise<{ rate: number; failed: number }> {
  let failed = 0;
  const rate = await pool(0, QUEUES, PUBLISHES_IN_FLIGHT, async (i) => {
    try {
      const result = await client.publish('', name(i), body);
      if (result.outcome !== 'confirmed') failed += 1;
    } catch {
      failed += 1;
    }
  });
  return { rate, failed };
}

async function main(): Promise<void> {
  const cluster = await LocalCluster.start({ env: { QUORUMQ_LOG_LEVEL: 'warn' } });
  const client = connect({ nodes: cluster.addresses });
  const report = (row: string): void => void process.stdout.write(`${row}\n`);
  try {
    await sleep(1_000);
    report(`idle CPU, 0 queues                ${(await idleCores(cluster)).toFixed(3)} cores`);
    const first = Math.min(1_000, QUEUES);
    const started = performance.now();
    const firstRate = await declare(client, 0, first);
    report(`declare rate, first ${first}          ${firstRate.toFixed(0)}/s`);
    if (QUEUES > first) report(`idle CPU, ${first} queues             ${(await idleCores(cluster)).toFixed(3)} cores`);
    const declareStart = performance.now();
    const restRate = QUEUES > first ? await declare(client, first, QUEUES) : firstRate;
    const declareSeconds = (first / firstRate) + (QUEUES > first ? (performance.now() - declareStart) / 1000 : 0);
    report(`declare rate, ${first}..${QUEUES}        ${restRate.toFixed(0)}/s`);
    report(`declare rate, all ${QUEUES}          ${(QUEUES / declareSeconds).toFixed(0)}/s (${((performance.now() - started) / 1000).toFixed(1)} s with the idle measure)`);
    report(`idle CPU, ${QUEUES} queues            ${(await idleCores(cluster)).toFixed(3)} cores`);
    report(`RSS per node, ${QUEUES} queues        ${rssMb(cluster)}`);

    const status = await client.clusterStatus();
    const led = new Map<string, number>(cluster.ids.map((id) => [id, 0]));
    for (const queue of Object.values(status.queues)) led.set(queue.leader, (led.get(queue.leader) ?? 0) + 1);
    const fair = QUEUES / cluster.ids.length;
    report(`leaders per node                  ${cluster.ids.map((id) => `${id} ${led.get(id) ?? 0} (${(((led.get(id) ?? 0) / fair - 1) * 100).toFixed(1)} %)`).join(', ')}`);

    const body = Buffer.alloc(1024, 0x61);
    report(`one publish to every queue        ${(await publishToAll(client, body)).toFixed(0)} msg/s`);

    // kill -9 the node that leads the most queues; every queue must elect and serve again.
    const victim = [...led.entries()].sort((a, b) => b[1] - a[1])[0]![0];
    const survivors = cluster.nodes.filter((n) => n.id !== victim).map((n) => n.address);
    await cluster.kill(victim);
    const killed = performance.now();
    const live = connect({ nodes: survivors });
    const leaderless = await untilLed(live, killed, 60_000, (leader) => leader === '' || leader === victim);
    report(`kill -9 of ${victim} (led ${led.get(victim)}) -> every queue has a live leader  ${elapsedOr(killed, leaderless, 60)}`);
    const after = await publishCounted(live, body);
    report(`one publish to every queue after  ${after.rate.toFixed(0)} msg/s${after.failed > 0 ? ` (${after.failed} failed)` : ''} (${seconds(killed)} s after the kill)`);
    await live.close();

    // The whole cluster restarts (a power cut): every queue of every node needs a leader at once.
    for (const id of cluster.ids) if (cluster.isRunning(id)) await cluster.kill(id);
    const restarted = performance.now();
    for (const id of cluster.ids) cluster.startNode(id);
    const all = connect({ nodes: cluster.addresses });
    const unled = await untilLed(all, restarted, 120_000, (leader) => leader === '');
    report(`kill -9 of every node, start all -> every queue has a leader  ${elapsedOr(restarted, unled, 120)}`);
    const restartedRate = await publishCounted(all, body);
    report(`one publish to every queue after  ${restartedRate.rate.toFixed(0)} msg/s${restartedRate.failed > 0 ? ` (${restartedRate.failed} failed)` : ''} (${seconds(restarted)} s after the start)`);
    await all.close();
  } finally {
    await client.close();
    await cluster.close();
  }
}

main().catch((error: unknown) => {
  process.stderr.write(`${String(error instanceof Error ? error.stack : error)}\n`);
  process.exit(1);
});
