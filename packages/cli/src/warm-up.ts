/**
 * A node's code warmed before it serves (`warmUp` in the node's configuration, on by default).
 *
 * V8 runs a new process's JavaScript unoptimised and optimises a function only once it has run
 * enough; a node's first second of traffic after a start then runs slow code while V8's helper
 * threads compile it, and the three nodes of a cluster do so at once on the same cores. At 256
 * publishes in flight on a fresh cluster the slowest 1% of confirms were all sent in that first
 * second (docs/architecture.md, "Performance").
 *
 * So `quorumq node`, before it opens its own storage, runs the traffic a queue sees on a
 * cluster of its own: three nodes in its process (`startNode`, on free loopback ports, with a
 * scratch data directory), and the SDK publishing with confirms at 256 in flight and at one in
 * flight, consuming with acks, through one queue. Every node plays leader, eager and held
 * follower at once, so each role's code is optimised in this process; then everything stops
 * and the directory goes. The node's own cluster is not touched: nothing leaves loopback, and
 * the node's storage and listeners open only after. The scratch directory is `warm-up` in the
 * node's data directory (its storage never reads it): a node killed while warming up leaves it
 * there, and the next start's warm-up replaces it.
 *
 * A warm-up that fails (no free port, no room for the scratch directory) is reported and the
 * node starts as it would have; one that runs longer than `timeoutMs` is abandoned the same way.
 */
import { mkdir, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { join } from 'node:path';

import { connect, type QuorumqClient } from '@quorumq/client';
import { loadConfig, startNode, type RunningNode } from '@quorumq/server';

/**
 * Publishes at 256 in flight: about twenty windows, enough for the functions a window runs
 * once to be optimised. A shorter run did harm: code optimised for what it had seen was
 * deoptimised by the real traffic (docs/architecture.md).
 */
export const WARM_UP_WINDOW_PUBLISHES = 5_000;
/** Publishes one at a time, after those. */
export const WARM_UP_SINGLE_PUBLISHES = 300;
/** A warm-up that takes longer is abandoned (its nodes stopped) and the node starts anyway. */
export const WARM_UP_TIMEOUT_MS = 30_000;

const NODES = ['w1', 'w2', 'w3'] as const;
const QUEUE = 'quorumq-warm-up';
const BODY_BYTES = 1024;

export interface WarmUpOptions {
  /** The scratch directory: emptied first, removed after. */
  readonly dir: string;
  readonly windowPublishes?: number;
  readonly singlePublishes?: number;
  readonly timeoutMs?: number;
}

export type WarmUpOutcome =
  | { readonly kind: 'warmed'; readonly ms: number; readonly cpuMs: number }
  | { readonly kind: 'skipped'; readonly reason: string; readonly ms: number };

/** Runs the warm-up; never throws. */
export async function warmUp(options: WarmUpOptions): Promise<WarmUpOutcome> {
  const started = performance.now();
  const cpu = process.cpuUsage();
  const timeoutMs = options.timeoutMs ?? WARM_UP_TIMEOUT_MS;
  let made = false;
  const running: RunningNode[] = [];
  let client: QuorumqClient | null = null;
  let timer: NodeJS.Timeout | undefined;
  // A warm-up node's fatal error ends the warm-up, not the process.
  let fatal: (error: unknown) => void = () => undefined;
  const failed = new Promise<never>((_, reject) => (fatal = reject));
  failed.catch(() => undefined); // one after the warm-up ended is nobody's concern
  try {
    const scratch = options.dir;
    await rm(scratch, { recursive: true, force: true });
    await mkdir(scratch, { recursive: true });
    made = true;
    const work = async (): Promise<void> => {
      const ports = await freePorts(NODES.length * 2);
      const peers = NODES.map((id, i) => `${id}=127.0.0.1:${ports[NODES.length + i]!}`).join(',');
      const secret = `warm-up-${process.pid}-${Date.now()}-0123456789abcdef`;
      for (const [i, id] of NODES.entries()) {
        const config = loadConfig(null, {
          QUORUMQ_NODE_ID: id,
          QUORUMQ_LISTEN: `127.0.0.1:${ports[i]!}`,
          QUORUMQ_ADVERTISE: `127.0.0.1:${ports[i]!}`,
          QUORUMQ_PEER_LISTEN: `127.0.0.1:${ports[NODES.length + i]!}`,
          QUORUMQ_PEERS: peers,
          QUORUMQ_DATA_DIR: join(scratch, id),
          QUORUMQ_CLUSTER_SECRET: secret,
          QUORUMQ_LOG_LEVEL: 'silent',
          QUORUMQ_WARM_UP: 'false',
        });
        // Not the process's metrics: their samplers would stay after the warm-up.
        running.push(await startNode(config, { onFatal: (error) => fatal(error), processMetrics: false }));
      }
      client = connect({ nodes: NODES.map((_, i) => `127.0.0.1:${ports[i]!}`) });
      await client.declareQueue(QUEUE);
      await publishAndConsume(client, options.windowPublishes ?? WARM_UP_WINDOW_PUBLISHES, 256);
      await publishAndConsume(client, options.singlePublishes ?? WARM_UP_SINGLE_PUBLISHES, 1);
      await client.deleteQueue(QUEUE);
    };
    await Promise.race([
      work(),
      failed,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`it took over ${timeoutMs} ms`)), timeoutMs);
      }),
    ]);
    const used = process.cpuUsage(cpu);
    return { kind: 'warmed', ms: Math.round(performance.now() - started), cpuMs: Math.round((used.user + used.system) / 1000) };
  } catch (error) {
    return { kind: 'skipped', reason: error instanceof Error ? error.message : String(error), ms: Math.round(performance.now() - started) };
  } finally {
    clearTimeout(timer);
    await (client as QuorumqClient | null)?.close().catch(() => undefined);
    await Promise.all(running.map((node) => node.stop().catch(() => undefined)));
    if (made) await rm(options.dir, { recursive: true, force: true }).catch(() => undefined);
  }
}

