/**
 * What the runner needs from a cluster it injects faults into: the process cluster
 * (`ChaosCluster`, node processes on loopback with per-pair proxies) and the docker-compose
 * cluster (`ComposeCluster`, one container per node) both provide it. The runner, the leader
 * monitor, the workload and the checker are the same for both.
 */
import type { UnexpectedExit } from '@quorumq/cli';
import type { StorageDamage } from './schedule.js';
import type { TlsOptions } from '@quorumq/client';

/** Settings every client of the run is created with (on top of the run's own timeouts). */
export interface ClientTuning {
  /**
   * false where the node addresses the cluster reports (ClusterStatus, `quorumq-leader`
   * trailers) do not resolve from the runner, as with compose (`n1:7001`): calls then go to
   * any configured node, which proxies consume and status calls to the leader.
   */
  readonly leaderRouting?: boolean;
  /** TLS to the nodes (the compose cluster serves clients over TLS): the CA, a client certificate. */
  readonly tls?: TlsOptions;
}

/** Only the connection part of the tuning (for clients that set their own routing). */
export function connectionOf(tuning: ClientTuning): { tls?: TlsOptions } {
  return tuning.tls === undefined ? {} : { tls: tuning.tls };
}

export type ClusterKind = 'process' | 'compose';

export interface NemesisCluster {
  readonly kind: ClusterKind;
  /** Node ids, n1..n3. */
  readonly ids: readonly string[];
  /** The addresses clients use, in id order. */
  readonly addresses: readonly string[];
  readonly clientTuning: ClientTuning;
  /** The address a client uses to reach node `id` alone. */
  addressOf(id: string): string;
  /** Whether node `id` can answer now (as far as the nemesis knows: not killed, paused or cut off from the runner). */
  answering(id: string): boolean;
  isRunning(id: string): boolean;
  /** SIGKILL of the node. */
  kill(id: string): Promise<void>;
  /** Starts a killed node again (with its data); does not wait until it serves. */
  start(id: string): void | Promise<void>;
  /** Freezes the node (SIGSTOP / docker pause). */
  pause(id: string): void | Promise<void>;
  resume(id: string): void | Promise<void>;
  /** Cuts `id` off from every other node (the majority keeps a quorum). */
  isolate(id: string): void | Promise<void>;
  /** Removes every partition. */
  heal(): void | Promise<void>;
  /**
   * Damages a stopped node's data directory (a storage fault: see StorageDamage) at `at`
   * (a fraction of the file's length); says what it did. Absent where the data directories
   * are not on this machine (compose).
   */
  damageStorage?(id: string, damage: StorageDamage, at: number): Promise<string>;
  /** Heals partitions, resumes paused nodes, starts killed ones and waits until all serve. */
  healAll(timeoutMs: number): Promise<void>;
  /** Waits until the nodes answer the gRPC health check with SERVING. */
  waitHealthy(ids: readonly string[], timeoutMs: number): Promise<void>;
  /** Nodes that exited without the nemesis killing or stopping them. */
  readonly unexpectedExits: readonly UnexpectedExit[];
  /** What the nemesis did, for the report (proxy counters, docker command times). */
  stats(): Record<string, unknown>;
  /** Process cluster: kills the nodes and removes their data. Compose: undoes pauses and disconnects (the compose project is torn down by its owner). */
  close(): Promise<void>;
}
