/**
 * The chaos cluster: real `quorumq node` processes on loopback (like LocalCluster from
 * @quorumq/cli, whose spawning this copies), except that peers reach each other through a
 * PairProxy per ordered pair. Clients use the nodes' own addresses; Raft traffic and
 * forwarded proposals go through the proxies, so blocking proxies partitions the cluster
 * while every node stays reachable from the runner.
 *
 * Note: a node reports its peers' proxy addresses (from QUORUMQ_PEERS) as their addresses in
 * ClusterStatus and `quorumq-leader` trailers; a client that follows such a hint takes the
 * path of the node that gave it, and fails over like any client when that path is cut.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { CLI_MAIN, freePort, healthStatus } from '@quorumq/cli';

import { PairProxy } from './proxy.js';

export interface ChaosNode {
  readonly id: string;
  /** The node's own listener (clients). */
  readonly address: string;
  readonly dataDir: string;
  process: ChildProcess | null;
  paused: boolean;
  /** Set while the runner kills or stops the node, so that other exits count as crashes. */
  expectExit: boolean;
  /** The tail of the node's stdout and stderr. */
  output: string;
}

export interface ChaosClusterOptions {
  readonly size?: number;
  /** Extra QUORUMQ_* environment for every node. */
  readonly env?: Record<string, string>;
  /** Data directory root; a fresh temporary one by default (removed by close()). */
  readonly root?: string;
  readonly inheritOutput?: boolean;
}

export interface UnexpectedExit {
  readonly id: string;
  readonly at: number;
  readonly code: number | null;
  readonly signal: string | null;
  readonly output: string;
}

export class ChaosCluster {
  /** Node processes that exited without the runner killing or stopping them. */
  readonly unexpectedExits: UnexpectedExit[] = [];

  private constructor(
    readonly root: string,
    readonly nodes: ChaosNode[],
    /** Key `${from}>${to}`. */
    private readonly proxies: Map<string, PairProxy>,
    private readonly options: ChaosClusterOptions,
    private readonly ownsRoot: boolean,
  ) {}

  static async start(options: ChaosClusterOptions = {}): Promise<ChaosCluster> {
    const size = options.size ?? 3;
    const root = options.root ?? mkdtempSync(join(tmpdir(), 'quorumq-chaos-'));
    mkdirSync(root, { recursive: true });
    const nodes: ChaosNode[] = [];
    for (let i = 1; i <= size; i++) {
      nodes.push({ id: `n${i}`, address: `127.0.0.1:${await freePort()}`, dataDir: join(root, `n${i}`), process: null, paused: false, expectExit: false, output: '' });
    }
    const proxies = new Map<string, PairProxy>();
    for (const from of nodes) {
      for (const to of nodes) {
        if (from === to) continue;
        const proxy = new PairProxy(from.id, to.id, `127.0.0.1:${await freePort()}`, to.address);
        await proxy.start();
        proxies.set(`${from.id}>${to.id}`, proxy);
      }
    }
    const cluster = new ChaosCluster(root, nodes, proxies, options, options.root === undefined);
    for (const node of nodes) cluster.startNode(node.id);
    await cluster.waitHealthy();
    return cluster;
  }

  get ids(): string[] {
    return this.nodes.map((n) => n.id);
  }

  get addresses(): string[] {
    return this.nodes.map((n) => n.address);
  }

  node(id: string): ChaosNode {
    const node = this.nodes.find((n) => n.id === id);
    if (node === undefined) throw new Error(`no node ${id}`);
    return node;
  }

  isRunning(id: string): boolean {
    return this.node(id).process !== null;
  }

  /** The QUORUMQ_PEERS of one node: itself directly, every other node through its proxy. */
  peersOf(id: string): string {
    return this.nodes
      .map((n) => `${n.id}=${n.id === id ? n.address : (this.proxies.get(`${id}>${n.id}`) as PairProxy).listen}`)
      .join(',');
  }

  startNode(id: string): void {
    const node = this.node(id);
    if (node.process !== null) throw new Error(`${id} is running`);
    const child = spawn(process.execPath, [CLI_MAIN, 'node'], {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: {
        ...process.env,
        QUORUMQ_NODE_ID: node.id,
        QUORUMQ_LISTEN: node.address,
        QUORUMQ_ADVERTISE: node.address,
        QUORUMQ_PEERS: this.peersOf(id),
        QUORUMQ_DATA_DIR: node.dataDir,
        QUORUMQ_LOG_LEVEL: 'warn',
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
      if (node.process === child && !node.expectExit) {
        this.unexpectedExits.push({ id, at: Date.now(), code, signal, output: node.output.slice(-4000) });
      }
      if (node.process === child) {
        node.process = null;
        node.paused = false;
      }
    });
    node.process = child;
    node.paused = false;
    node.expectExit = false;
  }

  /** kill -9 (a paused node is continued first so that it dies at once). */
  kill(id: string): Promise<void> {
    return this.signal(id, 'SIGKILL');
  }

  /** SIGTERM: graceful shutdown. */
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

  /** SIGSTOP. */
  pause(id: string): void {
    const node = this.node(id);
    if (node.process === null) return;
    node.process.kill('SIGSTOP');
    node.paused = true;
  }

  /** SIGCONT. */
  resume(id: string): void {
    const node = this.node(id);
    if (node.process === null) return;
    node.process.kill('SIGCONT');
    node.paused = false;
  }

  async restart(id: string, timeoutMs = 60_000): Promise<void> {
    if (!this.isRunning(id)) this.startNode(id);
    await this.waitHealthy([id], timeoutMs);
  }

  /**
   * Partitions the cluster into `groups`: nodes in different groups cannot reach each other;
   * nodes not named in any group form one more group.
   */
  partition(groups: readonly (readonly string[])[]): void {
    const named = new Set(groups.flat());
    const rest = this.ids.filter((id) => !named.has(id));
    const all = rest.length > 0 ? [...groups, rest] : [...groups];
    const groupOf = new Map<string, number>();
    all.forEach((group, i) => group.forEach((id) => groupOf.set(id, i)));
    for (const proxy of this.proxies.values()) {
      if (groupOf.get(proxy.from) !== groupOf.get(proxy.to)) proxy.block();
      else proxy.unblock();
    }
  }

  /** Cuts `id` off from every other node. */
  isolate(id: string): void {
    this.partition([[id]]);
  }

  /** Removes every partition. */
  heal(): void {
    for (const proxy of this.proxies.values()) proxy.unblock();
  }

  get partitioned(): boolean {
    return [...this.proxies.values()].some((p) => p.blocked);
  }

  proxyStats(): Record<string, { accepted: number; refused: number; cut: number }> {
    return Object.fromEntries([...this.proxies].map(([key, proxy]) => [key, { ...proxy.stats }]));
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
    await Promise.all([...this.proxies.values()].map((p) => p.close()));
    if (this.ownsRoot) rmSync(this.root, { recursive: true, force: true });
  }
}
