/**
 * One quorumq node, assembled from its parts: the metadata group and its machine, the queue
 * replicas (queue-replicas.ts), where proposals go (proposal-router.ts), what a leader does
 * with its machine's effects (effect-runner.ts, dead-letter-worker.ts, move-worker.ts,
 * leader-duties.ts) and the consumers attached here (consumers.ts).
 *
 * `BrokerNode.create` takes everything from outside as parameters (clock and timers, storage,
 * peers): the simulator builds nodes with it. `BrokerNode.start` builds a real node: LevelDB
 * and the WAL on disk, gRPC peers, the metrics server, the disk-space and memory checks.
 */
import { statfs } from 'node:fs/promises';
import { join } from 'node:path';
import type { Server as HttpServer } from 'node:http';
import type { Topology } from '@quorumq/queue';
import type { NodeId, SoftState } from '@quorumq/raft';
import { LevelKvStore, MessageStore, NodeStorage, NodeWalFs, type MessageStoreApi } from '@quorumq/storage';

import { AdoptedBodies } from './adopted-bodies.js';
import { ClusterDirectory } from './cluster-directory.js';
import { removalTold } from './cluster-nodes.js';
import type { ReplicaTestOnlyBugs } from './queue-replica.js';
import type { Logger } from 'pino';

import type { NodeConfig } from './config.js';
import { ConsumerRegistry } from './consumers.js';
import { DeadLetterWorker, type DeadLetterTestOnlyBugs } from './dead-letter-worker.js';
import { EffectRunner } from './effect-runner.js';
import { BrokerError, Reason, Status, unavailable } from './errors.js';
import { LeaderDuties } from './leader-duties.js';
import type { LeaderWorkContext } from './leader-work.js';
import { META_GROUP } from './local-queue.js';
import { MemberChanges } from './member-changes.js';
import { NodeIncarnations, lostDataMessage } from './node-incarnation.js';
import { MemoryAlarm } from './memory-alarm.js';
import { MetaMachine, type MetaReply, type QueueDefinition } from './meta-machine.js';
import { NodeMetrics } from './metrics.js';
import { groupObservation, heldBodies, leaderlessGroups, ledQueueObservations, recoveringGroups } from './metrics-sources.js';
import { recoveryReporter, reportRepairs } from './repair-report.js';
import { MoveWorker, type MoveTestOnlyBugs } from './move-worker.js';
import { EarlyMessages } from './early-messages.js';
import { GroupTicker } from './group-ticker.js';
import { every, sleep, systemEnv, type NodeEnv, type Timer } from './node-env.js';
import type { PeerLink } from './peer-link.js';
import { NODE_BEAT_GROUP, PeerLiveness } from './peer-liveness.js';
import { ProposalRouter } from './proposal-router.js';
import { QueueReplicas, type GroupSetup } from './queue-replicas.js';
import { loadHeapTrim, type HeapTrim } from './heap-trim.js';
import { IdleMemory } from './idle-memory.js';
import { RaftGroup } from './raft-group.js';
import { serveSnapshotBodies } from './snapshot-bodies.js';
import type { GroupMessage } from './raft-codec.js';
import { PeerCredentials } from './tls-credentials.js';
import { peerCallMetadata } from './peer-auth.js';
import type { Metadata } from '@grpc/grpc-js';
import { PeerTransport } from './transport.js';
import { WarnLimiter } from './warn-limiter.js';


export { META_GROUP, queueGroupId, type LocalQueue } from './local-queue.js';
export type { LocalConsumer } from './consumers.js';

/** Bugs a test plants to prove the simulator catches them. Never set in a real node. */
export interface NodeTestOnlyBugs {
  readonly deadLetter?: DeadLetterTestOnlyBugs;
  readonly move?: MoveTestOnlyBugs;
  readonly replica?: ReplicaTestOnlyBugs;
}

