/**
 * Test harness: `LocalCluster` (real node processes on loopback, from `@quorumq/cli`) plus
 * SDK clients that are closed with it.
 */
import { LocalCluster, type LocalClusterOptions } from '@quorumq/cli';
import { connect, type ConnectOptions, type QuorumqClient } from '@quorumq/client';

export class TestCluster {
  private readonly clients: QuorumqClient[] = [];

  private constructor(readonly local: LocalCluster) {}

  static async start(options: LocalClusterOptions = {}): Promise<TestCluster> {
    return new TestCluster(await LocalCluster.start(TestCluster.options(options)));
  }

  /** The options every test cluster's nodes get, with `options`. */
  static options(options: LocalClusterOptions = {}): LocalClusterOptions {
    return { ...options, env: { QUORUMQ_DISK_FREE_LIMIT_BYTES: '1048576', ...options.env } };
  }

  /** A cluster the test prepared and started itself (made with `options`). */
  static of(local: LocalCluster): TestCluster {
    return new TestCluster(local);
  }

  get nodes() {
    return this.local.nodes;
  }

  get addresses(): string[] {
    return this.local.addresses;
  }

  kill(id: string): Promise<void> {
    return this.local.kill(id);
  }

  stop(id: string): Promise<void> {
    return this.local.stop(id);
  }

  startNode(id: string): void {
    this.local.startNode(id);
  }

  restart(id: string): Promise<void> {
    return this.local.restart(id);
  }

  waitHealthy(ids?: string[]): Promise<void> {
    return this.local.waitHealthy(ids);
  }

  client(options: Partial<ConnectOptions> = {}): QuorumqClient {
    const tls = this.local.clientTls;
    const client = connect({ nodes: this.addresses, ...(tls === undefined ? {} : { tls }), ...options });
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
    await this.local.close();
  }
}

/** Polls `check` every 50 ms until it holds; throws after `timeoutMs`. */
export async function waitFor(check: () => Promise<boolean>, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** What an SDK call was refused with (code, reason, message), or null when it succeeded. */
export async function refusal(promise: Promise<unknown>): Promise<{ code: string; reason: string; message: string } | null> {
  try {
    await promise;
    return null;
  } catch (error) {
    const e = error as { code: string; reason: string; message: string };
    return { code: e.code, reason: e.reason, message: e.message };
  }
}
