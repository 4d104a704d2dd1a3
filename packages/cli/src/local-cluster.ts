/**
 * A cluster of real node processes on loopback, each started with `quorumq node` and its
 * own data directory: what the tests, the benchmark and the chaos runner drive. Nodes can
 * be killed (-9), stopped (SIGTERM, graceful), paused (SIGSTOP) and restarted with their data.
 * The nodes share a random cluster secret kept in the cluster's root (cluster-secret.ts).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

import { ensureClusterSecret } from './cluster-secret.js';
import { healthStatus } from './health.js';
import { NODE_PROCESS_FLAGS } from './node-process.js';

export const CLI_MAIN = resolve(dirname(fileURLToPath(import.meta.url)), 'main.js');

export interface LocalNode {
  readonly id: string;
  /** The node's own listener (clients, and peers unless `peersOf` says otherwise). */
  readonly address: string;
  readonly dataDir: string;
  /** Where the node serves /metrics (host:port), when the cluster was prepared with `metrics`. */
  readonly metricsAddress: string | null;
  process: ChildProcess | null;
  paused: boolean;
  /** Set while the cluster kills or stops the node, so that other exits count as crashes. */
  expectExit: boolean;
  /** The tail of the node's stdout and stderr. */
  output: string;
}

/** A node process that exited without the cluster killing or stopping it. */
export interface UnexpectedExit {
  readonly id: string;
  readonly at: number;
  readonly code: number | null;
  readonly signal: string | null;
  readonly output: string;
}

export interface LocalClusterOptions {
  readonly size?: number;
  /** Extra environment for every node (QUORUMQ_* configuration). */
  readonly env?: Record<string, string>;
  /** Data directory root; a fresh temporary one by default (removed by close()). */
  readonly root?: string;
  /** Prefix of the temporary root. */
  readonly rootPrefix?: string;
  /** Forward node output to this process's stderr. */
  readonly inheritOutput?: boolean;
  /** The QUORUMQ_PEERS a node starts with (default: every node's own address). */
  readonly peersOf?: (id: string) => string;
  /** Serve each node's Prometheus metrics on a free loopback port (see LocalNode.metricsAddress). */
  readonly metrics?: boolean;
}

export async function freePort(): Promise<number> {
  return new Promise((resolvePort, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address !== null ? address.port : 0;
      server.close(() => resolvePort(port));
    });
  });
}

export class LocalCluster {
  readonly unexpectedExits: UnexpectedExit[] = [];

  private constructor(
    readonly root: string,
    /** The file holding the cluster secret every node is started with (in `root`). */
    readonly secretFile: string,
    readonly nodes: LocalNode[],
    private readonly options: LocalClusterOptions,
    private readonly ownsRoot: boolean,
  ) {}

  /** Chooses addresses and data directories; starts nothing (see `startAll`). */
  static async prepare(options: LocalClusterOptions = {}): Promise<LocalCluster> {
    const size = options.size ?? 3;
    const root = options.root ?? mkdtempSync(join(tmpdir(), options.rootPrefix ?? 'quorumq-'));
    mkdirSync(root, { recursive: true });
    const nodes: LocalNode[] = [];
    for (let i = 1; i <= size; i++) {
      nodes.push({
        id: `n${i}`,
        address: `127.0.0.1:${await freePort()}`,
        dataDir: join(root, `n${i}`),
        metricsAddress: options.metrics === true ? `127.0.0.1:${await freePort()}` : null,
        process: null,
        paused: false,
        expectExit: false,
        output: '',
      });
    }
    return new LocalCluster(root, ensureClusterSecret(root), nodes, options, options.root === undefined);
  }

  /** Prepares, starts every node and waits until they serve. */
  static async start(options: LocalClusterOptions = {}): Promise<LocalCluster> {
    const cluster = await LocalCluster.prepare(options);
    await cluster.startAll();
    return cluster;
  }

  async startAll(): Promise<void> {
    for (const node of this.nodes) this.startNode(node.id);
    await this.waitHealthy();
  }

  get ids(): string[] {
    return this.nodes.map((n) => n.id);
  }

  get addresses(): string[] {
    return this.nodes.map((n) => n.address);
  }