/** Everything a node takes from outside (see BrokerNode.create). */
export interface BrokerNodeParts {
  readonly config: NodeConfig;
  readonly env: NodeEnv;
  readonly storage: NodeStorage;
  /** The node's message store: the bytes of every queued message of its replicas. */
  readonly messageStore: MessageStoreApi;
  readonly link: PeerLink;
  readonly logger: Logger;
  readonly metrics: NodeMetrics;
  /** Who the cluster's nodes are (shared with the peer listener's authenticator); from `config.peers` when not given. */
  readonly directory?: ClusterDirectory;
  /** This node's incarnation and its peers' (node-incarnation.ts); in memory when not given. */
  readonly incarnations?: NodeIncarnations;
  /** The node cannot go on (a storage error): the process must stop (it restarts from its WAL). */
  readonly onFatal: (error: unknown) => void;
  /** How each Raft group is set up beyond the config (the simulator's checkers). */
  readonly groupSetup?: (groupId: string) => GroupSetup;
  readonly testOnlyBugs?: NodeTestOnlyBugs;
  /** The memory alarm (spec 2), sampled by a real node; none in the simulator. */
  readonly memoryAlarm?: MemoryAlarm;
  /** Gives an idle node's free heap back to the system (see IdleMemory); none in the simulator. */
  readonly heapTrim?: HeapTrim | null;
}

/** What `BrokerNode.start` takes from outside beyond the config (a test drives these). */
export interface BrokerNodeHost {
  /** The process's resident memory now; `process.memoryUsage.rss()` by default. */
  readonly residentMemoryBytes?: () => number;
  /** The peer channels' TLS (tls-credentials.ts); plaintext when not given. */
  readonly peerCredentials?: PeerCredentials;
  /** Who the cluster's nodes are (the peer listener's authenticator reads it too). */
  readonly directory?: ClusterDirectory;
  /**
   * Whether the node's metrics include the process's (CPU, memory, event-loop delay, GC:
   * prom-client's defaults, whose samplers stay for the life of the process). True by default;
   * false for a node that is not the process's own (the warm-up's, the CLI's warm-up.ts).
   */
  readonly processMetrics?: boolean;
}

export class BrokerNode {
  readonly config: NodeConfig;
  readonly env: NodeEnv;
  readonly storage: NodeStorage;
  readonly messageStore: MessageStoreApi;
  readonly link: PeerLink;
  readonly logger: Logger;
  readonly metrics: NodeMetrics;
  readonly meta: MetaMachine;
  readonly metaGroup: RaftGroup<MetaReply>;
  readonly queues: QueueReplicas;
  readonly consumers = new ConsumerRegistry();
  readonly router: ProposalRouter;
  /** Who the cluster's nodes are now (the configuration's peers, then the metadata's registry). */
  readonly directory: ClusterDirectory;
  /** Groups' configurations follow the metadata's members (member-changes.ts). */
  readonly memberChanges: MemberChanges;
  /** This node's incarnation and those its peers told (node-incarnation.ts). */
  readonly incarnations: NodeIncarnations;
  /** Warnings a peer can cause over and over (refused calls and messages), rate-limited. */
  readonly warnings: WarnLimiter;
  diskAlarm = false;
  readonly memory: MemoryAlarm | null;
  private readonly onFatal: (error: unknown) => void;
  private ticker: Timer | null = null;
  /** The groups ticked now: only those with work (quiet groups rest, see RaftNode.isQuiet). */
  readonly groupTicks = new GroupTicker();
  /** Which peers went silent (quiet groups send no heartbeats of their own). */
  private readonly liveness: PeerLiveness;
  private ticks = 0;
  /** Messages for queue groups this node will create once it applies their declare. */
  private readonly early: EarlyMessages;
  private diskTimer: Timer | null = null;
  /** See checkIdle. */
  private readonly idleMemory: IdleMemory;
  private metricsServer: HttpServer | null = null;
  private stopping = false;
  /** This node was removed from the cluster (see toldRemoved): it takes no part and serves no client. */
  private removedFromCluster = false;
  /** The peers that said this node was removed (see toldRemoved). */
  private readonly removedBy = new Set<NodeId>();
  private readonly removedHandlers: Array<() => void> = [];
  private metaLeaderHandlers: Array<() => void> = [];
  /** Each peer's client address, as it told it on its Raft stream (see addressOf). */
  private readonly clientAddresses = new Map<NodeId, string>();

