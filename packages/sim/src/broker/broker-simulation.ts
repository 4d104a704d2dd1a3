/**
 * The broker simulated: three nodes running the code a node runs (BrokerNode: the metadata
 * group, queue replicas with the real queue machine, proposal routing and forwarding, the
 * effect runner, dead-letter and move workers, leader duties) on simulated time, a fake disk
 * and a faulty network, with clients that publish with confirms, consume, ack, reject and
 * let messages expire, and move the dead-letter queue's messages to a third queue, and
 * publish updates (and tombstones) of a few keys to a compacting queue (spec 9). After the
 * faults heal and the queues drain, it checks what the spec promises at the queue level: no
 * confirmed message disappears (each is acked from its queue, or dead-lettered to the
 * dead-letter queue with its death record and acked there; on the compacting queue, a
 * message may be replaced by a newer one of its key, but the last confirmed one of each key
 * is acked), and every replica of a queue holds the same state.
 */
import { BrokerNode, DEFAULTS, NodeMetrics, type GroupMessage, type LocalQueue, type NodeConfig, type OutgoingDelivery } from '@quorumq/server/core';
import { quorumq } from '@quorumq/proto';
import { stateHash, type Command } from '@quorumq/queue';
import { createRandom, type NodeId, type PlantedBug, type Random } from '@quorumq/raft';
import { MessageStore, NodeStorage } from '@quorumq/storage';
import { pino } from 'pino';

import { SafetyChecker, SafetyViolation, type Property } from '../checker.js';
import { FakeDisk, STORAGE_FAULTS } from '../fake-disk.js';
import { FirstFailure, TraceHash, violationOf } from '../outcome.js';
import { chance, HEALTHY_NETWORK, SimNetwork, type NetworkFaults } from '../network.js';
import { Scheduler } from '../scheduler.js';
import { simEnv } from '../sim-env.js';
import { SimPeerLink, type SimCluster } from './sim-peer-link.js';

import pb = quorumq.v1;

/** Bugs planted to prove the broker simulation catches them. */
export type BrokerSimBug = PlantedBug | 'ackBeforeFsync' | 'confirmDeadLetterBeforeTarget' | 'confirmMoveBeforeTarget' | 'snapshotBeforeBodiesDurable' | 'installWithoutBodies';
export const BROKER_SIM_BUGS: readonly BrokerSimBug[] = [
  'commitPreviousTermByCount',
  'voteWithoutLogCheck',
  'ackBeforeFsync',
  'confirmDeadLetterBeforeTarget',
  'confirmMoveBeforeTarget',
  'snapshotBeforeBodiesDurable',
  'installWithoutBodies',
];
const NODE_BUGS: ReadonlySet<BrokerSimBug> = new Set(['ackBeforeFsync', 'confirmDeadLetterBeforeTarget', 'confirmMoveBeforeTarget', 'snapshotBeforeBodiesDurable', 'installWithoutBodies']);

export interface BrokerSimOptions {
  readonly seed: number;
  readonly bugs?: ReadonlySet<BrokerSimBug>;
  readonly faultPhaseMs?: number;
  readonly livenessPhaseMs?: number;
  readonly trace?: (line: string) => void;
  /** Runs every node's periodic idle check (BrokerNode.checkIdle) on the simulated clock; on by default. */
  readonly idleChecks?: boolean;
}

export interface BrokerSimResult {
  readonly seed: number;
  readonly ok: boolean;
  readonly violation: { readonly property: Property; readonly message: string } | null;
  readonly traceHash: string;
  readonly events: number;
  readonly confirmed: number;
  readonly acked: number;
  readonly deadLettered: number;
  readonly crashes: number;
  readonly storageFaults: number;
  readonly partitions: number;
  readonly moves: number;
  readonly moved: number;
  /** Messages of the compacting queue replaced by a newer one of their key (its leader's count). */
  readonly compacted: number;
  readonly simulatedMs: number;
  /** The membership flow of this seed: the founder replaced by the spare node, or null. */
  readonly replaced: NodeId | null;
}

/** The nodes that found the cluster. */
const NODES: readonly NodeId[] = ['n1', 'n2', 'n3'];
/** The node that joins during the fault phase (membership profile) and replaces a founder. */
const SPARE: NodeId = 'n4';
const WORK = 'work';
const DEAD = 'dead';
const DLX = 'dlx';
/** Where a mover client moves the dead-letter queue's messages (spec 8). */
const MOVED = 'moved';
/** A compacting queue (spec 9): the last value per `entity` header. */
const LATEST = 'latest';
const LATEST_KEYS = 4;
const QUEUES: readonly string[] = [WORK, DEAD, MOVED, LATEST];
const TICK_MS = 10;
const SETTLE_ROUNDS = 8;
const EVENTS_MAX = 3_000_000;
const PUBLISH_EVERY_MS = 6;
const PUBLISHES_IN_FLIGHT_MAX = 16;
/** Simulated time clients publish at least, from the end of the setup. */
const PUBLISH_MIN_MS = 1000;
/** Simulated time clients publish at least to the healed cluster. */
const HEALED_PUBLISH_MS = 300;
/** Publishing goes on after the heal until this many messages were confirmed. */
const CONFIRMED_MIN = 20;
/** A client gives up on a call after this (as a gRPC deadline), and tries again. */
const CALL_DEADLINE_MS = 3000;

