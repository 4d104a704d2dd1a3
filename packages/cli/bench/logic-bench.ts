/**
 * `npm run bench:logic`: what quorumq's own work per publish costs with no network and no
 * other process: three broker nodes (`BrokerNode`, with their real WAL, message store and
 * LevelDB) in this one process, their peers in memory. Each turn's Raft messages to a peer
 * are encoded with the peer codec (`encodeRaftBatch`) and decoded by the peer in a later
 * turn (`decodeRaftBatch`, after a `setImmediate`), as a socket read would come; both
 * followers get every append at once (the node's transport holds the second follower's
 * appends at one in flight, `append-fanout.ts`, so this is one follower's work more than a
 * real cluster does per publish). One queue; `--messages` 1 KiB publishes one at a time
 * through the leader's router (what the gRPC publish handler calls), `--runs` times.
 *
 * Per run: publishes/s, CPU per publish of the whole process and of its main thread (from
 * /proc, user and system), confirm p50 / p99. The last runs are the warm figures. With
 * `--dir` on tmpfs (/dev/shm) the durable writes cost a memory copy, so what is left is the
 * logic alone.
 *
 * With `--network grpc` the three nodes start as a real node does (`startNode`: client and
 * peer gRPC listeners on loopback, the peer transport and its holds), still in this one
 * process, and the publishes go through the SDK (`@quorumq/client`) in this process too: the
 * logic plus the network edge (HTTP/2, gRPC framing, sockets). What a real cluster of three
 * processes and a client spends per publish beyond that (`run.sh`'s one-in-flight CPU per
 * message) is the wake-ups between processes and code running cache-cold between other
 * processes' turns.
 */
import { connect } from '@quorumq/client';
import { loadConfig, startNode, type RunningNode } from '@quorumq/server';
import { BrokerNode, DEFAULTS, NODE_BEAT_GROUP, NodeMetrics, beatMessage, decodeRaftBatch, encodeRaftBatch, systemEnv, type GroupMessage, type NodeConfig, type PeerLink } from '@quorumq/server/core';
import type { Message, NodeId } from '@quorumq/raft';
import { LevelKvStore, MessageStore, NodeStorage, NodeWalFs } from '@quorumq/storage';
import { Command, Option } from 'commander';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';

const IDS: readonly NodeId[] = ['n1', 'n2', 'n3'];
const QUEUE = 'logic-bench';

/** Peers in memory: a turn's messages to a peer leave as one encoded batch, read in a later turn. */
class MemoryLink implements PeerLink {
  private queued = new Map<NodeId, GroupMessage[]>();
  private scheduled = false;

  constructor(
    private readonly self: NodeId,
    private readonly nodes: ReadonlyMap<NodeId, BrokerNode>,
  ) {}

  send(groupId: string, messages: readonly Message[]): void {
    for (const message of messages) {
      let queued = this.queued.get(message.to);
      if (queued === undefined) this.queued.set(message.to, (queued = []));
      queued.push({ groupId, message });
    }
    if (!this.scheduled) {
      this.scheduled = true;
      queueMicrotask(() => this.flush());
    }
  }

  private flush(): void {
    this.scheduled = false;
    for (const [to, queued] of this.queued) {
      if (queued.length === 0) continue;
      const bytes = encodeRaftBatch(queued);
      this.queued.set(to, []);
      setImmediate(() => {
        const node = this.nodes.get(to);
        if (node === undefined) return;
        for (const wire of decodeRaftBatch(bytes)) if (wire.decoded !== null) node.receive(wire.decoded);
      });
    }
  }

  propose(peer: NodeId, groupId: string, command: Uint8Array): Promise<Uint8Array> {
    return this.node(peer).router.handleForwarded(groupId, new Uint8Array(command));
  }

  fetchBodies(peer: NodeId, groupId: string, snapshotIndex: number, ids: readonly number[]): Promise<ReadonlyArray<Uint8Array | null>> {
    return Promise.resolve(this.node(peer).serveSnapshotBodies(groupId, snapshotIndex, [...ids], 4 * 1024 * 1024));
  }

  isConnected(): boolean {
    return true;
  }

  keepAlive(): void {}

  beat(): void {
    for (const peer of IDS) if (peer !== this.self) this.send(NODE_BEAT_GROUP, [beatMessage(this.self, peer)]);
  }

  setPeers(): void {}

  close(): void {}