  private constructor(parts: BrokerNodeParts) {
    const { config, env, storage, messageStore, link, logger, metrics } = parts;
    this.config = config;
    this.env = env;
    this.storage = storage;
    this.messageStore = messageStore;
    this.link = link;
    this.logger = logger;
    this.metrics = metrics;
    this.onFatal = parts.onFatal;
    this.memory = parts.memoryAlarm ?? null;
    this.warnings = new WarnLimiter(logger, 10_000, () => env.now());
    const groupSetup = parts.groupSetup ?? (() => ({}));
    const isStopping = (): boolean => this.stopping;
    const fatal = (error: unknown): void => this.fatal(error);
    this.directory = parts.directory ?? new ClusterDirectory(config.nodeId, config.peers);
    this.incarnations = parts.incarnations ?? NodeIncarnations.inMemory('0'.repeat(32));
    const others = (): NodeId[] => this.directory.ids().filter((id) => id !== config.nodeId);
    this.liveness = new PeerLiveness(others(), config.electionTicks * config.tickMs, env.now());
    this.directory.onChange((added, removed) => {
      link.setPeers(this.directory.peers());
      this.liveness.setPeers(others(), env.now());
      for (const id of removed) this.clientAddresses.delete(id);
      logger.info({ added, removed, nodes: this.directory.ids() }, 'cluster nodes changed');
    });
    const doubtLeader = (peer: NodeId): void => {
      if (this.liveness.confirmSilent(peer, env.now())) this.onPeerSilent(peer, 'a member asks for votes against it');
    };
    const isPeerSilent = (peer: NodeId): boolean => this.liveness.isSilent(peer);

    this.idleMemory = new IdleMemory(() => this.queues.all(), parts.heapTrim ?? null);
    this.meta = new MetaMachine(
      (name) => this.queues.reconcileSoon(name),
      () => this.directory.refresh(this.meta.nodes),
    );
    this.early = new EarlyMessages(2 * config.electionTicks * config.tickMs);
    this.queues = new QueueReplicas({
      env,
      nodeId: config.nodeId,
      storage,
      messageStore,
      // Every record the saved snapshots reference, adopted before the store reclaims the rest.
      adopted: AdoptedBodies.collect(messageStore, storage, logger),
      snapshotLogBytesMin: config.snapshotLogBytesMin,
      ...(parts.testOnlyBugs?.replica !== undefined ? { testOnlyBugs: parts.testOnlyBugs.replica } : {}),
      link,
      logger,
      metrics,
      meta: this.meta,
      consumers: this.consumers,
      electionTicks: config.electionTicks,
      heartbeatTicks: config.heartbeatTicks,
      ticker: this.groupTicks,
      doubtLeader,
      isPeerSilent,
      onGroupCreated: (group) => {
        for (const envelope of this.early.take(group.groupId)) this.receive(envelope);
      },
      groupSetup,
      fatal,
      isStopping,
    });
    this.metaGroup = new RaftGroup<MetaReply>({
      groupId: META_GROUP,
      env,
      nodeId: config.nodeId,
      storage,
      machine: this.meta,
      // A joining node knows no configuration: the cluster's leader adds it as a learner.
      initialVoters: config.join ? [] : [...config.peers.keys()].sort(),
      send: (groupId, messages) => link.send(groupId, messages),
      onSoftState: (state) => this.onMetaSoftState(state),
      onApplied: () => this.router.onMetaApplied(),
      onFatal: fatal,
      onRecovered: recoveryReporter(metrics, logger),
      knownMember: (from) => this.directory.has(from),
      electionTicks: config.electionTicks,
      heartbeatTicks: config.heartbeatTicks,
      ticker: this.groupTicks,
      doubtLeader,
      // Never held back by the ticker's election slots: nothing serves without it.
      rationedElections: false,
      // Every node acts on the metadata it applies (a declare starts the queue's replicas).
      announceCommit: true,
      ...groupSetup(META_GROUP),
    });
    this.router = new ProposalRouter({
      env,
      config,
      directory: this.directory,
      link,
      metrics,
      meta: this.meta,
      metaGroup: this.metaGroup,
      localQueue: (name) => this.queues.get(name),
      groupById: (groupId) => this.groupById(groupId),
      isStopping,
    });
    const work: LeaderWorkContext = {
      env,
      logger,
      metrics,
      topology: () => this.meta.topology,
      metaBarrier: () => this.router.barrier.wait(),
      proposeQueue: (name, command, message) => this.router.proposeQueue(name, command, message),
      proposeLocal: (queue, command) => this.router.proposeLocal(queue, command),
      stillLeads: (queue) => queue.group.isLeader && !this.stopping && this.queues.get(queue.definition.name) === queue,
    };
    const deadLetters = new DeadLetterWorker(work, parts.testOnlyBugs?.deadLetter);
    const moves = new MoveWorker(work, parts.testOnlyBugs?.move);
    this.memberChanges = new MemberChanges({
      env,
      logger,
      nodeId: config.nodeId,
      link,
      nodes: this.meta.nodes,
      queueDefinitions: () => this.meta.queues.values(),
      proposeMeta: (command) => this.router.proposeMeta(command),
      isStopping,
    });
    let duties: LeaderDuties | null = null;
    const effects = new EffectRunner({
      consumers: this.consumers,
      deadLetters,
      moves,
      metrics,
      logger,
      scheduleTick: (queue, at) => duties?.scheduleTick(queue, at),
      proposeMeta: (command) => this.router.proposeMeta(command),
    });
    duties = new LeaderDuties({
      env,
      logger,
      metrics,
      nodeId: config.nodeId,
      consumers: this.consumers,
      router: this.router,
      effects,
      deadLetters,
      moves,
      memberChanges: this.memberChanges,
      link,
      addressOf: (node) => this.addressOf(node),
      isStopping,
    });
    this.queues.wire({ router: this.router, effects, duties });
    metrics.identify(config.nodeId);
    metrics.observeQueues(() => ledQueueObservations(this.queues.all()));
    metrics.observeMetadataGroup(() => groupObservation(this.metaGroup));
    metrics.observeMessageStore(() => messageStore.stats());
    metrics.observeHeldBodies(() => heldBodies(this.queues.all()));
    metrics.observeWal(() => storage.walUsage());
    metrics.diskFreeLimitBytes.set(config.diskFreeLimitBytes);
    metrics.observeGroups(() => {
      const { running, waiting } = this.groupTicks.campaigns;
      return { active: this.groupTicks.activeCount, all: this.queues.size + 1, campaigning: running, waiting, leaderless: leaderlessGroups(this.metaGroup, this.queues.all()), recovering: recoveringGroups(this.metaGroup, this.queues.all()) };
    });
  }

