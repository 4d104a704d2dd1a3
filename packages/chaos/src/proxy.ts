/**
 * A fault-injecting TCP proxy for one direction of one pair of nodes: node `from` reaches
 * node `to` through it (QUORUMQ_PEERS of `from` names the proxy as `to`'s address). Blocking
 * it destroys the connections it carries and refuses new ones, which is what a partition
 * looks like to gRPC: streams break, reconnects fail until the proxy is unblocked.
 */
import { createServer, connect, type Server, type Socket } from 'node:net';

export class PairProxy {
  private server: Server | null = null;
  private readonly sockets = new Set<Socket>();
  private blockedFlag = false;
  /** Connections accepted, refused while blocked, and cut by a block. */
  readonly stats = { accepted: 0, refused: 0, cut: 0 };

  constructor(
    readonly from: string,
    readonly to: string,
    /** host:port of the proxy. */
    readonly listen: string,
    /** host:port of the target node's peer listener. */
    readonly target: string,
  ) {}

  get blocked(): boolean {
    return this.blockedFlag;
  }

  async start(): Promise<void> {
    const [host, port] = splitAddress(this.listen);
    const server = createServer((client) => this.accept(client));
    await new Promise<void>((resolveListen, reject) => {
      server.once('error', reject);
      server.listen(port, host, () => resolveListen());
    });
    this.server = server;
  }

  /** Cuts every connection and refuses new ones until unblock(). */
  block(): void {
    this.blockedFlag = true;
    for (const socket of this.sockets) {
      this.stats.cut += 1;
      socket.destroy();
    }
    this.sockets.clear();
  }

  unblock(): void {
    this.blockedFlag = false;
  }

  async close(): Promise<void> {
    this.block();
    const server = this.server;
    this.server = null;
    if (server !== null) await new Promise<void>((done) => server.close(() => done()));
  }

  private accept(client: Socket): void {
    if (this.blockedFlag) {
      this.stats.refused += 1;
      client.destroy();
      return;
    }
    this.stats.accepted += 1;
    const [host, port] = splitAddress(this.target);
    const upstream = connect(port, host);
    client.setNoDelay(true);
    upstream.setNoDelay(true);
    this.sockets.add(client);
    this.sockets.add(upstream);
    const teardown = (): void => {
      this.sockets.delete(client);
      this.sockets.delete(upstream);
      client.destroy();
      upstream.destroy();
    };
    client.on('error', teardown);
    upstream.on('error', teardown);
    client.on('close', teardown);
    upstream.on('close', teardown);
    client.pipe(upstream);
    upstream.pipe(client);
  }
}

export function splitAddress(address: string): [string, number] {
  const colon = address.lastIndexOf(':');
  return [address.slice(0, colon), Number(address.slice(colon + 1))];
}