  private node(id: NodeId): BrokerNode {
    const node = this.nodes.get(id);
    if (node === undefined) throw new Error(`no node ${id}`);
    return node;
  }
}

async function startInMemory(id: NodeId, root: string, nodes: Map<NodeId, BrokerNode>): Promise<BrokerNode> {
  const dataDir = join(root, id);
  mkdirSync(dataDir, { recursive: true });
  const config: NodeConfig = {
    ...DEFAULTS,
    nodeId: id,
    listen: `${id}:0`,
    advertise: `${id}:0`,
    peers: new Map(IDS.map((n) => [n, `${n}:0`])),
    join: false,
    dataDir,
    metricsListen: null,
    clusterSecret: 'logic-bench',
    testOnlyConfirmBeforeCommit: false,
  };
  const fatal = (error: unknown): never => {
    process.stderr.write(`logic-bench: node ${id} failed: ${error instanceof Error ? error.stack : String(error)}\n`);
    process.exit(1);
  };
  const kv = await LevelKvStore.open(join(dataDir, 'kv'));
  const storage = await NodeStorage.open({ dir: join(dataDir, 'wal'), fs: new NodeWalFs(), kv, snapshotInterval: config.snapshotInterval, logger: { warn: () => {} }, onFatal: fatal });
  const messageStore = await MessageStore.open({ dir: join(dataDir, 'messages'), fs: new NodeWalFs(), cacheBytes: config.messageStoreCacheBytes, segmentBytes: config.messageStoreSegmentBytes, logger: { warn: () => {} } });
  return BrokerNode.create({ config, env: systemEnv, storage, messageStore, link: new MemoryLink(id, nodes), logger: pino({ level: 'warn' }), metrics: new NodeMetrics(100, false), onFatal: fatal });
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** CPU ticks (user + system) of the main thread and of all threads. */
function cpuTicks(): { main: number; all: number } {
  let main = 0;
  let all = 0;
  for (const task of readdirSync('/proc/self/task')) {
    try {
      const stat = readFileSync(`/proc/self/task/${task}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      const ticks = Number(fields[11]) + Number(fields[12]);
      all += ticks;
      if (task === String(process.pid)) main += ticks;
    } catch {
      // A thread that ended meanwhile.
    }
  }
  return { main, all };
}

/** A publish of 1 KiB, resolved once confirmed. */
type Publish = () => Promise<void>;

/** Three nodes in memory (MemoryLink); publishes through the queue leader's router. */
async function inMemory(root: string): Promise<{ publish: Publish; close: () => Promise<void> }> {
  const nodes = new Map<NodeId, BrokerNode>();
  for (const id of IDS) nodes.set(id, await startInMemory(id, root, nodes));
  const body = Buffer.alloc(1024, 120);
  const command = { type: 'enqueue' as const, sizeBytes: body.byteLength, exchange: '', routingKeys: [QUEUE] };
  const stored = { body, routingKey: QUEUE };
  // The metadata group elects a leader, the queue is declared, its group elects one.
  let leader: BrokerNode | null = null;
  for (let attempt = 0; attempt < 400 && leader === null; attempt++) {
    await sleep(25);
    for (const node of nodes.values()) {
      try {
        const declared = await node.router.proposeMeta({ type: 'declareQueue', name: QUEUE, args: {}, passive: false, members: [...IDS], createdAt: 0 });
        if (!declared.ok) continue;
        const reply = await node.router.proposeQueue(QUEUE, command, stored);
        if (reply.type === 'enqueued') leader = [...nodes.values()].find((n) => n.queues.get(QUEUE)?.group.isLeader === true) ?? null;
        break;
      } catch {
        // No leader yet.
      }
    }
  }
  if (leader === null) throw new Error('no queue leader after 10 s');
  const queueLeader = leader;
  const publish: Publish = async () => {
    const reply = await queueLeader.router.proposeQueue(QUEUE, command, stored);
    if (reply.type !== 'enqueued') throw new Error(`publish: ${reply.type}`);
  };
  return { publish, close: async () => {} };
}

/** Three nodes as `quorumq node` starts them, on loopback ports from `basePort`; publishes through the SDK. */
async function overGrpc(root: string, basePort: number): Promise<{ publish: Publish; close: () => Promise<void> }> {
  const peers = IDS.map((id, i) => `${id}=127.0.0.1:${basePort + 1000 + i}`).join(',');
  const running: RunningNode[] = await Promise.all(
    IDS.map((id, i) =>
      startNode(
        loadConfig(null, {
          QUORUMQ_NODE_ID: id,
          QUORUMQ_LISTEN: `127.0.0.1:${basePort + i}`,
          QUORUMQ_ADVERTISE: `127.0.0.1:${basePort + i}`,
          QUORUMQ_PEER_LISTEN: `127.0.0.1:${basePort + 1000 + i}`,
          QUORUMQ_PEERS: peers,
          QUORUMQ_DATA_DIR: join(root, id),
          QUORUMQ_CLUSTER_SECRET: 'logic-bench-secret-0123456789abcdef',
          QUORUMQ_LOG_LEVEL: 'warn',
        }),
      ),
    ),
  );
  const client = connect({ nodes: IDS.map((_, i) => `127.0.0.1:${basePort + i}`) });
  await client.declareQueue(QUEUE);
  const publisher = client.createPublisher({ maxInFlight: 1 });
  const body = Buffer.alloc(1024, 120);
  const publish: Publish = async () => {
    const result = await publisher.publish(QUEUE, body);
    if (result.outcome !== 'confirmed') throw new Error(`publish: ${result.outcome}`);
  };
  return {
    publish,
    close: async () => {
      await publisher.close();
      await client.close();
      await Promise.all(running.map((node) => node.stop()));
    },
  };
}

async function main(options: { messages: number; runs: number; dir: string; network: 'memory' | 'grpc'; basePort: number }): Promise<void> {
  const root = mkdtempSync(join(options.dir, 'quorumq-logic-bench-'));
  const keepAlive = setInterval(() => {}, 1000);
  try {
    const cluster = options.network === 'grpc' ? await overGrpc(root, options.basePort) : await inMemory(root);
    const how = options.network === 'grpc' ? 'gRPC on loopback, publishes through the SDK' : 'peers in memory, publishes through the leader\'s router';
    console.log(`quorumq logic benchmark: node ${process.version}, three nodes in one process (${how}), data in ${options.dir}, ${options.messages} publishes of 1 KiB per run, one in flight`);
    console.log('run  publishes/s  CPU us/publish (main thread)  p50 ms  p99 ms');
    for (let run = 1; run <= options.runs; run++) {
      const latencies = new Float64Array(options.messages);
      const before = cpuTicks();
      const started = performance.now();
      for (let i = 0; i < options.messages; i++) {
        const sent = performance.now();
        await cluster.publish();
        latencies[i] = performance.now() - sent;
      }
      const seconds = (performance.now() - started) / 1000;
      const after = cpuTicks();
      latencies.sort();
      // /proc counts ticks of 10 ms.
      const perPublish = (ticks: number): number => Math.round((ticks * 10_000) / options.messages);
      console.log(
        `${String(run).padStart(3)}  ${String(Math.round(options.messages / seconds)).padStart(11)}  ${String(perPublish(after.all - before.all)).padStart(14)} (${perPublish(after.main - before.main)})` +
          `  ${latencies[options.messages >> 1]!.toFixed(3).padStart(14)}  ${latencies[Math.floor(options.messages * 0.99)]!.toFixed(3).padStart(6)}`,
      );
    }
    await cluster.close();
  } finally {
    clearInterval(keepAlive);
    rmSync(root, { recursive: true, force: true });
  }
}

const positive = (value: string): number => {
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n < 1) throw new Error(`expected a positive integer, got "${value}"`);
  return n;
};

const program = new Command('logic-bench')
  .description("quorumq's own work per publish: three nodes in one process, peers in memory")
  .option('--messages <n>', 'publishes per run', positive, 3000)
  .option('--runs <n>', 'runs (the first ones warm the code)', positive, 5)
  .option('--dir <path>', 'where the nodes keep their data (tmpfs, e.g. /dev/shm: the logic without the disk)', tmpdir())
  .addOption(new Option('--network <kind>', 'memory: peers in memory, publishes through the router; grpc: real listeners on loopback, publishes through the SDK').choices(['memory', 'grpc']).default('memory'))
  .option('--base-port <port>', 'with --network grpc: the first client port (peers 1000 above)', positive, 17001)
  .action(async (options: { messages: number; runs: number; dir: string; network: 'memory' | 'grpc'; basePort: number }) => {
    await main(options);
    process.exit(0);
  });
await program.parseAsync();