interface Published {
  readonly id: number;
  readonly queue: string;
  /** On LATEST: its key (the `entity` header), and whether it is a tombstone. */
  readonly key: string | null;
  readonly tombstone: boolean;
  /** Its per-message TTL, if any: it may then expire where no dead-letter exchange catches it. */
  expirationMs: number | null;
  confirmed: boolean;
  inFlight: boolean;
}

/** What the clients learned about one message. */
interface Fate {
  /** Acked from `work` or `dead` (the ack committed), or acked with an unknown outcome. */
  settled: boolean;
  /** Delivered from the dead-letter queue. */
  deadLettered: boolean;
}

interface SimConsumer {
  readonly queue: string;
  node: NodeId | null;
  id: string | null;
  /** Bumped on each (re)subscribe: a delivery or settle of an older one is ignored. */
  generation: number;
}

export class BrokerSimulation implements SimCluster {
  readonly scheduler = new Scheduler();
  readonly random: Random;
  readonly network: SimNetwork;
  private readonly disk: FakeDisk;
  private readonly bugs: ReadonlySet<BrokerSimBug>;
  private readonly nodes = new Map<NodeId, BrokerNode | 'down' | 'starting'>();
  private readonly incarnation = new Map<NodeId, number>();
  private readonly checkers = new Map<string, SafetyChecker>();
  private readonly published = new Map<number, Published>();
  /** The last message published to LATEST per key: once confirmed, it must be acked there. */
  private readonly lastOfKey = new Map<string, Published>();
  private compacted = 0;
  private readonly fates = new Map<number, Fate>();
  private readonly consumers: SimConsumer[] = [];
  /** Acks sent to each node and not answered: if it crashes, their outcome is unknown. */
  private readonly acksInFlight = new Map<NodeId, Set<Fate>>();
  private readonly profile: {
    readonly network: NetworkFaults;
    readonly crashEveryMs: number;
    readonly partitionEveryMs: number;
    readonly tornWriteRate: number;
    /** A node joins, takes over a founder's replicas and the founder leaves (docs/operations.md, "Membership"). */
    readonly membership: boolean;
    /** The one node whose WAL and snapshot files may be damaged while it is down (see StorageFault), and how often. */
    readonly storageVictim: NodeId;
    readonly storageFaultRate: number;
  };
  /** The nodes started so far: the founders, and the spare once it joined. */
  private readonly started: NodeId[] = [...NODES];
  /** The membership flow's next step (see scheduleMembership). */
  private membershipPhase: 'none' | 'adding' | 'replacing' | 'rebalancing' | 'done' = 'none';
  /** The founder the spare replaces. */
  private leaving: NodeId | null = null;
  private readonly outcome = new FirstFailure();
  private setupDone = false;
  private setupAt = 0;
  private healed = false;
  private healedAt = 0;
  private publishing = true;
  private nextMessage = 1;
  private confirmedCount = 0;
  private events = 0;
  private crashes = 0;
  private storageFaults = 0;
  private moves = 0;
  private movedDeliveries = 0;
  private partitions = 0;
  private readonly trace = new TraceHash();

  constructor(private readonly options: BrokerSimOptions) {
    this.random = createRandom(options.seed);
    this.bugs = options.bugs ?? new Set();
    const pick = <T>(values: readonly T[]): T => values[this.random.nextInt(values.length)]!;
    this.profile = {
      network: { dropRate: pick([0, 0.01, 0.05]), duplicateRate: pick([0, 0.02]), latencyMs: 1 + this.random.nextInt(3), jitterMs: pick([0, 3, 10]) },
      crashEveryMs: pick([250, 600, 1500, 1_000_000]),
      partitionEveryMs: pick([400, 1200, 1_000_000]),
      tornWriteRate: pick([0, 0.5]),
      membership: pick([false, true]),
      storageVictim: pick(NODES),
      storageFaultRate: pick([0, 0.5]),
    };
    this.disk = new FakeDisk(this.scheduler, this.random);
    this.network = new SimNetwork(this.scheduler, this.random, (envelope) => this.deliver(envelope), (line) => this.traceLine(line));
    this.network.faults = this.profile.network;
  }

  /**
   * A message reaches its node as a real peer stream's would: the stream tells the sender's
   * peer address, by which a node that does not know the sender yet admits it
   * (BrokerNode.introducePeer, as the peer authenticator does); one it refuses is dropped,
   * and a sender its registry names as removed is told so (PeerAuthenticator.refusal), as
   * the refused stream tells it (BrokerNode.toldRemoved).
   */
  private deliver(envelope: GroupMessage): void {
    const node = this.live(envelope.message.to);
    if (node === null) return;
    const from = envelope.message.from;
    if (!node.introducePeer(from, `${from}:0`)) {
      if (node.directory.isRemoved(from)) this.live(from)?.toldRemoved(node.nodeId);
      return;
    }
    node.receive(envelope);
  }

  faults(): NetworkFaults {
    return this.network.faults;
  }

  live(id: NodeId): BrokerNode | null {
    const node = this.nodes.get(id);
    return node === undefined || node === 'down' || node === 'starting' ? null : node;
  }

