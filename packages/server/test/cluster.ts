/**
 * Test harness: a cluster of real node processes on loopback, started with the `quorumq`
 * CLI, each with its own data directory. Nodes can be killed (-9), stopped (SIGTERM),
 * paused and restarted with their data.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { connect, type ConnectOptions, type QuorumqClient } from '@quorumq/client';

const here = dirname(fileURLToPath(import.meta.url));
export const CLI = resolve(here, '../../cli/dist/main.js');

export interface TestNode {
  readonly id: string;
  readonly address: string;
  readonly dataDir: string;
  process: ChildProcess | null;
  output: string;
}

async function freePort(): Promise<number> {
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

export interface ClusterOptions {
  readonly size?: number;
  readonly env?: Record<string, string>;
}

export class TestCluster {
  readonly clients: QuorumqClient[] = [];

  private constructor(
    readonly root: string,
    readonly nodes: TestNode[],
    private readonly env: Record<string, string>,
  ) {}

  static async start(options: ClusterOptions = {}): Promise<TestCluster> {
    const size = options.size ?? 3;
    const root = mkdtempSync(join(tmpdir(), 'quorumq-e2e-'));
    const nodes: TestNode[] = [];
    for (let i = 1; i <= size; i++) {
      nodes.push({ id: `n${i}`, address: `127.0.0.1:${await freePort()}`, dataDir: join(root, `n${i}`), process: null, output: '' });
    }
    const cluster = new TestCluster(root, nodes, options.env ?? {});
    for (const node of nodes) cluster.startNode(node.id);
    await cluster.waitHealthy();
    return cluster;
  }

  get addresses(): string[] {
    return this.nodes.map((n) => n.address);
  }

  node(id: string): TestNode {
    const node = this.nodes.find((n) => n.id === id);
    if (node === undefined) throw new Error(`no node ${id}`);
    return node;
  }

  nodeAt(address: string): TestNode {
    const node = this.nodes.find((n) => n.address === address);
    if (node === undefined) throw new Error(`no node at ${address}`);
    return node;
  }

  startNode(id: string): void {
    const node = this.node(id);
    if (node.process !== null) throw new Error(`${id} is running`);
    const peers = this.nodes.map((n) => `${n.id}=${n.address}`).join(',');
    const child = spawn(process.execPath, [CLI, 'node'], {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: {
        ...process.env,
        QUORUMQ_NODE_ID: node.id,
        QUORUMQ_LISTEN: node.address,
        QUORUMQ_ADVERTISE: node.address,
        QUORUMQ_PEERS: peers,
        QUORUMQ_DATA_DIR: node.dataDir,
        QUORUMQ_LOG_LEVEL: 'warn',
        QUORUMQ_DISK_FREE_LIMIT_BYTES: '1048576',
        ...this.env,
      },
    });
    const capture = (chunk: Buffer): void => {
      node.output = (node.output + chunk.toString()).slice(-20_000);
    };
    child.stdout?.on('data', capture);
    child.stderr?.on('data', capture);
    child.on('exit', () => {
      if (node.process === child) node.process = null;
    });
    node.process = child;
  }

  /** kill -9. */
  kill(id: string): Promise<void> {
    return this.signal(id, 'SIGKILL');
  }

  /** SIGTERM: graceful shutdown (hands off leadership). */
  stop(id: string): Promise<void> {
    return this.signal(id, 'SIGTERM');
  }

  private async signal(id: string, signal: NodeJS.Signals): Promise<void> {
    const node = this.node(id);
    const child = node.process;
    if (child === null) return;
    const exited = new Promise<void>((done) => child.once('exit', () => done()));
    child.kill(signal);
    await exited;
    node.process = null;
  }

  pause(id: string): void {
    this.node(id).process?.kill('SIGSTOP');
  }

  resume(id: string): void {
    this.node(id).process?.kill('SIGCONT');
  }

  async restart(id: string): Promise<void> {
    this.startNode(id);
    await this.waitHealthy([id]);
  }

  /** Waits until the given nodes answer the gRPC health check with SERVING. */
  async waitHealthy(ids: string[] = this.nodes.map((n) => n.id), timeoutMs = 60_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (const id of ids) {
      const node = this.node(id);
      for (;;) {
        if (await healthy(node.address)) break;
        if (Date.now() > deadline) throw new Error(`node ${id} not healthy in ${timeoutMs} ms:\n${node.output}`);
        await new Promise((r) => setTimeout(r, 200));
      }
    }
  }

  client(options: Partial<ConnectOptions> = {}): QuorumqClient {
    const client = connect({ nodes: this.addresses, ...options });
    this.clients.push(client);
    return client;
  }

  /** The node id that leads `queue`, as the cluster reports it. */
  async leaderOf(queue: string, client: QuorumqClient): Promise<string> {
    for (let i = 0; i < 100; i++) {
      const status = await client.queueStatus(queue).catch(() => null);
      if (status !== null && status.leader !== '') return status.leader;
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error(`queue ${queue} has no leader`);
  }

  async close(): Promise<void> {
    await Promise.all(this.clients.map((c) => c.close().catch(() => undefined)));
    await Promise.all(this.nodes.map((n) => this.kill(n.id)));
    rmSync(this.root, { recursive: true, force: true });
  }
}

async function healthy(address: string): Promise<boolean> {
  return new Promise((done) => {
    const child = spawn(process.execPath, [CLI, 'health', '--address', address, '--timeout', '1000'], { stdio: 'ignore' });
    child.on('exit', (code) => done(code === 0));
  });
}