  /** A node on the given parts, running: its groups tick on the env's clock. */
  static create(parts: BrokerNodeParts): BrokerNode {
    const node = new BrokerNode(parts);
    node.queues.reconcile();
    node.ticker = every(parts.env, parts.config.tickMs, () => node.tick());
    return node;
  }

  /** A real node: storage in `config.dataDir`, gRPC peers, metrics, the disk and memory checks. */
  static async start(config: NodeConfig, logger: Logger, onFatal: (error: unknown) => void, host: BrokerNodeHost = {}): Promise<BrokerNode> {
    const kv = await LevelKvStore.open(join(config.dataDir, 'kv'));
    const metrics = new NodeMetrics(config.metricsQueueLimit, host.processMetrics ?? true);
    let node: BrokerNode | null = null;
    const storage = await NodeStorage.open({
      dir: join(config.dataDir, 'wal'),
      fs: new NodeWalFs(),
      kv,
      snapshotInterval: config.snapshotInterval,
      logger: { warn: (message: string) => logger.warn(message) },
      onFatal: (error) => (node === null ? onFatal(error) : node.fatal(error)),
      onFlush: (stats) => metrics.walFlushed(stats.records, stats.bytes, stats.segments),
    });
    reportRepairs(storage.repairs, metrics, logger);
    if (config.testOnlyConfirmBeforeCommit) logger.warn('TEST ONLY: publishes are confirmed before they commit; confirmed messages can be lost');
    const messageStore = await MessageStore.open({
      dir: join(config.dataDir, 'messages'),
      fs: new NodeWalFs(),
      cacheBytes: config.messageStoreCacheBytes,
      segmentBytes: config.messageStoreSegmentBytes,
      logger: { warn: (message: string) => logger.warn(message) },
    });
    const directory = host.directory ?? new ClusterDirectory(config.nodeId, config.peers);
    const incarnations = await NodeIncarnations.load(kv);
    let lost: ((peer: NodeId) => void) | null = null;
    let told: ((peer: NodeId) => void) | null = null;
    const transport = new PeerTransport(
      config.nodeId,
      directory.peers(),
      config.clusterSecret,
      logger,
      (messages) => metrics.peerBatchSent(messages),
      {
        credentials: host.peerCredentials ?? new PeerCredentials(config, logger),
        clientAddress: config.advertise,
        incarnations,
        onLostOwnData: (peer) => lost?.(peer),
        onToldRemoved: (peer) => told?.(peer),
      },
    );
    const memoryAlarm = MemoryAlarm.ofProcess(config, logger, metrics, host.residentMemoryBytes);
    const heap = loadHeapTrim();
    for (const missing of heap.missing) logger.info(`an idle node gives memory back to the system without a part: ${missing}`);
    node = BrokerNode.create({ config, env: systemEnv, storage, messageStore, link: transport, directory, incarnations, logger, metrics, onFatal, memoryAlarm, heapTrim: heap.trim });
    const created = node;
    lost = (peer) => created.lostOwnData(peer);
    told = (peer) => created.toldRemoved(peer);
    await node.checkDisk();
    memoryAlarm.check();
    const started = node;
    node.diskTimer = every(systemEnv, 2000, () => {
      void started.checkDisk();
      // An idle store keeps no read cache (consumers quiet, or the backlog drained).
      messageStore.dropCacheIfUnused();
      started.checkIdle();
      memoryAlarm.check();
    });
    if (config.metricsListen !== null) node.metricsServer = await metrics.listen(config.metricsListen);
    return node;
  }

