/**
 * The chaos cluster: a LocalCluster (real `quorumq node` processes on loopback) whose peers
 * reach each other's peer listeners through a PairProxy per ordered pair. Clients use the
 * nodes' client addresses; Raft traffic, forwarded proposals, snapshot fetches and the
 * client calls a node proxies to a queue's leader go through the proxies, so blocking
 * proxies partitions the cluster while every node stays reachable from the runner.
 *
 * A node reports its peers' client addresses (which each peer tells on its Raft stream) in
 * ClusterStatus and `quorumq-leader` trailers: a client that follows such a hint goes to
 * that node directly, not through a proxy.
 */
import { readdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { StorageDamage } from './schedule.js';
import { freePort, LocalCluster, type LocalClusterOptions, type LocalNode, type UnexpectedExit } from '@quorumq/cli';

import { PairProxy } from './proxy.js';
import type { ClientTuning, NemesisCluster } from './target.js';

export type ChaosNode = LocalNode;
export type { UnexpectedExit };
export type ChaosClusterOptions = Omit<LocalClusterOptions, 'peersOf' | 'rootPrefix'>;

export class ChaosCluster implements NemesisCluster {
  readonly kind = 'process' as const;
  /**
   * Every node reports the others' client addresses, which the runner reaches: leader routing
   * works. With `tls`, clients connect over TLS with the cluster's CA and client certificate.
   */
  readonly clientTuning: ClientTuning;

  private constructor(
    readonly local: LocalCluster,
    /** Key `${from}>${to}`. */
    private readonly proxies: Map<string, PairProxy>,
  ) {
    const tls = local.clientTls;
    this.clientTuning = tls === undefined ? {} : { tls: { ca: tls.ca, cert: tls.cert, key: tls.key } };
  }

  static async start(options: ChaosClusterOptions = {}): Promise<ChaosCluster> {
    const proxies = new Map<string, PairProxy>();
    let cluster: ChaosCluster | null = null;
    const local = await LocalCluster.prepare({
      ...options,
      rootPrefix: 'quorumq-chaos-',
      peersOf: (id) => cluster?.peersOf(id) ?? '',
    });
    for (const from of local.nodes) {
      for (const to of local.nodes) {
        if (from === to) continue;
        const proxy = new PairProxy(from.id, to.id, `127.0.0.1:${await freePort()}`, to.peerAddress);
        await proxy.start();
        proxies.set(`${from.id}>${to.id}`, proxy);
      }
    }
    cluster = new ChaosCluster(local, proxies);
    await local.startAll();
    return cluster;
  }

  get nodes(): LocalNode[] {
    return this.local.nodes;
  }

  get ids(): string[] {
    return this.local.ids;
  }

  get addresses(): string[] {
    return this.local.addresses;
  }

  /** Node processes that exited without the runner killing or stopping them. */
  get unexpectedExits(): UnexpectedExit[] {
    return this.local.unexpectedExits;
  }

  node(id: string): LocalNode {
    return this.local.node(id);
  }

  isRunning(id: string): boolean {
    return this.local.isRunning(id);
  }

  addressOf(id: string): string {
    return this.local.node(id).address;
  }

  /** Running and not paused (a partition does not cut the runner off: it reaches the node directly). */
  answering(id: string): boolean {
    const node = this.local.node(id);
    return node.process !== null && !node.paused;
  }

  /** The QUORUMQ_PEERS of one node: its own peer address, every other node's peer listener through its proxy. */
  peersOf(id: string): string {
    return this.local.nodes
      .map((n) => `${n.id}=${n.id === id ? n.peerAddress : (this.proxies.get(`${id}>${n.id}`) as PairProxy).listen}`)
      .join(',');
  }

  startNode(id: string): void {
    this.local.startNode(id);
  }

  start(id: string): void {
    if (!this.isRunning(id)) this.local.startNode(id);
  }

  kill(id: string): Promise<void> {
    return this.local.kill(id);
  }

  stop(id: string): Promise<void> {
    return this.local.stop(id);
  }

  pause(id: string): void {
    this.local.pause(id);
  }

  async damageStorage(id: string, damage: StorageDamage, at: number): Promise<string> {
    if (this.isRunning(id)) throw new Error(`damageStorage: ${id} is running`);
    const walDir = join(this.local.node(id).dataDir, 'wal');
    const snapshotDir = join(walDir, 'snapshots');
    const snapshots = damage === 'snapshot-flip' ? (await readdir(snapshotDir).catch(() => [])).filter((f) => f.endsWith('.snap')).sort() : [];
    // No snapshot yet: the WAL instead. The oldest segment: never the last record of the last
    // segment, which recovery would rightly take for a torn write.
    const segments = (await readdir(walDir)).filter((f) => f.endsWith('.wal')).sort();
    const file = snapshots.length > 0 ? join(snapshotDir, snapshots[0]!) : segments.length > 0 ? join(walDir, segments[0]!) : null;
    if (file === null) return `nothing to damage in ${walDir}`;
    const bytes = await readFile(file);
    if (bytes.length < 4096 && snapshots.length === 0) return `${file} too small to damage safely (${bytes.length} bytes)`;
    const offset = Math.floor(bytes.length * at);
    bytes[offset] = (bytes[offset] ?? 0) ^ 0xff;
    await writeFile(file, bytes);
    return `flipped the byte at ${offset} of ${file} (${bytes.length} bytes)`;
  }

  resume(id: string): void {
    this.local.resume(id);
  }

  restart(id: string, timeoutMs = 60_000): Promise<void> {
    return this.local.restart(id, timeoutMs);
  }

  waitHealthy(ids?: readonly string[], timeoutMs = 60_000): Promise<void> {
    return this.local.waitHealthy(ids === undefined ? undefined : [...ids], timeoutMs);
  }

  async healAll(timeoutMs: number): Promise<void> {
    this.heal();
    for (const node of this.nodes) if (node.paused) this.resume(node.id);
    for (const node of this.nodes) if (node.process === null) this.startNode(node.id);
    await this.waitHealthy(this.ids, timeoutMs);
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

  stats(): Record<string, unknown> {
    return { proxies: this.proxyStats() };
  }

  async close(): Promise<void> {
    await this.local.close();
    await Promise.all([...this.proxies.values()].map((p) => p.close()));
  }
}