  async run(): Promise<BrokerSimResult> {
    const faultPhaseMs = this.options.faultPhaseMs ?? 3000;
    const livenessPhaseMs = this.options.livenessPhaseMs ?? 8000;
    for (const id of NODES) this.startNode(id);
    this.scheduler.after(50, 'setup', () => void this.setup());
    this.schedulePublishes();
    for (const queue of [WORK, WORK, DEAD, MOVED, LATEST]) this.consumers.push({ queue, node: null, id: null, generation: 0 });
    this.scheduleFaults(faultPhaseMs);
    this.scheduleMembership(faultPhaseMs);
    this.scheduler.at(faultPhaseMs, 'heal', () => this.heal());
    const deadline = faultPhaseMs + livenessPhaseMs;
    if (this.options.idleChecks !== false) this.scheduleIdleChecks(deadline);
    let converged = false;
    while (this.outcome.failure === null) {
      const event = this.scheduler.pop();
      if (event === undefined || event.time > deadline) break;
      if (++this.events > EVENTS_MAX) {
        this.outcome.failure = new SafetyViolation('Liveness', `more than ${EVENTS_MAX} events by ${event.time} ms`);
        break;
      }
      this.traceLine(`${event.time} ${event.label}`);
      event.run();
      for (let round = 0; round < SETTLE_ROUNDS; round++) await null;
      if (!this.publishing && this.outcome.failure === null && this.events % 32 === 0 && this.hasConverged()) {
        converged = true;
        break;
      }
    }
    if (this.outcome.failure === null && !converged) this.outcome.failure = new SafetyViolation('Liveness', `the broker did not drain and converge within ${livenessPhaseMs} ms of healing: ${this.describe()}`);
    if (this.outcome.failure === null) this.outcome.guard(() => this.checkFinal());
    return this.result();
  }

  // ------------------------------------------------------------ nodes

  private config(id: NodeId): NodeConfig {
    return {
      ...DEFAULTS,
      nodeId: id,
      listen: `${id}:0`,
      advertise: `${id}:0`,
      // The spare knows the founders and itself, and joins; the founders learn of it from the metadata.
      peers: new Map((id === SPARE ? [...NODES, SPARE] : NODES).map((n) => [n, `${n}:0`])),
      join: id === SPARE,
      dataDir: `/${id}`,
      metricsListen: null,
      tickMs: TICK_MS,
      electionTicks: 10,
      heartbeatTicks: 1,
      snapshotInterval: 32,
      snapshotLogBytesMin: 1024,
      requestTimeoutMs: 1500,
      clusterSecret: 'sim',
      testOnlyConfirmBeforeCommit: false,
    };
  }

  private startNode(id: NodeId): void {
    this.nodes.set(id, 'starting');
    const incarnation = (this.incarnation.get(id) ?? 0) + 1;
    this.incarnation.set(id, incarnation);
    const alive = (): boolean => this.incarnation.get(id) === incarnation && this.nodes.get(id) !== 'down';
    const config = this.config(id);
    const env = simEnv(this.scheduler, id, createRandom(this.random.nextInt(0x7fffffff)), alive);
    // A new store's id, from the node and its incarnation (no draw from the simulation's randomness).
    const storeId = Buffer.from(`${id}:${incarnation}`).toString('hex').padStart(32, '0').slice(-32);
    Promise.all([
      NodeStorage.open({
        dir: `/${id}`,
        fs: this.disk.fsOf(id),
        kv: this.disk.kvOf(id),
        snapshotInterval: config.snapshotInterval,
        segmentBytesMax: 64 * 1024,
        scheduleFlush: (flush) => this.scheduler.after(0, `walFlush ${id}`, () => alive() && flush()),
        now: () => this.scheduler.now,
        logger: { warn: () => {} },
      }),
      // Small segments and cache, so that compaction, reclaiming and disk reads happen.
      MessageStore.open({
        dir: `/${id}/messages`,
        fs: this.disk.fsOf(id),
        segmentBytes: 16 * 1024,
        readAheadBytes: 4096,
        cacheBytes: 8 * 1024,
        scheduleFlush: (run) => this.scheduler.after(0, `storeFlush ${id}`, () => alive() && run()),
        logger: { warn: () => {} },
        newStoreId: () => storeId,
      }),
    ]).then(
      ([storage, messageStore]) => {
        if (!alive()) return;
        const node = BrokerNode.create({
          config,
          env,
          storage,
          messageStore,
          link: new SimPeerLink(id, this, alive, id === SPARE ? [...NODES, SPARE] : NODES),
          logger: pino({ level: process.env.SIM_LOG_LEVEL ?? 'silent', base: { node: id } }),
          metrics: new NodeMetrics(100, false),
          onFatal: (error) => this.outcome.fail(error),
          groupSetup: (groupId) => ({
            tuning: { appendEntriesMax: 16, inflightAppendsMax: 4, snapshotChunkBytes: 4096, retainedEntriesAfterSnapshot: 8 },
            observer: {
              appending: (entries, termBefore) => this.outcome.guard(() => this.checker(groupId).observeAppended(id, entries, termBefore)),
              applying: (entry) => this.outcome.guard(() => this.checker(groupId).observeApplied(id, entry)),
            },
            testOnlyBugs: {
              raft: new Set([...this.bugs].filter((b): b is PlantedBug => !NODE_BUGS.has(b))),
              ackBeforeFsync: this.bugs.has('ackBeforeFsync'),
            },
          }),
          testOnlyBugs: {
            deadLetter: { confirmBeforeTargets: this.bugs.has('confirmDeadLetterBeforeTarget') },
            move: { confirmBeforeTarget: this.bugs.has('confirmMoveBeforeTarget') },
            replica: { snapshotBeforeBodiesDurable: this.bugs.has('snapshotBeforeBodiesDurable'), installWithoutBodies: this.bugs.has('installWithoutBodies') },
          },
        });
        this.nodes.set(id, node);
      },
      (error: unknown) => this.outcome.fail(error),
    );
  }

