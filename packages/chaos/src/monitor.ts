/**
 * Who leads each queue, as the nodes themselves say: every running, unpaused node is asked
 * for its ClusterStatus; a queue's leader is the node that reports itself as leader with the
 * highest term (an isolated old leader may still believe it leads, at a lower term).
 */
import { connect, type QuorumqClient } from '@quorumq/client';

import { connectionOf, type NemesisCluster } from './target.js';
import { sleep } from './workload.js';

export interface LeaderView {
  readonly leader: string;
  readonly term: number;
}

/** The metadata group's key in a probe result. */
export const META = '$meta';

export class LeaderMonitor {
  private readonly clients = new Map<string, QuorumqClient>();
  private running = false;
  private loop: Promise<void> | null = null;
  private readonly current = new Map<string, LeaderView>();

  constructor(
    private readonly cluster: NemesisCluster,
    private readonly onChange: (queue: string, view: LeaderView | null) => void,
  ) {
    for (const id of cluster.ids) {
      this.clients.set(id, connect({ nodes: [cluster.addressOf(id)], callTimeoutMs: 400, failoverTimeoutMs: 300, leaderRouting: false, ...connectionOf(cluster.clientTuning) }));
    }
  }

  /** One round of questions; queues with no self-reported leader are absent. */
  async probe(): Promise<Map<string, LeaderView>> {
    const views = new Map<string, LeaderView>();
    const live = this.cluster.ids.filter((id) => this.cluster.answering(id));
    const answers = await Promise.all(live.map((id) => (this.clients.get(id) as QuorumqClient).clusterStatus().catch(() => null)));
    for (const status of answers) {
      if (status === null) continue;
      for (const q of Object.values(status.queues)) {
        if (q.leader !== status.node) continue;
        const known = views.get(q.name);
        if (known === undefined || q.term > known.term) views.set(q.name, { leader: q.leader, term: q.term });
      }
      if (status.metadataLeader === status.node && !views.has(META)) views.set(META, { leader: status.node, term: 0 });
    }
    return views;
  }

  async leaderOf(queue: string): Promise<LeaderView | null> {
    return (await this.probe()).get(queue) ?? null;
  }

  /** Polls until a leader of `queue` at a term above `old`'s is seen; ms since `since`, or null. */
  async waitNewLeader(queue: string, old: LeaderView | null, since: number, timeoutMs: number): Promise<{ ms: number; leader: string; term: number } | null> {
    const deadline = since + timeoutMs;
    while (Date.now() < deadline) {
      const view = (await this.probe()).get(queue);
      if (view !== undefined && (old === null || view.term > old.term)) {
        return { ms: Date.now() - since, leader: view.leader, term: view.term };
      }
      await sleep(40);
    }
    return null;
  }

  /** Waits until every queue in `queues` has a leader; ms waited, or null on timeout. */
  async waitAllLeaders(queues: readonly string[], timeoutMs: number): Promise<number | null> {
    const started = Date.now();
    while (Date.now() - started < timeoutMs) {
      const views = await this.probe();
      if (queues.every((q) => views.has(q))) return Date.now() - started;
      await sleep(100);
    }
    return null;
  }

  /**
   * Waits until node `id`, back from a partition, has rejoined: it answers, reports every
   * node reachable, and for each of `queues` (and the metadata group) names the same leader at
   * the same term as the cluster's current view, which it can only learn from its peers.
   * ms waited, or null on timeout.
   */
  async waitRejoined(id: string, queues: readonly string[], timeoutMs: number): Promise<number | null> {
    const started = Date.now();
    while (Date.now() - started < timeoutMs) {
      // A fresh connection each time: the monitor's own channel to a node that was cut off
      // from the runner (compose) may sit in its reconnect back-off for seconds.
      const client = connect({ nodes: [this.cluster.addressOf(id)], callTimeoutMs: 400, failoverTimeoutMs: 300, leaderRouting: false, ...connectionOf(this.cluster.clientTuning) });
      const [views, own] = await Promise.all([this.probe(), client.clusterStatus().catch(() => null)]);
      await client.close().catch(() => undefined);
      if (own !== null && rejoined(own, views, queues)) return Date.now() - started;
      await sleep(100);
    }
    return null;
  }

  start(intervalMs = 250): void {
    this.running = true;
    this.loop = (async () => {
      while (this.running) {
        const views = await this.probe();
        for (const [queue, view] of views) {
          const known = this.current.get(queue);
          if (known === undefined || known.leader !== view.leader || known.term !== view.term) {
            this.current.set(queue, view);
            this.onChange(queue, view);
          }
        }
        for (const queue of [...this.current.keys()]) {
          if (!views.has(queue)) {
            this.current.delete(queue);
            this.onChange(queue, null);
          }
        }
        await sleep(intervalMs);
      }
    })();
  }

  async stop(): Promise<void> {
    this.running = false;
    await this.loop;
    await Promise.all([...this.clients.values()].map((c) => c.close().catch(() => undefined)));
  }
}

/** The part of a ClusterStatus that `rejoined` reads. */
export interface StatusView {
  readonly node: string;
  readonly metadataLeader: string;
  readonly nodes: Readonly<Record<string, { readonly reachable: boolean }>>;
  readonly queues: Readonly<Record<string, { readonly leader: string; readonly term: number }>>;
}

/**
 * Whether a node whose ClusterStatus is `own` agrees with the cluster's leader views: every
 * node reachable, each queue's leader and term as in `views`, the same metadata leader.
 */
export function rejoined(own: StatusView, views: ReadonlyMap<string, LeaderView>, queues: readonly string[]): boolean {
  const nodes = Object.values(own.nodes);
  if (nodes.length === 0 || !nodes.every((n) => n.reachable)) return false;
  for (const queue of queues) {
    const view = views.get(queue);
    const mine = own.queues[queue];
    if (view === undefined || mine === undefined || mine.leader !== view.leader || mine.term !== view.term) return false;
  }
  const meta = views.get(META);
  return meta === undefined || own.metadataLeader === meta.leader;
}
