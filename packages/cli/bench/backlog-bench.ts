/**
 * `npm run bench:backlog`: a backlog on three local node processes (loopback), 1 KB messages.
 * Publishes `--messages` (default 1,000,000) into one queue with confirms (256 in flight),
 * then prints each node's resident memory (RSS, from /proc) and the data directories' disk
 * use while the backlog is queued; kills all three nodes (kill -9) and starts them again,
 * timing the restart until the first message is delivered; drains the queue with acks; and
 * prints RSS and disk use again once the nodes settled after the drain.
 *
 * `--bodies N` sets the message size; `--settle S` the seconds to wait after the publish and
 * after the drain before RSS is read (an idle node gives memory back at its next checks,
 * every 2 s: see the server's idle-memory.ts). The peak RSS while publishing is printed too.
 */
import { LocalCluster } from '@quorumq/cli';
import { connect, type QuorumqClient } from '@quorumq/client';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';

const args = new Map<string, string>();
for (let i = 2; i < process.argv.length; i += 2) args.set(process.argv[i]?.replace(/^--/, '') ?? '', process.argv[i + 1] ?? '');
const MESSAGES = Number(args.get('messages') ?? 1_000_000);
const BODY = Buffer.alloc(Number(args.get('bodies') ?? 1024), 0x61);
const SETTLE_S = Number(args.get('settle') ?? 10);
const IN_FLIGHT = 256;
const QUEUE = 'backlog';

const mb = (bytes: number): string => `${(bytes / 1024 / 1024).toFixed(0)} MB`;

/** Resident memory of each running node, in bytes (VmRSS). */
function rssOf(cluster: LocalCluster): number[] {
  return cluster.nodes.map((node) => {
    const pid = node.process?.pid;
    if (pid === undefined) return NaN;
    const line = readFileSync(`/proc/${pid}/status`, 'utf8').split('\n').find((l) => l.startsWith('VmRSS:'));
    return Number(line?.split(/\s+/)[1] ?? NaN) * 1024;
  });
}

/** Disk use of each node's data directory, in bytes (du). */
function diskOf(cluster: LocalCluster): number[] {
  return cluster.nodes.map((node) => Number(execFileSync('du', ['-sb', node.dataDir], { encoding: 'utf8' }).split('\t')[0]));
}

const line = (label: string, values: number[]): string => `${label.padEnd(34)} ${values.map(mb).join(' / ')}`;

async function publishAll(client: QuorumqClient): Promise<number> {
  // A producer id: a message whose queue's leadership moved while it was in flight is re-sent
  // (deduplicated), as a user who cannot lose one would publish.
  const publisher = client.createPublisher({ maxInFlight: IN_FLIGHT, producerId: 'backlog-bench' });
  const started = performance.now();
  let failure: unknown = null;
  let outstanding = 0;
  let duplicates = 0;
  let room: (() => void) | null = null;
  for (let i = 0; i < MESSAGES && failure === null; i++) {
    outstanding += 1;
    publisher.publish(QUEUE, BODY).then(
      (r) => {
        // 'duplicate': a node re-sent it to a new leader after the old one had stored it.
        if (r.outcome === 'duplicate') duplicates += 1;
        else if (r.outcome !== 'confirmed') failure = new Error(`publish ${r.outcome}`);
      },
      (error: unknown) => {
        failure = error;
      },
    ).finally(() => {
      outstanding -= 1;
      room?.();
    });
    if (outstanding >= IN_FLIGHT) await new Promise<void>((resolve) => (room = resolve));
    room = null;
    if (i > 0 && i % 100_000 === 0) process.stderr.write(`published ${i}\n`);
  }
  while (outstanding > 0) await new Promise<void>((resolve) => (room = resolve));
  if (failure !== null) throw failure;
  if (duplicates > 0) process.stderr.write(`${duplicates} publishes answered DUPLICATE\n`);
  return MESSAGES / ((performance.now() - started) / 1000);
}

async function main(): Promise<void> {
  const cluster = await LocalCluster.start({ env: { QUORUMQ_LOG_LEVEL: 'warn', QUORUMQ_DISK_FREE_LIMIT_BYTES: '1048576' } });
  let client = connect({ nodes: cluster.addresses });
  const rows: string[] = [];
  const report = (row: string): void => {
    rows.push(row);
    process.stderr.write(`${row}\n`);
  };
  try {
    await new Promise((resolve) => setTimeout(resolve, 1000));
    report(line('RSS per node, empty', rssOf(cluster)));
    const empty = rssOf(cluster);
    await client.declareQueue(QUEUE, { deliveryLimit: -1 });
    await new Promise((resolve) => setTimeout(resolve, 1500));
    await client.clusterStatus();
    const peak = cluster.nodes.map(() => 0);
    const sampler = setInterval(() => rssOf(cluster).forEach((rss, i) => (peak[i] = Math.max(peak[i] ?? 0, rss))), 250);
    const publishRate = await publishAll(client).finally(() => clearInterval(sampler));
    report(`publish into the growing queue     ${publishRate.toFixed(0)} msg/s (${MESSAGES} x ${BODY.length} B, ${IN_FLIGHT} in flight)`);
    report(line('RSS per node, peak while publishing', peak));
    await new Promise((resolve) => setTimeout(resolve, SETTLE_S * 1000));
    report(line(`RSS per node, ${MESSAGES} queued (+${SETTLE_S} s)`, rssOf(cluster)));
    const queued = await client.queueStatus(QUEUE);
    report(`messages queued before the restart  ${queued.ready + queued.unacked}`);
    report(line('disk per node, queued', diskOf(cluster)));

    // Full-cluster restart: kill -9 all three, start them, time to the first delivery.
    await client.close();
    await Promise.all(cluster.ids.map((id) => cluster.kill(id)));
    const restart = performance.now();
    await cluster.startAll();
    client = connect({ nodes: cluster.addresses });
    // Consumers retry until the queue serves; the first delivery ends the restart.
    let first = NaN;
    let total = 0;
    for (;;) {
      try {
        const status = await client.queueStatus(QUEUE);
        total = status.ready + status.unacked;
        break;
      } catch {
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    }
    const consumer = client.consume(QUEUE, { prefetch: 256 });
    let n = 0;
    let drainStarted = NaN;
    for await (const delivery of consumer) {
      if (n === 0) {
        first = performance.now() - restart;
        drainStarted = performance.now();
      }
      void delivery.ack();
      n += 1;
      if (n >= total) break;
    }
    const drainSeconds = (performance.now() - drainStarted) / 1000;
    report(`full restart (kill -9) -> first message  ${(first / 1000).toFixed(1)} s`);
    report(`messages after the restart          ${total} (published ${MESSAGES})`);
    await consumer.close();
    const left = await client.queueStatus(QUEUE);
    report(`messages left after the drain       ${left.ready + left.unacked}`);
    report(`drain with acks                     ${(n / drainSeconds).toFixed(0)} msg/s (${n} messages)`);
    await new Promise((resolve) => setTimeout(resolve, SETTLE_S * 1000));
    const drained = rssOf(cluster);
    report(line(`RSS per node, drained (+${SETTLE_S} s)`, drained));
    report(`  ratio to the empty node           ${drained.map((r, i) => (r / (empty[i] ?? NaN)).toFixed(2)).join(' / ')}`);
    report(line('disk per node, drained', diskOf(cluster)));
  } finally {
    await client.close();
    await cluster.close();
  }
  console.log(`\nquorumq backlog bench: 3 local nodes, one queue, ${MESSAGES} x ${BODY.length} B`);
  for (const row of rows) console.log(row);
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