  private checker(groupId: string): SafetyChecker {
    let checker = this.checkers.get(groupId);
    if (checker === undefined) {
      checker = new SafetyChecker();
      this.checkers.set(groupId, checker);
    }
    return checker;
  }

  /** Damages the WAL or snapshot files of a node that is down: its storage must repair from its peers. */
  private damageStorage(id: NodeId): void {
    const fault = STORAGE_FAULTS[this.random.nextInt(STORAGE_FAULTS.length)]!;
    const done = this.disk.damage(id, fault);
    if (done === null) return;
    this.storageFaults++;
    this.traceLine(`storage fault ${id} ${fault}: ${done}`);
  }

  private crash(id: NodeId): void {
    if (this.nodes.get(id) === 'down') return;
    this.nodes.set(id, 'down');
    const loss = this.disk.crash(id, this.profile.tornWriteRate);
    this.crashes++;
    this.traceLine(`crash ${id} lost=${loss.lostBytes} torn=${loss.torn}`);
    // Its clients' streams broke: they connect again elsewhere. An ack it had not answered
    // may have committed (the message is then gone): its outcome is unknown.
    for (const fate of this.acksInFlight.get(id) ?? []) fate.settled = true;
    this.acksInFlight.delete(id);
    for (const consumer of this.consumers) if (consumer.node === id) this.resubscribeLater(consumer);
  }

  private restart(id: NodeId): void {
    if (this.nodes.get(id) !== 'down') return;
    this.traceLine(`restart ${id}`);
    this.startNode(id);
  }

  private randomLive(except: NodeId | null = null): BrokerNode | null {
    const live = this.started.filter((id) => id !== except).map((id) => this.live(id)).filter((n): n is BrokerNode => n !== null);
    return live.length === 0 ? null : live[this.random.nextInt(live.length)]!;
  }

  // ------------------------------------------------------------ clients

  /** Declares the topology through any node, until it is all in place. */
  private async setup(): Promise<void> {
    const node = this.randomLive();
    if (node === null) {
      this.scheduler.after(100, 'setup', () => void this.setup());
      return;
    }
    try {
      const members = [...NODES];
      const steps = [
        { type: 'topology' as const, command: { type: 'declareExchange' as const, name: DLX, exchangeType: 'direct' as const } },
        { type: 'declareQueue' as const, name: DEAD, args: {}, passive: false, members, createdAt: 0 },
        { type: 'declareQueue' as const, name: WORK, args: { deadLetterExchange: DLX, deadLetterRoutingKey: DEAD }, passive: false, members, createdAt: 0 },
        { type: 'topology' as const, command: { type: 'bind' as const, source: DLX, destination: { kind: 'queue' as const, name: DEAD }, bindingKey: DEAD } },
        { type: 'declareQueue' as const, name: MOVED, args: {}, passive: false, members, createdAt: 0 },
        { type: 'declareQueue' as const, name: LATEST, args: { compactionKey: 'entity' }, passive: false, members, createdAt: 0 },
      ];
      for (const step of steps) {
        const reply = await this.call(node.router.proposeMeta(step));
        if (!reply.ok) throw new Error(`setup ${step.type}: ${reply.message}`);
      }
      this.setupDone = true;
      this.setupAt = this.scheduler.now;
      this.traceLine('setup done');
      // The dead-letter queue's consumer starts at the heal: until then its messages wait
      // there, and the mover moves them. So does the compacting queue's: until then its keys'
      // updates replace each other.
      for (const consumer of this.consumers) if (!startsAtHeal(consumer.queue) || this.healed) this.subscribe(consumer);
      this.scheduleMoves();
    } catch (error) {
      this.traceLine(`setup failed via ${node.nodeId}: ${error instanceof Error ? error.message : String(error)}`);
      this.scheduler.after(100, 'setup', () => void this.setup());
    }
  }