  /**
   * The periodic check of memory that follows work (IdleMemory): idle replicas give back
   * their snapshot scratch and snapshot a long log; an idle node then releases its heap.
   * A real node calls it every 2 s; the simulator on its own schedule.
   */
  checkIdle(): void {
    if (this.stopping) return;
    this.idleMemory.check();
  }

  /** This node's copy of the topology (it may lag the metadata leader: see metaBarrier). */
  get topology(): Topology {
    return this.meta.topology;
  }

  /** The queues this node's copy of the metadata defines, by name. */
  get knownQueues(): ReadonlyMap<string, QueueDefinition> {
    return this.meta.queues;
  }

  get nodeId(): NodeId {
    return this.config.nodeId;
  }

  /**
   * The address clients reach `node` at (its `advertise`), for leader hints and
   * ClusterStatus: this node's own, or the one a peer told on its Raft stream; null until a
   * peer told it (never a peer address: clients cannot use those).
   */
  addressOf(node: NodeId | null): string | null {
    if (node === null) return null;
    if (node === this.nodeId) return this.config.advertise;
    return this.clientAddresses.get(node) ?? null;
  }

  /** The metadata of this node's calls to its peers' listeners: its id and the cluster secret (peer-auth.ts). */
  peerCallMetadata(): Metadata {
    return peerCallMetadata(this.nodeId, this.config.clusterSecret);
  }

