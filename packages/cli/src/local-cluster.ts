/**
 * A cluster of real node processes on loopback, each started with `quorumq node` and its
 * own data directory: what the tests, the benchmark and the chaos runner drive. Nodes can
 * be killed (-9), stopped (SIGTERM, graceful), paused (SIGSTOP) and restarted with their data.
 * Each node has a client port and a peer port (`peers` names the peer ports). The nodes
 * share a random cluster secret kept in the cluster's root (cluster-secret.ts); with `tls`
 * they serve clients over TLS and each other over mutual TLS instead, with certificates
 * made in the root (certificates.ts).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

import { makeClusterCertificates, type ClusterCertificates } from './certificates.js';
import { ensureClusterSecret } from './cluster-secret.js';
import { healthStatus, type HealthTls } from './health.js';
import { localNodeFlags } from './node-process.js';

export const CLI_MAIN = resolve(dirname(fileURLToPath(import.meta.url)), 'main.js');

export interface LocalNode {
  readonly id: string;
  /** The node's client listener. */
  readonly address: string;
  /** The node's peer listener (the other nodes reach it there, unless `peersOf` says otherwise). */
  readonly peerAddress: string;
  readonly dataDir: string;
  /** Where the node serves /metrics (host:port), when the cluster was prepared with `metrics`. */
  readonly metricsAddress: string | null;
  process: ChildProcess | null;
  paused: boolean;
  /** Set while the cluster kills or stops the node, so that other exits count as crashes. */
  expectExit: boolean;
  /** The tail of the node's stdout and stderr. */
  output: string;
  /** Started with `join` (added to a running cluster: see LocalCluster.addNode). */
  readonly join?: boolean;
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
  /** The QUORUMQ_PEERS a node starts with (default: every node's own peer address). */
  readonly peersOf?: (id: string) => string;
  /** Serve each node's Prometheus metrics on a free loopback port (see LocalNode.metricsAddress). */
  readonly metrics?: boolean;
  /**
   * TLS: clients over TLS (`clientCerts` asked of them: optional by default), peers over
   * mutual TLS, certificates from a CA made in `<root>/tls` (kept for restarts). Without a
   * cluster secret unless `clusterSecret` (or `env`) gives one.
   */
  readonly tls?: boolean | LocalClusterTls;
}

export interface LocalClusterTls {
  readonly clientCerts?: 'none' | 'optional' | 'required';
  /** tlsRefreshMs of the nodes (default: the node's). */
  readonly refreshMs?: number;
  /** Also give the nodes the cluster secret. */
  readonly clusterSecret?: boolean;
}

/** What a client of a TLS LocalCluster gives the SDK (`connect({ tls })`): files. */
export interface LocalClientTls {
  readonly ca: string;
  readonly cert: string;
  readonly key: string;
}

/** Ports freePort has handed out in this process: it never hands one out twice. */
const portsHandedOut = new Set<number>();
const FREE_PORT_TRIES = 200;

/**
 * A loopback port nothing listens on, and one this process has not been given before. The
 * kernel hands a just-closed ephemeral port out again readily (about one bind in six in a run
 * of 3,000), so without the second rule one node's client and peer ports could be the same.
 */
export async function freePort(): Promise<number> {
  for (let attempt = 0; attempt < FREE_PORT_TRIES; attempt++) {
    const port = await unusedPort();
    if (!portsHandedOut.has(port)) {
      portsHandedOut.add(port);
      return port;
    }
  }
  throw new Error(`no loopback port found in ${FREE_PORT_TRIES} tries that this process has not used already`);
}