  private schedulePublishes(): void {
    this.scheduler.after(PUBLISH_EVERY_MS, 'publish', () => {
      // Publishing ends after the heal, once it ran PUBLISH_MIN_MS after the setup and
      // HEALED_PUBLISH_MS on the healed cluster.
      const now = this.scheduler.now;
      if (this.healed && this.setupDone && now >= this.setupAt + PUBLISH_MIN_MS && now >= this.healedAt + HEALED_PUBLISH_MS && this.confirmedCount >= CONFIRMED_MIN) {
        this.publishing = false;
      }
      if (!this.publishing) return;
      if (this.setupDone && [...this.published.values()].filter((p) => p.inFlight).length < PUBLISHES_IN_FLIGHT_MAX) {
        const id = this.nextMessage++;
        // A third go to LATEST: an update of a key whose last publish was confirmed (so the log
        // holds a key's confirmed messages in publish order), now and then a tombstone.
        const key = `e${this.random.nextInt(LATEST_KEYS)}`;
        const previous = this.lastOfKey.get(key);
        const keyed = chance(this.random, 0.3) && (previous === undefined || previous.confirmed);
        const message: Published = keyed
          ? { id, queue: LATEST, key, tombstone: chance(this.random, 0.1), expirationMs: null, confirmed: false, inFlight: false }
          : { id, queue: WORK, key: null, tombstone: false, expirationMs: chance(this.random, 0.15) ? 20 + this.random.nextInt(200) : null, confirmed: false, inFlight: false };
        this.published.set(id, message);
        if (keyed) this.lastOfKey.set(key, message);
        this.publish(message, message.expirationMs);
      }
      this.schedulePublishes();
    });
  }

  /** Publishes with confirms, as the SDK does: re-sent (deduplicated by producer id) until confirmed. */
  private publish(message: Published, expirationMs: number | null): void {
    const node = this.randomLive();
    const retry = (): void => {
      message.inFlight = false;
      if (this.publishing) this.scheduler.after(20 + this.random.nextInt(80), `republish m${message.id}`, () => this.publish(message, expirationMs));
    };
    if (node === null) return retry();
    message.inFlight = true;
    const body = new TextEncoder().encode(`m${message.id}`);
    const command: Command = {
      type: 'enqueue',
      sizeBytes: body.byteLength,
      exchange: '',
      routingKeys: [message.queue],
      producerId: 'publisher',
      sequence: message.id,
      ...(expirationMs !== null ? { expirationMs } : {}),
    };
    // The router reads the key (and the tombstone flag) for LATEST, as for a client's publish.
    const stored: pb.Message.$Properties = {
      body,
      routingKey: message.queue,
      ...(expirationMs !== null ? { properties: { expirationMs } } : {}),
      ...(message.key !== null ? { headers: { entity: { stringValue: message.key } } } : {}),
      ...(message.tombstone ? { tombstone: true } : {}),
    };
    this.call(node.router.proposeQueue(message.queue, command, stored)).then(
      (reply) => {
        if (reply.type === 'enqueued' || reply.type === 'duplicate') {
          if (!message.confirmed) this.confirmedCount++;
          message.confirmed = true;
          message.inFlight = false;
          return;
        }
        retry();
      },
      () => retry(),
    );
  }

