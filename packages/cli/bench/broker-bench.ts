/**
 * `npm run bench:broker`: three local node processes on loopback, 1 KB messages, publishers
 * with confirms. Prints throughput and confirm latency at 1 and 256 messages in flight, and
 * consume throughput with acks, for 1 queue and for 10 queues. Each figure is the median of
 * `--runs` runs (default 3); the machine is shared, so read ratios and medians. Each row also
 * gives the CPU time per message of the three nodes and the load generator together (from
 * /proc), which other load on the machine disturbs far less than throughput.
 */
import { LocalCluster } from '@quorumq/cli';
import { connect, type QuorumqClient } from '@quorumq/client';
import { readFileSync } from 'node:fs';

const args = new Map<string, string>();
for (let i = 2; i < process.argv.length; i += 2) args.set(process.argv[i]?.replace(/^--/, '') ?? '', process.argv[i + 1] ?? '');
const RUNS = Number(args.get('runs') ?? 3);
const SECONDS = Number(args.get('seconds') ?? 5);
const BODY = Buffer.alloc(1024, 0x61);

const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0 ? NaN : (s[Math.floor((s.length - 1) / 2)] ?? NaN);
};
const pct = (sorted: number[], p: number): number => sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))] ?? NaN;

interface PublishFigures {
  rate: number;
  p50: number;
  p99: number;
  published: number;
  /** CPU time of the three nodes and this process per message, µs. */
  cpuPerMessage: number;
}

/** CPU seconds used so far by the node processes (from /proc) plus this process. */
function cpuSeconds(cluster: LocalCluster): number {
  let total = 0;
  for (const node of cluster.nodes) {
    const pid = node.process?.pid;
    if (pid === undefined) continue;
    try {
      // Fields after the command name: utime and stime are the 12th and 13th, in clock ticks (100/s).
      const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.split(' ') ?? [];
      total += (Number(fields[11]) + Number(fields[12])) / 100;
    } catch {
      return NaN; // no /proc here: the figure is not printed
    }
  }
  const own = process.cpuUsage();
  return total + (own.user + own.system) / 1e6;
}

const cpuText = (us: number): string => (Number.isFinite(us) ? `  CPU ${us.toFixed(0)} µs/msg` : '');

/** Publishes for SECONDS with `inFlight` outstanding per queue, spread over `queues`. */
async function publishRun(cluster: LocalCluster, client: QuorumqClient, queues: string[], inFlight: number): Promise<PublishFigures> {
  const latencies: number[] = [];
  const cpuBefore = cpuSeconds(cluster);
  const until = performance.now() + SECONDS * 1000;
  const started = performance.now();
  await Promise.all(
    queues.map(async (queue) => {
      // The publisher itself holds at most `inFlight` outstanding (it waits for room).
      const publisher = client.createPublisher({ maxInFlight: inFlight });
      let outstanding = 0;
      let failure: unknown = null;
      let room: (() => void) | null = null;
      let drained: (() => void) | null = null;
      while (performance.now() < until && failure === null) {
        const t = performance.now();
        outstanding += 1;
        publisher.publish(queue, BODY).then(
          (r) => {
            if (r.outcome !== 'confirmed') failure = new Error(`publish ${r.outcome}`);
            latencies.push(performance.now() - t);
          },
          (error: unknown) => {
            failure = error;
          },
        ).finally(() => {
          outstanding -= 1;
          room?.();
          room = null;
          if (outstanding === 0) drained?.();
        });
        if (outstanding >= inFlight) await new Promise<void>((resolve) => (room = resolve));
      }
      if (outstanding > 0) await new Promise<void>((resolve) => (drained = resolve));
      if (failure !== null) throw failure;
      await publisher.close();
    }),
  );
  const elapsed = (performance.now() - started) / 1000;
  latencies.sort((a, b) => a - b);
  const cpuPerMessage = ((cpuSeconds(cluster) - cpuBefore) * 1e6) / Math.max(1, latencies.length);
  return { rate: latencies.length / elapsed, p50: pct(latencies, 0.5), p99: pct(latencies, 0.99), published: latencies.length, cpuPerMessage };
}

/** Consumes `perQueue` messages from each queue with acks (prefetch 256); messages/s. */
async function consumeRun(cluster: LocalCluster, client: QuorumqClient, queues: string[], perQueue: number): Promise<{ rate: number; cpuPerMessage: number }> {
  const started = performance.now();
  const cpuBefore = cpuSeconds(cluster);
  let total = 0;
  await Promise.all(
    queues.map(async (queue) => {
      const consumer = client.consume(queue, { prefetch: 256 });
      let n = 0;
      for await (const delivery of consumer) {
        void delivery.ack();
        n += 1;
        if (n >= perQueue) break;
      }
      total += n;
      await consumer.close();
    }),
  );
  return { rate: total / ((performance.now() - started) / 1000), cpuPerMessage: ((cpuSeconds(cluster) - cpuBefore) * 1e6) / Math.max(1, total) };
}

async function main(): Promise<void> {
  const cluster = await LocalCluster.start({ env: { QUORUMQ_LOG_LEVEL: 'warn', QUORUMQ_DISK_FREE_LIMIT_BYTES: '1048576' } });
  const client = connect({ nodes: cluster.addresses });
  const rows: string[] = [];
  try {
    for (const queueCount of [1, 10]) {
      const queues = Array.from({ length: queueCount }, (_, i) => `bench-${queueCount}-${i}`);
      for (const q of queues) await client.declareQueue(q, { deliveryLimit: -1 });
      // Let the SDK learn the queues' leaders, so publishers connect to them directly.
      await new Promise((resolve) => setTimeout(resolve, 1500));
      await client.clusterStatus();
      for (const inFlight of [1, 256]) {
        const runs: PublishFigures[] = [];
        for (let r = 0; r < RUNS; r++) runs.push(await publishRun(cluster, client, queues, queueCount === 1 ? inFlight : Math.max(1, Math.floor(inFlight / queueCount))));
        rows.push(
          `publish  queues=${String(queueCount).padStart(2)} in-flight=${String(inFlight).padStart(3)}${queueCount > 1 ? ' (total)' : '        '}  ` +
            `${median(runs.map((x) => x.rate)).toFixed(0).padStart(6)} msg/s  confirm p50 ${median(runs.map((x) => x.p50)).toFixed(2)} ms  p99 ${median(runs.map((x) => x.p99)).toFixed(2)} ms` +
            cpuText(median(runs.map((x) => x.cpuPerMessage))),
        );
        process.stderr.write(`${rows[rows.length - 1]}\n`);
      }
      // Consume what the runs left, with acks.
      const status = await Promise.all(queues.map((q) => client.queueStatus(q)));
      const perQueue = Math.min(...status.map((s) => s.ready));
      const consumed = await consumeRun(cluster, client, queues, perQueue);
      rows.push(
        `consume  queues=${String(queueCount).padStart(2)} prefetch=256 acks          ${consumed.rate.toFixed(0).padStart(6)} msg/s  (${perQueue * queueCount} messages)` +
          cpuText(consumed.cpuPerMessage),
      );
      process.stderr.write(`${rows[rows.length - 1]}\n`);
      for (const q of queues) await client.deleteQueue(q);
    }
  } finally {
    await client.close();
    await cluster.close();
  }
  console.log(`\nquorumq broker bench: 3 local nodes, 1 KB messages, ${SECONDS} s per run, median of ${RUNS} runs`);
  for (const row of rows) console.log(row);
  console.log('reference (same machine class): RabbitMQ 3.10 quorum queues ~15,000 msg/s at 256 in flight, confirm p50 1.3 ms at 1 in flight');
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