function unusedPort(): Promise<number> {
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
    /** The CA and certificates of a TLS cluster, else null. */
    readonly certificates: ClusterCertificates | null,
  ) {}

  private get tlsOptions(): LocalClusterTls | null {
    const tls = this.options.tls;
    return tls === undefined || tls === false ? null : tls === true ? {} : tls;
  }

  /** The SDK's `tls` for this cluster (the CA and the client certificate), or undefined without TLS. */
  get clientTls(): LocalClientTls | undefined {
    const certs = this.certificates;
    return certs === null ? undefined : { ca: certs.ca.cert, cert: certs.client.cert, key: certs.client.key };
  }

  /** What the health check uses (the CA, and the client certificate). */
  private get healthTls(): HealthTls | null {
    const tls = this.clientTls;
    return tls === undefined ? null : { caFile: tls.ca, certFile: tls.cert, keyFile: tls.key };
  }

  /** The TLS environment of node `id`. */
  private tlsEnv(id: string): Record<string, string> {
    const certs = this.certificates;
    const tls = this.tlsOptions;
    if (certs === null || tls === null) return {};
    const own = certs.nodes.get(id);
    if (own === undefined) throw new Error(`no certificate for ${id}`);
    const clientCerts = tls.clientCerts ?? 'optional';
    return {
      QUORUMQ_TLS_CERT_FILE: own.cert,
      QUORUMQ_TLS_KEY_FILE: own.key,
      QUORUMQ_TLS_CLIENT_CERTS: clientCerts,
      ...(clientCerts === 'none' ? {} : { QUORUMQ_TLS_CA_FILE: certs.ca.cert }),
      QUORUMQ_PEER_TLS_CERT_FILE: own.cert,
      QUORUMQ_PEER_TLS_KEY_FILE: own.key,
      QUORUMQ_PEER_TLS_CA_FILE: certs.ca.cert,
      ...(tls.refreshMs === undefined ? {} : { QUORUMQ_TLS_REFRESH_MS: String(tls.refreshMs) }),
    };
  }

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
        peerAddress: `127.0.0.1:${await freePort()}`,
        dataDir: join(root, `n${i}`),
        metricsAddress: options.metrics === true ? `127.0.0.1:${await freePort()}` : null,
        process: null,
        paused: false,
        expectExit: false,
        output: '',
      });
    }
    const tlsDir = join(root, 'tls');
    const withTls = options.tls !== undefined && options.tls !== false;
    // A restart on the same root keeps the certificates (the CA stays the cluster's).
    const certificates = !withTls
      ? null
      : existsSync(join(tlsDir, 'ca.crt'))
        ? {
            ca: { dir: tlsDir, cert: join(tlsDir, 'ca.crt'), key: join(tlsDir, 'ca.key') },
            nodes: new Map(nodes.map((n) => [n.id, { cert: join(tlsDir, `${n.id}.crt`), key: join(tlsDir, `${n.id}.key`) }])),
            client: { cert: join(tlsDir, 'client.crt'), key: join(tlsDir, 'client.key') },
          }
        : makeClusterCertificates(tlsDir, nodes.map((n) => n.id));
    return new LocalCluster(root, ensureClusterSecret(root), nodes, options, options.root === undefined, certificates);
  }

  /** Prepares, starts every node and waits until they serve. */
  static async start(options: LocalClusterOptions = {}): Promise<LocalCluster> {
    const cluster = await LocalCluster.prepare(options);
    try {
      await cluster.startAll();
    } catch (error) {
      // Nothing of a cluster that did not start outlives the call (its root too, when it made it).
      await cluster.close();
      throw error;
    }
    return cluster;
  }

  /** Starts every node and waits until all serve; if one cannot, kills those that started and throws. */
  async startAll(): Promise<void> {
    for (const node of this.nodes) this.startNode(node.id);
    try {
      await this.waitHealthy();
    } catch (error) {
      await Promise.all(this.nodes.map((n) => this.kill(n.id)));
      throw error;
    }
  }

  /**
   * Prepares one more node (the next id, fresh ports and data directory), to be started with
   * `join` and added through the AddNode RPC (`quorumq cluster add-node`). Not with TLS (its
   * certificate would need the cluster CA's key: certificates.ts makes them up front).
   */
  async prepareJoiner(): Promise<LocalNode> {
    if (this.certificates !== null) throw new Error('prepareJoiner: a TLS cluster makes its certificates up front');
    const taken = new Set(this.nodes.map((n) => n.id));
    let k = this.nodes.length + 1;
    while (taken.has(`n${k}`)) k++;
    const node: LocalNode = {
      id: `n${k}`,
      address: `127.0.0.1:${await freePort()}`,
      peerAddress: `127.0.0.1:${await freePort()}`,
      dataDir: join(this.root, `n${k}`),
      metricsAddress: null,
      process: null,
      paused: false,
      expectExit: false,
      output: '',
      join: true,
    };
    this.nodes.push(node);
    return node;
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
    const peers = this.options.peersOf?.(id) ?? this.nodes.map((n) => `${n.id}=${n.peerAddress}`).join(',');
    // With TLS the nodes prove themselves with their certificates; the secret only when asked for.
    const secret = this.tlsOptions !== null && this.tlsOptions.clusterSecret !== true ? '' : this.secretFile;
    // A joiner starts as an operator starts one: `quorumq node --join`.
    const child = spawn(process.execPath, [...localNodeFlags(), CLI_MAIN, 'node', ...(node.join === true ? ['--join'] : [])], {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: {
        ...process.env,
        QUORUMQ_NODE_ID: node.id,
        QUORUMQ_LISTEN: node.address,
        QUORUMQ_ADVERTISE: node.address,
        QUORUMQ_PEER_LISTEN: node.peerAddress,
        QUORUMQ_PEERS: peers,
        QUORUMQ_DATA_DIR: node.dataDir,
        QUORUMQ_LOG_LEVEL: 'warn',
        // Tests start and restart nodes by the hundred: no warm-up unless `env` asks for one.
        QUORUMQ_WARM_UP: 'false',
        // The cluster's own secret, unless `env` gives one (this process's does not count).
        QUORUMQ_CLUSTER_SECRET: '',
        QUORUMQ_CLUSTER_SECRET_FILE: this.options.env?.QUORUMQ_CLUSTER_SECRET ? '' : secret,
        ...(node.metricsAddress !== null ? { QUORUMQ_METRICS_LISTEN: node.metricsAddress } : {}),
        ...this.tlsEnv(id),
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
      while ((await healthStatus(node.address, 1000, '', this.healthTls)) !== 'SERVING') {
        if (Date.now() > deadline) throw new Error(`node ${id} not healthy within ${timeoutMs} ms:\n${node.output.slice(-5000)}`);
        // A node that exited will not become healthy: say so now rather than at the deadline.
        if (node.process === null) throw new Error(`node ${id} exited before it served:\n${node.output.slice(-5000)}`);
        await new Promise((r) => setTimeout(r, 100));
      }
    }
  }

  async close(): Promise<void> {
    await Promise.all(this.nodes.map((n) => this.kill(n.id)));
    if (this.ownsRoot) rmSync(this.root, { recursive: true, force: true });
  }
}