  /** A client's call: fails after the client's deadline (its node may have crashed, the reply never comes). */
  private call<T>(request: Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      let settled = false;
      this.scheduler.after(CALL_DEADLINE_MS, 'client deadline', () => {
        if (settled) return;
        settled = true;
        reject(new Error('DEADLINE_EXCEEDED'));
      });
      request.then(
        (value) => {
          if (settled) return;
          settled = true;
          resolve(value);
        },
        (error: unknown) => {
          if (settled) return;
          settled = true;
          reject(error);
        },
      );
    });
  }

  /**
   * Now and then an operator moves what the dead-letter queue holds to another queue
   * (spec 8), through its leader: the move worker publishes each message and confirms it.
   */
  private scheduleMoves(): void {
    this.scheduler.after(150 + this.random.nextInt(300), 'move', () => {
      if (!this.publishing) return;
      const leader = this.leaderOf(DEAD);
      if (leader !== null) {
        this.moves++;
        const moveId = `move-${this.moves}`;
        this.traceLine(`client moveStart ${moveId} on ${leader.node.nodeId}`);
        this.call(leader.node.router.proposeLocal(leader.local, { type: 'moveStart', moveId, exchange: '', routingKey: MOVED, window: 1 + this.random.nextInt(4) })).catch(() => {});
      }
      this.scheduleMoves();
    });
  }

  private leaderOf(queue: string): { node: BrokerNode; local: LocalQueue } | null {
    for (const id of this.started) {
      const node = this.live(id);
      const local = node?.queues.get(queue);
      if (node !== null && node !== undefined && local !== undefined && local.group.isLeader) return { node, local };
    }
    return null;
  }

  private resubscribeLater(consumer: SimConsumer): void {
    consumer.node = null;
    consumer.id = null;
    consumer.generation++;
    this.scheduler.after(30 + this.random.nextInt(50), `resubscribe ${consumer.queue}`, () => this.subscribe(consumer));
  }

  /** Attaches the consumer to its queue's leader, as a consume stream does. */
  private subscribe(consumer: SimConsumer): void {
    if (consumer.id !== null) return;
    const leader = this.leaderOf(consumer.queue);
    if (leader === null) {
      this.resubscribeLater(consumer);
      return;
    }
    const { node, local } = leader;
    const generation = ++consumer.generation;
    const id = node.newConsumerId();
    consumer.node = node.nodeId;
    consumer.id = id;
    const current = (): boolean => consumer.generation === generation && this.live(node.nodeId) === node;
    node.consumers.attach({
      id,
      queue: consumer.queue,
      tag: id,
      deliver: (delivery) => {
        if (current()) this.scheduler.after(1 + this.random.nextInt(15), `settle ${consumer.queue}`, () => current() && this.settle(consumer, node, local, id, delivery));
      },
      event: () => {},
      end: () => {
        if (consumer.generation === generation) this.resubscribeLater(consumer);
      },
    });
    node.router.proposeLocal(local, { type: 'subscribe', consumerId: id, prefetch: 8, priority: 0 }).then(
      (result) => {
        if (result.reply.type === 'error' && consumer.generation === generation) this.resubscribeLater(consumer);
      },
      () => {
        if (consumer.generation !== generation) return;
        node.consumers.detach(id);
        this.resubscribeLater(consumer);
      },
    );
  }

  private settle(consumer: SimConsumer, node: BrokerNode, local: LocalQueue, consumerId: string, delivery: OutgoingDelivery): void {
    const message = delivery.encodedMessage !== undefined ? pb.Message.decode(delivery.encodedMessage) : pb.Message.fromObject(delivery.message ?? {});
    const text = new TextDecoder().decode(message.body);
    const id = Number(text.slice(1));
    if (!/^m[0-9]+$/.test(text)) {
      this.outcome.fail(new SafetyViolation('ConfirmedNotLost', `a delivery from ${consumer.queue} lost its body (${JSON.stringify(text)}; deaths ${JSON.stringify(message.deaths)})`));
      return;
    }
    const fate = this.fates.get(id) ?? { settled: false, deadLettered: false };
    this.fates.set(id, fate);
    if (consumer.queue === MOVED) this.movedDeliveries++;
    // Only dead-lettered messages are moved, and a move keeps their death records (spec 8).
    if (consumer.queue === DEAD || consumer.queue === MOVED) {
      fate.deadLettered = true;
      const death = message.deaths[0];
      if (death === undefined || death.queue !== WORK || !['rejected', 'expired', 'delivery_limit'].includes(death.reason ?? '')) {
        this.outcome.fail(new SafetyViolation('DeathRecorded', `m${id} reached ${consumer.queue} with death records ${JSON.stringify(message.deaths)}`));
        return;
      }
    }
    const roll = this.random.nextInt(10);
    // From the work queue: mostly acked, some rejected (dead-lettered), some requeued; from
    // the compacting queue some requeued (replaced then, if a newer one of the key came).
    const command: Command =
      consumer.queue === WORK && roll === 0
        ? { type: 'discard', consumerId, deliveryTag: delivery.deliveryTag ?? 0 }
        : (consumer.queue === WORK || consumer.queue === LATEST) && roll === 1
          ? { type: 'return', consumerId, deliveryTag: delivery.deliveryTag ?? 0 }
          : { type: 'ack', consumerId, deliveryTag: delivery.deliveryTag ?? 0 };
    this.traceLine(`client ${command.type} m${id} from ${consumer.queue} tag ${delivery.deliveryTag} on ${node.nodeId}`);
    const inFlight = this.acksInFlight.get(node.nodeId) ?? new Set<Fate>();
    this.acksInFlight.set(node.nodeId, inFlight);
    if (command.type === 'ack') inFlight.add(fate);
    node.router.proposeLocal(local, command).then(
      (result) => {
        inFlight.delete(fate);
        this.traceLine(`client ${command.type} m${id} from ${consumer.queue}: ${result.reply.type}${result.reply.type === 'error' ? ` ${result.reply.message}` : ''}`);
        if (command.type === 'ack' && result.reply.type !== 'error') fate.settled = true;
      },
      (error: unknown) => {
        inFlight.delete(fate);
        this.traceLine(`client ${command.type} m${id} from ${consumer.queue} failed: ${String(error)}`);
        // An ack whose outcome is unknown may have committed: the message may be gone.
        if (command.type === 'ack' && error instanceof Error && /OUTCOME_UNKNOWN|unknown/.test(`${(error as { reason?: string }).reason ?? ''} ${error.message}`)) fate.settled = true;
      },
    );
  }

  /**
   * Every live node's periodic idle check (BrokerNode.checkIdle, every 2 s on a real node):
   * an idle replica snapshots its log from outside the Ready loop, at times the faults and
   * the workload do not choose. Here every 100-400 ms, so that runs see many.
   */
  private scheduleIdleChecks(deadline: number): void {
    const next = (): void => {
      const delay = 100 + this.random.nextInt(300);
      if (this.scheduler.now + delay >= deadline) return;
      this.scheduler.after(delay, 'idle checks', () => {
        for (const id of this.started) this.outcome.guard(() => this.live(id)?.checkIdle());
        next();
      });
    };
    next();
  }

  // ------------------------------------------------------------ faults

  private scheduleFaults(faultPhaseMs: number): void {
    const repeat = (everyMs: number, label: string, action: () => void): void => {
      const delay = Math.max(1, Math.floor(everyMs / 2) + this.random.nextInt(everyMs));
      if (this.scheduler.now + delay >= faultPhaseMs) return;
      this.scheduler.after(delay, label, () => {
        action();
        repeat(everyMs, label, action);
      });
    };
    repeat(this.profile.crashEveryMs, 'crash', () => {
      const leader = this.leaderOf(WORK)?.node.nodeId;
      const id = leader !== undefined && chance(this.random, 0.6) ? leader : this.started[this.random.nextInt(this.started.length)]!;
      this.crash(id);
      if (id === this.profile.storageVictim && chance(this.random, this.profile.storageFaultRate)) this.damageStorage(id);
      this.scheduler.after(50 + this.random.nextInt(400), `restart ${id}`, () => this.restart(id));
    });
    repeat(this.profile.partitionEveryMs, 'partition', () => {
      this.network.heal();
      if (this.random.nextInt(3) === 0) return;
      this.partitions++;
      const victim = this.started[this.random.nextInt(this.started.length)]!;
      for (const other of this.started) {
        if (other === victim) continue;
        this.network.cut(victim, other);
        this.network.cut(other, victim);
      }
      this.traceLine(`partition ${this.network.describeCuts()}`);
    });
  }

  private heal(): void {
    this.healed = true;
    this.healedAt = this.scheduler.now;
    this.network.heal();
    this.network.faults = HEALTHY_NETWORK;
    for (const id of this.started) this.restart(id);
    if (this.setupDone) for (const consumer of this.consumers) if (startsAtHeal(consumer.queue) && consumer.id === null) this.subscribe(consumer);
    this.traceLine('heal');
  }

  // ------------------------------------------------------------ checks

  /** Nothing in flight, both queues empty on their leaders, every replica caught up. */
  private hasConverged(): boolean {
    if (!this.setupDone) return false;
    if ([...this.published.values()].some((p) => p.inFlight)) return false;
    // The membership flow finished: the founder left the cluster.
    if (this.profile.membership && this.membershipPhase !== 'done') return false;
    for (const queue of QUEUES) {
      const leader = this.leaderOf(queue);
      if (leader === null) return false;
      const state = leader.local.replica.state;
      if (state.messages.size > 0) return false;
      const status = leader.local.group.status();
      const definition = leader.node.meta.queues.get(queue);
      // The group's configuration is what the metadata says, and no replica is still retiring.
      if (definition === undefined || (definition.retiring ?? []).length > 0 || status.config.learners.length > 0) return false;
      if ([...status.config.voters].sort().join() !== [...definition.members].sort().join()) return false;
      if (this.leaving !== null && leader.node.meta.nodes.get(this.leaving)?.state !== 'removed') return false;
      // The removed node, when up, learnt it from its peers.
      if (this.leaving !== null && this.live(this.leaving)?.removed === false) return false;
      for (const id of definition.members) {
        const replica = this.live(id)?.queues.get(queue);
        if (replica === undefined || replica.group.appliedIndex !== status.commitIndex) return false;
      }
    }
    return true;
  }

  /** The queue's members, as a live node's metadata says (the founders before any change). */
  private membersOf(queue: string): readonly NodeId[] {
    return this.leaderOf(queue)?.node.meta.queues.get(queue)?.members ?? NODES;
  }

  /**
   * The membership profile: at a random time of the fault phase the spare node starts with
   * `join` and is added; then a random founder is removed with the spare as its replacement
   * (every queue's replica moves: a learner catches up, the founder's replica retires, the
   * founder leaves the metadata group), then the leaders rebalance. Each step is proposed
   * through a random live node until it is accepted, through the crashes and partitions.
   */
  private scheduleMembership(faultPhaseMs: number): void {
    if (!this.profile.membership) return;
    const at = 200 + this.random.nextInt(Math.max(1, Math.floor(faultPhaseMs / 2)));
    this.scheduler.after(at, 'join', () => {
      this.started.push(SPARE);
      this.traceLine(`start ${SPARE} (join)`);
      this.startNode(SPARE);
      this.membershipPhase = 'adding';
      this.leaving = NODES[this.random.nextInt(NODES.length)]!;
      this.membershipStep();
    });
  }

  private membershipStep(): void {
    const retry = (): void => void this.scheduler.after(50 + this.random.nextInt(100), 'membership', () => this.membershipStep());
    // As `quorumq cluster remove-node` does, the removal and what follows are asked of the
    // other nodes: the node removed stops hearing of the cluster (operations.md).
    const node = this.randomLive(this.membershipPhase === 'adding' ? null : this.leaving);
    if (node === null || !this.setupDone) {
      retry();
      return;
    }
    const seed = node.directory.seed(node.metaGroup.isMember);
    const seeded = seed === undefined ? {} : { seed };
    const phase = this.membershipPhase;
    const command =
      phase === 'adding'
        ? { type: 'addNode' as const, id: SPARE, peerAddress: `${SPARE}:0`, ...seeded }
        : phase === 'replacing'
          ? { type: 'removeNode' as const, id: this.leaving!, replacement: SPARE, ...seeded }
          : { type: 'rebalance' as const, nodes: node.directory.activeIds() };
    this.traceLine(`client ${command.type} via ${node.nodeId}`);
    this.call(node.router.proposeMeta(command)).then(
      (reply) => {
        // A repeated removal after the node left (an earlier attempt's outcome was unknown) is NOT_FOUND: done.
        const done = reply.ok || (phase === 'replacing' && !reply.ok && reply.code === 'NOT_FOUND');
        if (!done) {
          this.traceLine(`client ${command.type} refused: ${reply.ok ? '' : reply.message}`);
          retry();
          return;
        }
        this.membershipPhase = phase === 'adding' ? 'replacing' : phase === 'replacing' ? 'rebalancing' : 'done';
        if (this.membershipPhase !== 'done') this.scheduler.after(this.random.nextInt(300), 'membership', () => this.membershipStep());
      },
      (error: unknown) => {
        this.traceLine(`client ${command.type} failed: ${error instanceof Error ? error.message : String(error)}`);
        retry();
      },
    );
  }

  private checkFinal(): void {
    for (const queue of QUEUES) {
      const hashes = this.membersOf(queue).map((id) => {
        const replica = this.live(id)?.queues.get(queue);
        return replica === undefined ? `${id}:none` : stateHash(replica.replica.state);
      });
      if (new Set(hashes).size !== 1) throw new SafetyViolation('ReplicasAgree', `replicas of ${queue} differ after converging: ${hashes.join(' ')}`);
    }
    this.compacted = this.leaderOf(LATEST)?.local.replica.state.gone.compacted ?? 0;
    for (const message of this.published.values()) {
      // A message with a TTL keeps it when dead-lettered for another reason (spec 5), and
      // the dead-letter queue has no dead-letter exchange: it may expire there, dropped.
      if (!message.confirmed || message.expirationMs !== null) continue;
      // Spec 9: a message of the compacting queue may be replaced by a newer one of its key
      // (legitimately never delivered); the last one of each key is checked below.
      if (message.queue === LATEST) continue;
      const fate = this.fates.get(message.id);
      if (fate === undefined || !fate.settled) {
        throw new SafetyViolation(
          'ConfirmedNotLost',
          `confirmed message m${message.id} was never acked from ${WORK}, ${DEAD} or ${MOVED} (${fate === undefined ? 'never delivered' : fate.deadLettered ? 'dead-lettered, not acked' : 'delivered, not acked'}), and every queue is empty`,
        );
      }
    }
    // The last message of each key, once confirmed, is the key's latest in the log (nothing of
    // the key was in flight with it): nothing replaced it, so it was acked from LATEST.
    for (const [key, last] of this.lastOfKey) {
      if (!last.confirmed || this.fates.get(last.id)?.settled === true) continue;
      throw new SafetyViolation('ConfirmedNotLost', `the latest message of key ${key} on ${LATEST}, m${last.id}${last.tombstone ? ' (a tombstone)' : ''}, was confirmed but never acked, and every queue is empty`);
    }
  }

  private describe(): string {
    const queues = QUEUES.map((queue) => {
      const leader = this.leaderOf(queue);
      if (leader === null) return `${queue}: no leader`;
      const applied = this.started.map((id) => `${id} ${this.live(id)?.queues.get(queue)?.group.appliedIndex ?? '-'}`).join(', ');
      const definition = leader.node.meta.queues.get(queue);
      const config = leader.local.group.status().config;
      const members = `transferee ${leader.local.group.status().leadTransferee ?? '-'} quiet ${leader.local.group.isQuiet} members ${definition?.members.join(',') ?? '?'} retiring ${definition?.retiring?.join(',') ?? '-'} voters ${config.voters.join(',')} learners ${config.learners.join(',') || '-'}`;
      const st = leader.local.replica.state;
      const consumers = [...st.consumers.entries()].map(([id, c]) => `${id}(${c.unacked.size} unacked)`).join(' ');
      const attached = this.consumers.filter((c) => c.queue === queue).map((c) => `${c.node ?? '-'}/${c.id ?? '-'}`).join(' ');
      return `${queue}: ${leader.node.nodeId} leads, ${leader.local.replica.state.messages.size} messages [consumers ${consumers}; clients ${attached}], commit ${leader.local.group.status().commitIndex}, applied ${applied}, ${members}`;
    });
    const inFlight = [...this.published.values()].filter((p) => p.inFlight).length;
    const state = this.leaving === null ? '' : ` ${this.leaving} ${this.randomLive()?.meta.nodes.get(this.leaving)?.state ?? '?'}`;
    const membership = this.profile.membership ? `; membership ${this.membershipPhase} (${this.leaving ?? '-'} -> ${SPARE}${state})` : '';
    return `${queues.join('; ')}; ${inFlight} publishes in flight; setup ${this.setupDone ? 'done' : 'not done'}${membership}`;
  }

  private traceLine(line: string): void {
    this.trace.add(line);
    this.options.trace?.(line);
  }

  private result(): BrokerSimResult {
    const violation = violationOf(this.outcome.failure);
    const fates = [...this.fates.values()];
    return {
      seed: this.options.seed,
      ok: violation === null,
      violation,
      traceHash: this.trace.hex,
      events: this.events,
      confirmed: [...this.published.values()].filter((p) => p.confirmed).length,
      acked: fates.filter((f) => f.settled).length,
      deadLettered: fates.filter((f) => f.deadLettered).length,
      crashes: this.crashes,
      storageFaults: this.storageFaults,
      partitions: this.partitions,
      moves: this.moves,
      moved: this.movedDeliveries,
      compacted: this.compacted,
      simulatedMs: this.scheduler.now,
      replaced: this.profile.membership ? this.leaving : null,
    };
  }
}

/** Queues whose consumer subscribes only once the faults heal (see setup). */
function startsAtHeal(queue: string): boolean {
  return queue === DEAD || queue === LATEST;
}

export function runBrokerSeed(options: BrokerSimOptions): Promise<BrokerSimResult> {
  return new BrokerSimulation(options).run();
}