/** `count` publishes with `inFlight` outstanding, then all of them consumed and acked. */
async function publishAndConsume(client: QuorumqClient, count: number, inFlight: number): Promise<void> {
  if (count <= 0) return;
  const body = Buffer.alloc(BODY_BYTES, 120);
  const publisher = client.createPublisher({ maxInFlight: inFlight });
  try {
    let sent = 0;
    let confirmed = 0;
    await new Promise<void>((resolve, reject) => {
      const pump = (): void => {
        while (sent < count && sent - confirmed < inFlight) {
          sent += 1;
          publisher.publish(QUEUE, body).then((result) => {
            if (result.outcome !== 'confirmed') {
              reject(new Error(`a warm-up publish was ${result.outcome}`));
              return;
            }
            confirmed += 1;
            if (confirmed === count) resolve();
            else pump();
          }, reject);
        }
      };
      pump();
    });
  } finally {
    await publisher.close();
  }
  const consumer = client.consume(QUEUE, { prefetch: inFlight });
  try {
    let received = 0;
    for await (const delivery of consumer) {
      delivery.ack();
      received += 1;
      if (received === count) break;
    }
  } finally {
    await consumer.close();
  }
}

/** `count` loopback ports free a moment ago (each listened on once, then let go). */
async function freePorts(count: number): Promise<number[]> {
  const ports: number[] = [];
  for (let i = 0; i < count; i++) {
    ports.push(
      await new Promise<number>((resolve, reject) => {
        const server = createServer();
        server.once('error', reject);
        server.listen(0, '127.0.0.1', () => {
          const address = server.address();
          const port = typeof address === 'object' && address !== null ? address.port : 0;
          server.close(() => resolve(port));
        });
      }),
    );
  }
  return ports;
}