  /**
   * An authenticated peer this node's metadata does not name told its peer address: see
   * ClusterDirectory.introduce. True when it is a node of the cluster now.
   */
  introducePeer(peer: NodeId, peerAddress: string): boolean {
    if (this.directory.has(peer)) return true;
    if (!this.directory.introduce(peer, peerAddress)) return false;
    this.logger.warn(
      { peer, peerAddress, metadataApplied: this.meta.appliedIndex },
      'admitted a peer the metadata here does not name yet (it joined while this node was away, or this node repaired its metadata log); until the metadata names it, it is reachable but holds no new replicas',
    );
    return true;
  }

  /** An authenticated peer told its client address (on its Raft stream). */
  learnClientAddress(peer: NodeId, address: string): void {
    if (peer === this.nodeId || !this.directory.has(peer)) return;
    const before = this.clientAddresses.get(peer);
    if (before === address) return;
    this.clientAddresses.set(peer, address);
    this.logger.info({ peer, clientAddress: address, before: before ?? null }, 'learnt a peer\'s client address');
  }

  // ------------------------------------------------------------------------------------
  // Raft plumbing

  /** Work per tick follows the active groups, not all of them. */
  private tick(): void {
    const now = this.env.now();
    this.link.keepAlive();
    this.ticks += 1;
    if (this.ticks % this.config.heartbeatTicks === 0) this.link.beat();
    for (const peer of this.liveness.check(now)) this.onPeerSilent(peer, 'no batch for an election timeout');
    this.early.expire(now);
    this.groupTicks.tick(now);
    // The metadata group's voters follow the node registry (on its leader; cheap without changes).
    if (this.ticks % 4 === 0 && this.metaGroup.isLeader) this.memberChanges.checkMeta(this.metaGroup as RaftGroup<unknown>);
  }

  /** A batch or a beat arrived from `peer` (see PeerLiveness). */
  heardFrom(peer: NodeId): void {
    this.link.heardFrom?.(peer);
    if (!this.liveness.heard(peer, this.env.now())) return;
    // Back after a gap: a quiet group this node leads may have left it behind.
    this.metaGroup.peerBack(peer);
    for (const queue of this.queues.all()) queue.group.peerBack(peer);
  }

  /** No batch from `peer` for an election timeout: the groups it leads elect, the quiet groups that must notice wake. */
  private onPeerSilent(peer: NodeId, why: string): void {
    this.metrics.peersSilent.inc();
    this.logger.warn({ peer, why }, 'peer silent; the groups it leads elect another leader');
    const isSilent = (id: NodeId): boolean => this.liveness.isSilent(id);
    this.metaGroup.peerSilent(peer, isSilent);
    for (const queue of this.queues.all()) queue.group.peerSilent(peer, isSilent);
  }

  /**
   * A Raft message from an authenticated peer (the transport checked the stream's
   * credentials and that the message is sent in the peer's own name). Dropped unless its
   * sender is a configured peer and a member of the group it is for.
   */
  receive(envelope: GroupMessage): void {
    if (this.stopping || this.removedFromCluster) return;
    const { message } = envelope;
    // Never step a message meant for another node into this one (the core would rightly
    // call that an invariant violation); the transport refuses such streams.
    if (message.to !== this.nodeId) return;
    if (message.from === this.nodeId || !this.directory.has(message.from)) {
      this.refuseMessage('not_a_member', envelope);
      return;
    }
    this.heardFrom(message.from);
    // A beat (the simulator's; a real peer's is an empty batch) only says the peer is alive.
    if (envelope.groupId === NODE_BEAT_GROUP) return;
    const group = this.groupById(envelope.groupId);
    if (group === null) {
      // A queue this node does not know yet (its declare is not applied here yet): held
      // until the replica starts (EarlyMessages). Of a deleted queue: dropped.
      if (createdAfter(envelope.groupId, this.meta.appliedIndex)) this.early.hold(envelope, this.env.now());
      return;
    }
    if (!group.receive(message)) this.refuseMessage('not_a_member', envelope);
  }

