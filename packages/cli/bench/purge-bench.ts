/**
 * `npm run bench:purge`: what a purge of a large queue costs the rest of the node, on three
 * local node processes (loopback), 1 KB messages. Publishes `--messages` (default 200,000)
 * into one queue with confirms (256 in flight) and waits `--settle` seconds; then a publisher
 * at one in flight on a second queue times each of its publishes for `--probe` seconds while
 * the first queue is purged in the middle of that window. Every node applies the purge, so a
 * purge that holds the event loop shows as the probe's slowest publishes. Prints the purge
 * call's time, and the probe's median, p99 and slowest publish over the window; `--runs`
 * repeats it on fresh clusters and prints each run and the medians.
 */
import { LocalCluster } from '@quorumq/cli';
import { connect, type QuorumqClient } from '@quorumq/client';

const args = new Map<string, string>();
for (let i = 2; i < process.argv.length; i += 2) args.set(process.argv[i]?.replace(/^--/, '') ?? '', process.argv[i + 1] ?? '');
const MESSAGES = Number(args.get('messages') ?? 200_000);
const SETTLE_S = Number(args.get('settle') ?? 3);
const PROBE_S = Number(args.get('probe') ?? 3);
const RUNS = Number(args.get('runs') ?? 1);
const BODY = Buffer.alloc(1024, 0x61);
const IN_FLIGHT = 256;
const QUEUE = 'purged';
const PROBE_QUEUE = 'probe';

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));
const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)] ?? NaN;
const pct = (sorted: number[], p: number): number => sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))] ?? NaN;

async function publishAll(client: QuorumqClient): Promise<void> {
  const publisher = client.createPublisher({ maxInFlight: IN_FLIGHT });
  let failure: unknown = null;
  let outstanding = 0;
  let room: (() => void) | null = null;
  for (let i = 0; i < MESSAGES && failure === null; i++) {
    outstanding += 1;
    publisher.publish(QUEUE, BODY).then(
      (r) => {
        if (r.outcome !== 'confirmed') failure = new Error(`publish ${r.outcome}`);
        outstanding -= 1;
        room?.();
      },
      (error: unknown) => {
        failure = error;
        outstanding -= 1;
        room?.();
      },
    );
    while (outstanding >= IN_FLIGHT && failure === null) await new Promise<void>((resolve) => (room = resolve));
  }
  while (outstanding > 0) await new Promise<void>((resolve) => (room = resolve));
  await publisher.close();
  if (failure !== null) throw failure;
}

interface RunFigures {
  purged: number;
  purgeMs: number;
  probeP50: number;
  probeP99: number;
  probeMax: number;
}

async function run(): Promise<RunFigures> {
  const cluster = await LocalCluster.start({ env: { QUORUMQ_LOG_LEVEL: 'warn', QUORUMQ_DISK_FREE_LIMIT_BYTES: '1048576' } });
  const client = connect({ nodes: cluster.addresses });
  try {
    await client.declareQueue(QUEUE);
    await client.declareQueue(PROBE_QUEUE);
    await publishAll(client);
    await sleep(SETTLE_S * 1000);
    const probe = client.createPublisher({ maxInFlight: 1 });
    for (let i = 0; i < 100; i++) await probe.publish(PROBE_QUEUE, BODY);
    const latencies: number[] = [];
    let stop = false;
    const probing = (async () => {
      while (!stop) {
        const started = performance.now();
        const result = await probe.publish(PROBE_QUEUE, BODY);
        if (result.outcome !== 'confirmed') throw new Error(`probe publish ${result.outcome}`);
        latencies.push(performance.now() - started);
      }
    })();
    await sleep((PROBE_S * 1000) / 3);
    const started = performance.now();
    const { messagesDropped } = await client.purgeQueue(QUEUE);
    const purgeMs = performance.now() - started;
    await sleep((PROBE_S * 2000) / 3);
    stop = true;
    await probing;
    await probe.close();
    const sorted = latencies.sort((a, b) => a - b);
    return { purged: messagesDropped, purgeMs, probeP50: pct(sorted, 0.5), probeP99: pct(sorted, 0.99), probeMax: sorted[sorted.length - 1] ?? NaN };
  } finally {
    await client.close();
    await cluster.close();
  }
}

const ms = (value: number): string => `${value.toFixed(1)} ms`;
const runs: RunFigures[] = [];
console.log(`purge of ${MESSAGES.toLocaleString('en')} x ${BODY.byteLength} B, a one-in-flight publisher on another queue meanwhile (${PROBE_S} s)`);
for (let i = 0; i < RUNS; i++) {
  const figures = await run();
  runs.push(figures);
  console.log(
    `run ${i + 1}: purged ${figures.purged}, purge call ${ms(figures.purgeMs)}; probe p50 ${ms(figures.probeP50)}, p99 ${ms(figures.probeP99)}, slowest ${ms(figures.probeMax)}`,
  );
}
if (RUNS > 1) {
  const of = (key: keyof RunFigures): number => median(runs.map((r) => r[key]));
  console.log(`median: purge call ${ms(of('purgeMs'))}; probe p50 ${ms(of('probeP50'))}, p99 ${ms(of('probeP99'))}, slowest ${ms(of('probeMax'))}`);
}