  node(id: string): LocalNode {
    const node = this.nodes.find((n) => n.id === id);
    if (node === undefined) throw new Error(`no node ${id}`);
    return node;
  }

  isRunning(id: string): boolean {
    return this.node(id).process !== null;
  }

  startNode(id: string): void {
    const node = this.node(id);
    if (node.process !== null) throw new Error(`${id} is running`);
    const peers = this.options.peersOf?.(id) ?? this.nodes.map((n) => `${n.id}=${n.address}`).join(',');
    const child = spawn(process.execPath, [...NODE_PROCESS_FLAGS, CLI_MAIN, 'node'], {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: {
        ...process.env,
        QUORUMQ_NODE_ID: node.id,
        QUORUMQ_LISTEN: node.address,
        QUORUMQ_ADVERTISE: node.address,
        QUORUMQ_PEERS: peers,
        QUORUMQ_DATA_DIR: node.dataDir,
        QUORUMQ_LOG_LEVEL: 'warn',
        // The cluster's own secret, unless `env` gives one (this process's does not count).
        QUORUMQ_CLUSTER_SECRET: '',
        QUORUMQ_CLUSTER_SECRET_FILE: this.options.env?.QUORUMQ_CLUSTER_SECRET ? '' : this.secretFile,
        ...(node.metricsAddress !== null ? { QUORUMQ_METRICS_LISTEN: node.metricsAddress } : {}),
        ...this.options.env,
      },
    });
    const capture = (chunk: Buffer): void => {
      node.output = (node.output + chunk.toString()).slice(-50_000);
      if (this.options.inheritOutput) process.stderr.write(chunk);
    };
    child.stdout?.on('data', capture);
    child.stderr?.on('data', capture);
    child.on('exit', (code, signal) => {
      if (node.process !== child) return;
      if (!node.expectExit) this.unexpectedExits.push({ id, at: Date.now(), code, signal, output: node.output.slice(-4000) });
      node.process = null;
      node.paused = false;
    });
    node.process = child;
    node.paused = false;
    node.expectExit = false;
  }

  /** kill -9 (a paused node is continued first so that it dies at once). */
  kill(id: string): Promise<void> {
    return this.signal(id, 'SIGKILL');
  }

  /** SIGTERM: graceful shutdown (the node hands off leadership first). */
  stop(id: string): Promise<void> {
    return this.signal(id, 'SIGTERM');
  }

  private async signal(id: string, signal: NodeJS.Signals): Promise<void> {
    const node = this.node(id);
    const child = node.process;
    if (child === null) return;
    const exited = new Promise<void>((done) => child.once('exit', () => done()));
    node.expectExit = true;
    if (signal === 'SIGKILL' || node.paused) child.kill('SIGCONT');
    child.kill(signal);
    await exited;
    node.process = null;
    node.paused = false;
  }

  /** SIGSTOP: the process freezes (timers, sockets) until resume(). */
  pause(id: string): void {
    const node = this.node(id);
    if (node.process === null) return;
    node.process.kill('SIGSTOP');
    node.paused = true;
  }

  resume(id: string): void {
    const node = this.node(id);
    if (node.process === null) return;
    node.process.kill('SIGCONT');
    node.paused = false;
  }

  /** Starts the node if it is not running, then waits until it serves. */
  async restart(id: string, timeoutMs = 60_000): Promise<void> {
    if (!this.isRunning(id)) this.startNode(id);
    await this.waitHealthy([id], timeoutMs);
  }

  /** Waits until the nodes answer the gRPC health check with SERVING. */
  async waitHealthy(ids: string[] = this.ids, timeoutMs = 60_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (const id of ids) {
      const node = this.node(id);
      while ((await healthStatus(node.address, 1000)) !== 'SERVING') {
        if (Date.now() > deadline) throw new Error(`node ${id} not healthy within ${timeoutMs} ms:\n${node.output.slice(-5000)}`);
        await new Promise((r) => setTimeout(r, 100));
      }
    }
  }

  async close(): Promise<void> {
    await Promise.all(this.nodes.map((n) => this.kill(n.id)));
    if (this.ownsRoot) rmSync(this.root, { recursive: true, force: true });
  }
}