  /** Counts and (rate-limited) logs a Raft message dropped unstepped. */
  private refuseMessage(reason: 'not_a_member', { groupId, message }: GroupMessage): void {
    this.metrics.raftMessagesRefused.inc({ reason });
    this.warnings.warn(
      `raft:${reason}`,
      { reason, group: groupId.slice(0, 300), from: message.from.slice(0, 64), type: message.type, term: message.term },
      'dropped a Raft message whose sender is not a member of its group',
    );
  }

  /**
   * A peer installing this node's newest snapshot of `groupId` fetches the bytes of messages
   * it lists (see snapshot-bodies.ts). Throws a BrokerError: NOT_FOUND for a group with no
   * replica here, FAILED_PRECONDITION when that snapshot is not the newest here any more.
   */
  serveSnapshotBodies(groupId: string, snapshotIndex: number, ids: readonly number[], bytesMax: number): Array<Uint8Array | null> {
    if (this.stopping) throw new BrokerError(Status.UNAVAILABLE, Reason.SHUTTING_DOWN, 'this node is stopping');
    const queue = this.queues.byGroupId(groupId);
    if (queue === null) throw new BrokerError(Status.NOT_FOUND, Reason.UNKNOWN_GROUP, `no replica of ${groupId} on this node`);
    const served = serveSnapshotBodies({ snapshotIndex: queue.group.snapshotIndex, bodies: queue.replica.bodies }, groupId, snapshotIndex, ids, bytesMax);
    let missing = 0;
    for (const body of served) if (body === null) missing++;
    if (missing > 0) this.logger.error({ queue: queue.definition.name, messages: missing }, "a follower asked for messages whose bytes are missing from the message store");
    return served;
  }

  groupById(groupId: string): RaftGroup<unknown> | null {
    if (groupId === META_GROUP) return this.metaGroup as RaftGroup<unknown>;
    return this.queues.groupById(groupId) as RaftGroup<unknown> | null;
  }

  /**
   * A peer knew another incarnation of this node (node-incarnation.ts): its data directory
   * was lost or replaced. It stops before taking part, and says what to do.
   */
  lostOwnData(peer: NodeId): void {
    if (this.stopping) return;
    const message = lostDataMessage(this.nodeId, peer);
    this.logger.fatal({ peer }, message);
    this.stopping = true;
    this.queues.stopAll('this node lost its data directory');
    this.metaGroup.stop('this node lost its data directory');
    this.onFatal(new Error(message));
  }

  /**
   * A peer refused this node's stream because its registry names this node as removed
   * (PeerAuthenticator.refusal). A removed node left the metadata group before the entry that
   * marks it removed, so its own metadata says 'removing' for good; its peers tell it (whose
   * word is enough: removalTold). It then stops its groups and links, fails its consumers, and
   * refuses clients UNAVAILABLE / NODE_REMOVED (they go to another node); ClusterStatus still
   * answers.
   */
  toldRemoved(peer: NodeId): void {
    if (this.stopping || this.removedFromCluster || peer === this.nodeId) return;
    this.removedBy.add(peer);
    const others = this.directory.ids().filter((id) => id !== this.nodeId).length;
    if (!removalTold(this.meta.nodes.get(this.nodeId)?.state, this.removedBy.size, others)) return;
    this.removedFromCluster = true;
    this.logger.error(
      { peers: [...this.removedBy] },
      `node ${this.nodeId} was removed from the cluster: it takes no part any more and serves no client; stop it and delete its data directory (a node that joins again needs a new id)`,
    );
    this.ticker?.cancel();
    this.ticker = null;
    this.queues.stopAll('this node was removed from the cluster');
    this.metaGroup.stop('this node was removed from the cluster');
    this.consumers.endAll(null, unavailable(Reason.NODE_REMOVED, `node ${this.nodeId} was removed from the cluster; use another node`));
    this.link.close();
    for (const handler of this.removedHandlers.splice(0)) handler();
  }

  /** Whether this node learned that it was removed from the cluster (see toldRemoved). */
  get removed(): boolean {
    return this.removedFromCluster;
  }

