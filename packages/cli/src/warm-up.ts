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
 * Either way it stops where it is, and its nodes and directory are gone before it returns. A
 * port it picked that was taken before its node bound it costs a new set of ports, not the
 * warm-up (up to PORT_ATTEMPTS sets).
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
/** How many sets of ports the warm-up tries when one it picked was taken before its nodes bound it. */
export const PORT_ATTEMPTS = 3;
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
  /** Where its nodes' ports come from: `count` loopback ports free a moment ago (tests pass their own). */
  readonly pickPorts?: (count: number) => Promise<number[]>;
}

export type WarmUpOutcome =
  | { readonly kind: 'warmed'; readonly ms: number; readonly cpuMs: number }
  | { readonly kind: 'skipped'; readonly reason: string; readonly ms: number };

/** Runs the warm-up; never throws. Nothing it started outlives it, abandoned or not. */
export async function warmUp(options: WarmUpOptions): Promise<WarmUpOutcome> {
  const started = performance.now();
  const cpu = process.cpuUsage();
  const timeoutMs = options.timeoutMs ?? WARM_UP_TIMEOUT_MS;
  let made = false;
  // Set once the warm-up ends: a step still under way (a node starting, a publish) stops there
  // instead of going on in the background.
  let ended = false;
  const running: RunningNode[] = [];
  let client: QuorumqClient | null = null;
  let timer: NodeJS.Timeout | undefined;
  let working: Promise<void> = Promise.resolve();
  // A warm-up node's fatal error ends the warm-up, not the process.
  let fatal: (error: unknown) => void = () => undefined;
  const failed = new Promise<never>((_, reject) => (fatal = reject));
  failed.catch(() => undefined); // one after the warm-up ended is nobody's concern
  const stillOn = (): void => {
    if (ended) throw new Error('the warm-up ended');
  };
  try {
    const scratch = options.dir;
    await rm(scratch, { recursive: true, force: true });
    await mkdir(scratch, { recursive: true });
    made = true;
    /** Starts the three nodes on `ports` (clients first, then peers), each in its own directory under the scratch one. */
    const startNodes = async (ports: readonly number[]): Promise<void> => {
      const peers = NODES.map((id, i) => `${id}=127.0.0.1:${ports[NODES.length + i]!}`).join(',');
      const secret = `warm-up-${process.pid}-${Date.now()}-0123456789abcdef`;
      for (const [i, id] of NODES.entries()) {
        stillOn();
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
        const node = await startNode(config, { onFatal: (error) => fatal(error), processMetrics: false });
        if (ended) {
          // Started after the warm-up ended, and so after its nodes were stopped.
          await node.stop().catch(() => undefined);
          stillOn();
        }
        running.push(node);
      }
    };
    const work = async (): Promise<void> => {
      let ports: readonly number[] = [];
      // A port free when picked can be taken before a node binds it (by another process
      // picking at the same moment: the three nodes of `quorumq cluster` warm up at once).
      // Then the nodes started so far stop, their directories go, and new ports are picked.
      for (let attempt = 1; ; attempt++) {
        ports = await (options.pickPorts ?? freePorts)(NODES.length * 2);
        try {
          await startNodes(ports);
          break;
        } catch (error) {
          if (attempt >= PORT_ATTEMPTS || ended || !(error instanceof Error && error.message.includes('EADDRINUSE'))) throw error;
          await Promise.all(running.splice(0).map((node) => node.stop().catch(() => undefined)));
          await Promise.all(NODES.map((id) => rm(join(scratch, id), { recursive: true, force: true })));
        }
      }
      stillOn();
      client = connect({ nodes: NODES.map((_, i) => `127.0.0.1:${ports[i]!}`) });
      await client.declareQueue(QUEUE);
      await publishAndConsume(client, options.windowPublishes ?? WARM_UP_WINDOW_PUBLISHES, 256, stillOn);
      await publishAndConsume(client, options.singlePublishes ?? WARM_UP_SINGLE_PUBLISHES, 1, stillOn);
      await client.deleteQueue(QUEUE);
    };
    working = work();
    working.catch(() => undefined); // reported through the race below
    await Promise.race([
      working,
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
    ended = true;
    clearTimeout(timer);
    // The client's close fails its publishes and ends its consumer; stopping the nodes ends any
    // call still waiting on them. Then the work itself ends (a node it was starting is stopped
    // as it comes up) before the directory goes, so nothing writes there after.
    await (client as QuorumqClient | null)?.close().catch(() => undefined);
    await Promise.all(running.map((node) => node.stop().catch(() => undefined)));
    await settledWithin(working, WORK_END_MS);
    if (made) await rm(options.dir, { recursive: true, force: true }).catch(() => undefined);
  }
}

/** How long an ended warm-up waits for its work to stop (a node start under way) before it removes the directory. */
const WORK_END_MS = 10_000;

async function settledWithin(work: Promise<unknown>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([work.then(() => undefined, () => undefined), new Promise<void>((resolve) => (timer = setTimeout(resolve, ms)))]);
  clearTimeout(timer);
}

/** `count` publishes with `inFlight` outstanding, then all of them consumed and acked. */
async function publishAndConsume(client: QuorumqClient, count: number, inFlight: number, stillOn: () => void): Promise<void> {
  if (count <= 0) return;
  const body = Buffer.alloc(BODY_BYTES, 120);
  const publisher = client.createPublisher({ maxInFlight: inFlight });
  try {
    let sent = 0;
    let confirmed = 0;
    await new Promise<void>((resolve, reject) => {
      const pump = (): void => {
        try {
          stillOn();
        } catch (error) {
          reject(error);
          return;
        }
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
  stillOn();
  const consumer = client.consume(QUEUE, { prefetch: inFlight });
  try {
    let received = 0;
    for await (const delivery of consumer) {
      stillOn();
      delivery.ack();
      received += 1;
      if (received === count) break;
    }
  } finally {
    await consumer.close();
  }
}

/** `count` loopback ports free a moment ago (each listened on once, then let go). */
export async function freePorts(count: number): Promise<number[]> {
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
