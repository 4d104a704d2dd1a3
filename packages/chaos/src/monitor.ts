/**
 * Who leads each queue, as the nodes themselves say: every running, unpaused node is asked
 * for its ClusterStatus; a queue's leader is the node that reports itself as leader with the
 * highest term (an isolated old leader may still believe it leads, at a lower term).
 */
import { connect, type QuorumqClient } from '@quorumq/client';

import type { ChaosCluster } from './cluster.js';
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
    private readonly cluster: ChaosCluster,
    private readonly onChange: (queue: string, view: LeaderView | null) => void,
  ) {
    for (const node of cluster.nodes) {
      this.clients.set(node.id, connect({ nodes: [node.address], callTimeoutMs: 400, failoverTimeoutMs: 300, leaderRouting: false }));
    }
  }

  /** One round of questions; queues with no self-reported leader are absent. */
  async probe(): Promise<Map<string, LeaderView>> {
    const views = new Map<string, LeaderView>();
    const live = this.cluster.nodes.filter((n) => n.process !== null && !n.paused);
    const answers = await Promise.all(live.map((n) => (this.clients.get(n.id) as QuorumqClient).clusterStatus().catch(() => null)));
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