  /** `handler` runs once this node learns that it was removed (see toldRemoved). */
  onRemoved(handler: () => void): void {
    if (this.removedFromCluster) handler();
    else this.removedHandlers.push(handler);
  }

  fatal(error: unknown): void {
    if (this.stopping) return;
    this.logger.fatal({ err: error }, 'unrecoverable error; stopping the node (restart recovers from the WAL)');
    this.onFatal(error);
  }

  /** Whether publishes are refused for want of memory (see memory-alarm.ts). */
  get memoryAlarm(): boolean {
    return this.memory?.active ?? false;
  }

  private async checkDisk(): Promise<void> {
    try {
      const stats = await statfs(this.config.dataDir);
      const free = Number(stats.bavail) * Number(stats.bsize);
      this.metrics.diskFreeBytes.set(free);
      const alarm = free < this.config.diskFreeLimitBytes;
      if (alarm !== this.diskAlarm) {
        this.diskAlarm = alarm;
        this.metrics.diskAlarm.set(alarm ? 1 : 0);
        if (alarm) this.logger.warn({ free, limit: this.config.diskFreeLimitBytes }, 'disk alarm: publishes are refused until space is freed');
        else this.logger.info({ free }, 'disk alarm cleared');
      }
    } catch (error) {
      this.logger.warn({ err: error }, 'cannot read free disk space');
    }
  }

  private onMetaSoftState(state: SoftState): void {
    if (state.role === 'leader') this.metrics.leaderChanges.inc();
    if (state.leaderId !== null && this.metaLeaderHandlers.length > 0) {
      const handlers = this.metaLeaderHandlers;
      this.metaLeaderHandlers = [];
      for (const h of handlers) h();
    }
  }

  /** Waits until the metadata group has a leader (startup), bounded. */
  waitForMetaLeader(timeoutMs: number): Promise<boolean> {
    if (this.metaGroup.leaderId !== null) return Promise.resolve(true);
    return new Promise((resolve) => {
      const timer = this.env.after(timeoutMs, () => resolve(this.metaGroup.leaderId !== null));
      this.metaLeaderHandlers.push(() => {
        timer.cancel();
        resolve(true);
      });
    });
  }

  // ------------------------------------------------------------------------------------
  // For the API layer: proposals go through `router`, consumers attach to `consumers`.

  newConsumerId(): string {
    return `${this.nodeId}/${this.env.uniqueId()}`;
  }

  // ------------------------------------------------------------------------------------
  // Shutdown

  /** Hands off leadership, then stops. */
  async shutdown(): Promise<void> {
    if (this.stopping) return;
    const led = [this.metaGroup as RaftGroup<unknown>, ...[...this.queues.all()].map((q) => q.group as RaftGroup<unknown>)].filter((g) => g.isLeader);
    for (const group of led) {
      const target = this.directory.ids().find((id) => id !== this.nodeId && this.link.isConnected(id) && group.status().progress.has(id));
      if (target !== undefined) group.transferLeadership(target);
    }
    if (led.length > 0) {
      const until = this.env.now() + 2000;
      while (this.env.now() < until && led.some((g) => g.isLeader)) await sleep(this.env, 20);
    }
    await this.stop();
  }

  async stop(): Promise<void> {
    if (this.stopping) return;
    this.stopping = true;
    this.ticker?.cancel();
    this.diskTimer?.cancel();
    this.queues.stopAll('the node is shutting down');
    this.metaGroup.stop('the node is shutting down');
    this.consumers.endAll(null, unavailable(Reason.SHUTTING_DOWN, 'the node is shutting down'));
    this.link.close();
    if (this.metricsServer !== null) this.metricsServer.close();
    await this.storage.close();
    await this.messageStore.close();
  }
}

/** Whether `groupId` names a queue group created by a metadata entry after `appliedIndex` ("q/<index>/<name>"). */
function createdAfter(groupId: string, appliedIndex: number): boolean {
  if (!groupId.startsWith('q/')) return false;
  const index = Number(groupId.slice(2, groupId.indexOf('/', 2)));
  return Number.isSafeInteger(index) && index > appliedIndex;
}
