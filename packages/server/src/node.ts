/**
 * One quorumq node: the node's storage (one WAL for every group), the metadata group, one
 * Raft group per queue it replicates, the peer transport, the timers that drive the pure
 * cores, and the leader-only execution of queue effects (deliveries, dead-letters, ticks,
 * deletes).
 */
import { randomUUID } from 'node:crypto';
import { statfs } from 'node:fs/promises';
import { join } from 'node:path';
import type { Server as HttpServer } from 'node:http';
import type { ServerDuplexStream } from '@grpc/grpc-js';
import { quorumq } from '@quorumq/proto';
import { leaderEffects, route, routeDeadLetter, TopologyError, type Command, type Deaths, type Effect, type Reply } from '@quorumq/queue';
import type { NodeId, SoftState } from '@quorumq/raft';
import { LevelKvStore, NodeStorage, NodeWalFs } from '@quorumq/storage';
import type { Logger } from 'pino';

import type { NodeConfig } from './config.js';
import { BrokerError, Status, invalidArgument, isServiceError, notFound, unavailable } from './errors.js';
import { headersFromWire } from './headers.js';
import { decodeJson, encodeJson } from './json-codec.js';
import { decodeMetaCommand, parseMetaCommand, type ParsedMetaCommand } from './meta-command.js';
import { MetaMachine, malformedCommand, type MetaCommand, type MetaReply, type QueueDefinition } from './meta-machine.js';
import { NodeMetrics, type QueueMessageCounts } from './metrics.js';
import { QueueReplica, forwardedEntryProblem, streamDeliveryOf, type QueueApplyResult } from './queue-replica.js';
import { EntryBatcher } from './entry-batcher.js';
import { decodeQueueEntry, stampEntry } from './wire.js';
import type { DeliveryOutbox } from './delivery-outbox.js';
import { RaftGroup } from './raft-group.js';
import type { GroupMessage } from './raft-codec.js';
import { ForwardError, PeerTransport } from './transport.js';
import { WarnLimiter } from './warn-limiter.js';

import pb = quorumq.v1;

export const META_GROUP = 'meta';

export function queueGroupId(definition: QueueDefinition): string {
  return `q/${definition.createdIndex}/${definition.name}`;
}

/** A consumer whose stream is attached to this node (which leads its queue). */
export interface LocalConsumer {
  readonly id: string;
  readonly queue: string;
  readonly tag: string;
  readonly stream: ServerDuplexStream<pb.ConsumeRequest, pb.ConsumeResponse.$Properties>;
  /** Called when the node ends the consumer (lost leadership, queue deleted). */
  readonly end: (error: BrokerError) => void;
  /** Deliveries not yet written: sent at the turn's end, in bounded batches, while the stream drains. */
  readonly outbox: DeliveryOutbox;
}

export interface LocalQueue {
  readonly definition: QueueDefinition;
  readonly replica: QueueReplica;
  readonly group: RaftGroup<QueueApplyResult>;
  tickTimer: NodeJS.Timeout | null;
  tickAt: number;
  /** Leader duties (consumerDown, re-issued effects) run once per term, after its first entry applied. */
  leaderReadyTerm: number;
  deadLettersInFlight: Set<number>;
  movesInFlight: Set<number>;
  /** Batches what this node proposes to the queue while it leads it. */
  readonly batcher: EntryBatcher;
}

/** Forwarding batchers kept at most (one per queue name; a batcher in use survives a reset). */
const FORWARDING_BATCHERS_MAX = 10_000;

export class BrokerNode {
  readonly metrics: NodeMetrics;
  readonly meta: MetaMachine;
  readonly metaGroup: RaftGroup<MetaReply>;
  readonly queues = new Map<string, LocalQueue>();
  /** Batches of commands to queues this node does not lead, by queue name (see proposeQueueFull). */
  private readonly forwarding = new Map<string, EntryBatcher>();
  readonly consumers = new Map<string, LocalConsumer>();
  private ticker: NodeJS.Timeout | null = null;
  private diskTimer: NodeJS.Timeout | null = null;
  private metricsServer: HttpServer | null = null;
  private stopping = false;
  diskAlarm = false;
  private metaLeaderHandlers: Array<() => void> = [];
  /** Warnings a peer can cause over and over (refused calls and messages), rate-limited. */
  readonly warnings: WarnLimiter;

  private constructor(
    readonly config: NodeConfig,
    readonly storage: NodeStorage,
    readonly transport: PeerTransport,
    readonly logger: Logger,
    private readonly onFatal: (error: unknown) => void,
  ) {
    this.metrics = new NodeMetrics(config.metricsQueueLimit);
    this.metrics.observeQueues(() => this.ledQueueCounts());
    this.warnings = new WarnLimiter(logger);
    this.meta = new MetaMachine(() => this.reconcileSoon());
    this.metaGroup = new RaftGroup<MetaReply>({
      groupId: META_GROUP,
      nodeId: config.nodeId,
      storage,
      machine: this.meta,
      initialVoters: [...config.peers.keys()].sort(),
      send: (groupId, messages) => transport.send(groupId, messages),
      onSoftState: (state) => this.onMetaSoftState(state),
      onFatal: (error) => this.fatal(error),
      knownMember: (from) => config.peers.has(from),
      electionTicks: config.electionTicks,
      heartbeatTicks: config.heartbeatTicks,
    });
  }

  static async start(config: NodeConfig, logger: Logger, onFatal: (error: unknown) => void): Promise<BrokerNode> {
    const kv = await LevelKvStore.open(join(config.dataDir, 'kv'));
    let node: BrokerNode | null = null;
    const storage = await NodeStorage.open({
      dir: join(config.dataDir, 'wal'),
      fs: new NodeWalFs(),
      kv,
      snapshotInterval: config.snapshotInterval,
      logger: { warn: (message: string) => logger.warn(message) },
      onFatal: (error) => (node === null ? onFatal(error) : node.fatal(error)),
      onFlush: (stats) => {
        if (node === null) return;
        node.metrics.walFlushes.inc();
        node.metrics.walRecords.inc(stats.records);
        node.metrics.walBytes.inc(stats.bytes);
      },
    });
    if (storage.corruption !== null) {
      logger.error({ corruption: storage.corruption }, 'WAL corruption found; the affected groups will not serve from this copy');
    }
    if (config.testOnlyConfirmBeforeCommit) logger.warn('TEST ONLY: publishes are confirmed before they commit; confirmed messages can be lost');
    const transport = new PeerTransport(config.nodeId, config.peers, config.clusterSecret, logger, (messages) => {
      node?.metrics.peerBatches.inc();
      node?.metrics.peerMessages.inc(messages);
    });
    node = new BrokerNode(config, storage, transport, logger, onFatal);
    node.reconcile();
    node.ticker = setInterval(() => node?.tick(), config.tickMs);
    await node.checkDisk();
    node.diskTimer = setInterval(() => void node?.checkDisk(), 2000);
    if (config.metricsListen !== null) node.metricsServer = await node.metrics.listen(config.metricsListen);
    return node;
  }

  get nodeId(): NodeId {
    return this.config.nodeId;
  }

  addressOf(node: NodeId | null): string | null {
    return node === null ? null : (this.config.peers.get(node) ?? null);
  }

  // ------------------------------------------------------------------------------------
  // Raft plumbing

  private tick(): void {
    this.transport.keepAlive();
    this.metaGroup.tick();
    for (const queue of this.queues.values()) queue.group.tick();
  }

  /**
   * A Raft message from an authenticated peer (the transport checked the stream's
   * credentials and that the message is sent in the peer's own name). Dropped unless its
   * sender is a configured peer and a member of the group it is for.
   */
  receive(envelope: GroupMessage): void {
    if (this.stopping) return;
    const { message } = envelope;
    // Never step a message meant for another node into this one (the core would rightly
    // call that an invariant violation); the transport refuses such streams.
    if (message.to !== this.nodeId) return;
    if (message.from === this.nodeId || !this.config.peers.has(message.from)) {
      this.refuseMessage('not_a_member', envelope);
      return;
    }
    // A message for a queue this node does not know yet (its declare is not applied here
    // yet) is dropped: Raft sends again.
    const group = envelope.groupId === META_GROUP ? this.metaGroup : this.groupById(envelope.groupId);
    if (group !== null && !group.receive(message)) this.refuseMessage('not_a_member', envelope);
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

  groupById(groupId: string): RaftGroup<unknown> | null {
    if (groupId === META_GROUP) return this.metaGroup as RaftGroup<unknown>;
    const name = groupId.slice(groupId.indexOf('/', 2) + 1);
    const queue = this.queues.get(name);
    if (queue === undefined || queueGroupId(queue.definition) !== groupId) return null;
    return queue.group as RaftGroup<unknown>;
  }

  fatal(error: unknown): void {
    if (this.stopping) return;
    this.logger.fatal({ err: error }, 'unrecoverable error; stopping the node (restart recovers from the WAL)');
    this.onFatal(error);
  }

  private async checkDisk(): Promise<void> {
    try {
      const stats = await statfs(this.config.dataDir);
      const free = Number(stats.bavail) * Number(stats.bsize);
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

  // ------------------------------------------------------------------------------------
  // Queue replicas follow the metadata

  private reconcileScheduled = false;

  private reconcileSoon(): void {
    if (this.reconcileScheduled) return;
    this.reconcileScheduled = true;
    queueMicrotask(() => {
      this.reconcileScheduled = false;
      this.reconcile();
    });
  }

  private reconcile(): void {
    if (this.stopping) return;
    for (const definition of this.meta.queues.values()) {
      if (!definition.members.includes(this.nodeId)) continue;
      const existing = this.queues.get(definition.name);
      if (existing !== undefined && existing.definition.createdIndex === definition.createdIndex) continue;
      if (existing !== undefined) this.dropQueue(existing, 'the queue was re-created');
      this.createQueue(definition);
    }
    for (const queue of [...this.queues.values()]) {
      const current = this.meta.queues.get(queue.definition.name);
      if (current === undefined || current.createdIndex !== queue.definition.createdIndex) this.dropQueue(queue, 'the queue was deleted');
    }
  }

  /** The message counts of the queues this node leads (read when /metrics is scraped). */
  private *ledQueueCounts(): Iterable<QueueMessageCounts> {
    for (const [queue, local] of this.queues) {
      if (!local.group.isLeader) continue;
      const totals = local.replica.state.totals;
      yield { queue, ready: totals.ready.count, unacked: totals.delivered.count, delayed: totals.delayed.count, deadLettering: totals.deadLettering.count };
    }
  }

  private createQueue(definition: QueueDefinition): void {
    const groupId = queueGroupId(definition);
    const replica = new QueueReplica(
      definition.name,
      groupId,
      definition.args,
      { onEffects: (r, effects) => this.onEffects(r, effects) },
      definition.createdAt ?? 0,
    );
    let local: LocalQueue | null = null;
    const group = new RaftGroup<QueueApplyResult>({
      groupId,
      nodeId: this.nodeId,
      storage: this.storage,
      machine: replica,
      initialVoters: [...definition.members],
      send: (id, messages) => this.transport.send(id, messages),
      onSoftState: (state) => {
        if (local !== null) this.onQueueSoftState(local, state);
      },
      onApplied: () => {
        replica.sweep();
        if (local !== null) this.afterQueueApplied(local);
      },
      onFatal: (error) => this.fatal(error),
      // The metadata names the queue's members (a later membership change goes through it).
      knownMember: (from) => {
        const current = this.meta.queues.get(definition.name);
        return current !== undefined && current.createdIndex === definition.createdIndex && current.members.includes(from);
      },
      electionTicks: this.config.electionTicks,
      heartbeatTicks: this.config.heartbeatTicks,
    });
    const what = `queue ${JSON.stringify(definition.name)}`;
    const batcher = new EntryBatcher({
      propose: (data) => group.propose(data, Date.now() + this.config.requestTimeoutMs, what),
      retriable: (error) => retriable(error) && !this.stopping,
      fallback: (data) => this.proposeQueueAnywhere(definition.name, data),
    });
    local = { definition, replica, group, tickTimer: null, tickAt: 0, leaderReadyTerm: 0, deadLettersInFlight: new Set(), movesInFlight: new Set(), batcher };
    this.queues.set(definition.name, local);
    this.logger.info({ queue: definition.name, members: definition.members }, 'queue replica started');
  }

  private dropQueue(queue: LocalQueue, why: string): void {
    this.queues.delete(queue.definition.name);
    queue.group.stop(why);
    if (queue.tickTimer !== null) clearTimeout(queue.tickTimer);
    this.endConsumers(queue.definition.name, new BrokerError(Status.NOT_FOUND, 'QUEUE_DELETED', `queue ${JSON.stringify(queue.definition.name)}: ${why}`));
    const dropped = queue.replica.state.messages.size;
    this.logger.info({ queue: queue.definition.name, messagesDropped: dropped, why }, 'queue replica removed');
    this.storage.deleteGroup(queueGroupId(queue.definition)).catch((error: unknown) => this.logger.warn({ err: error }, 'deleting a group failed'));
  }

  private onMetaSoftState(state: SoftState): void {
    if (state.role === 'leader') this.metrics.leaderChanges.inc();
    if (state.leaderId !== null && this.metaLeaderHandlers.length > 0) {
      const handlers = this.metaLeaderHandlers;
      this.metaLeaderHandlers = [];
      for (const h of handlers) h();
    }
  }

  private onQueueSoftState(queue: LocalQueue, state: SoftState): void {
    if (state.role === 'leader') {
      this.metrics.leaderChanges.inc();
      this.logger.info({ queue: queue.definition.name, term: queue.group.raft.currentTerm }, 'became queue leader');
      return;
    }
    // No longer the leader: consumers attached here must move to the new leader.
    if (queue.tickTimer !== null) clearTimeout(queue.tickTimer);
    queue.tickTimer = null;
    queue.leaderReadyTerm = 0;
    queue.deadLettersInFlight.clear();
    queue.movesInFlight.clear();
    const leader = this.addressOf(state.leaderId);
    this.endConsumers(
      queue.definition.name,
      unavailable('LEADER_MOVED', `this node no longer leads queue ${JSON.stringify(queue.definition.name)}; resubscribe`, leader),
    );
  }

  private afterQueueApplied(queue: LocalQueue): void {
    const group = queue.group;
    if (!group.isLeader) return;
    const term = group.raft.currentTerm;
    if (queue.leaderReadyTerm === term) return;
    // The leader's no-op of this term is applied: the state is complete. Redo what the
    // previous leader may not have finished, and release consumers attached elsewhere.
    if (group.raft.termAt(group.appliedIndex) !== term) return;
    queue.leaderReadyTerm = term;
    const state = queue.replica.state;
    for (const consumerId of state.consumers.keys()) {
      if (!this.consumers.has(consumerId)) {
        this.proposeLocal(queue, { type: 'consumerDown', consumerId }).catch(() => {});
      }
    }
    this.onEffects(queue.replica, leaderEffectsOf(queue));
    this.maybeRebalance(queue);
  }

  /** Spread leaders: the first member of a queue is its preferred leader. */
  private maybeRebalance(queue: LocalQueue): void {
    const preferred = queue.definition.members[0];
    if (preferred === undefined || preferred === this.nodeId) return;
    setTimeout(() => {
      if (!queue.group.isLeader || this.stopping) return;
      // Moving the leader ends its consumers' streams (they resubscribe, their unacked
      // messages are redelivered): only rebalance a queue nobody is consuming here.
      if ([...this.consumers.values()].some((c) => c.queue === queue.definition.name)) return;
      const progress = queue.group.status().progress.get(preferred);
      if (progress !== undefined && progress.match >= queue.group.raft.lastIndex && this.transport.isConnected(preferred)) {
        this.logger.info({ queue: queue.definition.name, to: preferred }, 'handing leadership to the preferred leader');
        queue.group.transferLeadership(preferred);
      }
    }, 1000).unref();
  }

  // ------------------------------------------------------------------------------------
  // Effects (leader only)

  private onEffects(replica: QueueReplica, effects: readonly Effect[]): void {
    const queue = this.queues.get(replica.name);
    if (queue === undefined || queue.replica !== replica) return;
    for (const effect of effects) {
      switch (effect.type) {
        case 'deliver': {
          const consumer = this.consumers.get(effect.consumerId);
          if (consumer === undefined) break; // get, or a consumer attached elsewhere
          consumer.outbox.push(streamDeliveryOf(replica.name, consumer.tag, effect, replica.bodies.get(effect.messageId)));
          this.metrics.deliveries.inc();
          break;
        }
        case 'deadLetter':
          this.deadLetter(queue, effect);
          break;
        case 'drop':
          this.metrics.dropped.inc({ reason: effect.reason });
          break;
        case 'consumerTimedOut': {
          const consumer = this.consumers.get(effect.consumerId);
          consumer?.stream.write({
            event: {
              kind: 'consumer_timeout',
              message: `delivery ${effect.deliveryTag} was not acknowledged within consumer_timeout and was returned to the queue`,
              deliveryTag: effect.deliveryTag,
            },
          });
          break;
        }
        case 'scheduleTick':
          this.scheduleTick(queue, effect.at);
          break;
        case 'deleteQueue':
          this.logger.info({ queue: replica.name, reason: effect.reason }, 'queue deletes itself');
          this.proposeMeta({ type: 'deleteQueue', name: replica.name, reason: effect.reason, createdIndex: queue.definition.createdIndex }).catch(
            (error: unknown) => this.logger.warn({ err: error, queue: replica.name }, 'could not delete queue from metadata; will retry on next tick'),
          );
          break;
        default:
          this.onOtherEffect(queue, effect);
      }
    }
  }

  private onOtherEffect(queue: LocalQueue, effect: Effect): void {
    switch (effect.type) {
      case 'move':
        this.moveOne(queue, effect);
        break;
      case 'moveDone':
        this.logger.info({ queue: queue.definition.name, move: effect.moveId, outcome: effect.outcome, moved: effect.moved, failed: effect.failed }, 'move finished');
        break;
      default:
        this.logger.debug({ queue: queue.definition.name, effect: effect.type }, 'effect not handled by this node');
    }
  }

  /**
   * Spec 8: publishes one message of a move to its destination, then lets it leave the source
   * (`moveConfirmed`) — or puts it back (`moveFailed`) when the destination refused it. A
   * leader change re-issues unsettled moves: at least once.
   */
  private moveOne(queue: LocalQueue, effect: Extract<Effect, { type: 'move' }>): void {
    if (queue.movesInFlight.has(effect.messageId)) return;
    const stored = queue.replica.message(effect.messageId);
    this.untilDone(queue, queue.movesInFlight, effect.messageId, 'moving a message', async () => {
      const headers = headersFromWire(stored?.headers);
      const routeHere = (): readonly string[] => {
        try {
          return route(this.meta.topology, effect.exchange, effect.routingKeys, headers).queues;
        } catch (error) {
          if (!(error instanceof TopologyError)) throw error;
          return [];
        }
      };
      let targets = routeHere();
      if (targets.length === 0) {
        // As for dead-letters: a bind made through another node just before may not be
        // applied here yet. Catch up before calling the message unroutable.
        await this.metaBarrier();
        targets = routeHere();
      }
      const { message, command } = republication(stored, effect.exchange, effect.routingKeys, effect.deaths, true);
      const replies = await Promise.all(targets.map((target) => this.proposeQueue(target, command, message)));
      const ok = targets.length > 0 && !replies.some((r) => r.type === 'error' || r.type === 'rejected');
      await this.proposeLocal(queue, { type: ok ? 'moveConfirmed' : 'moveFailed', moveId: effect.moveId, messageIds: [effect.messageId] });
    });
  }


  private scheduleTick(queue: LocalQueue, at: number): void {
    if (queue.tickTimer !== null && queue.tickAt <= at) return;
    if (queue.tickTimer !== null) clearTimeout(queue.tickTimer);
    queue.tickAt = at;
    const delay = Math.max(0, Math.min(at - Date.now(), 2 ** 31 - 1));
    queue.tickTimer = setTimeout(() => {
      queue.tickTimer = null;
      if (!queue.group.isLeader || this.stopping) return;
      this.proposeLocal(queue, { type: 'tick' }).catch(() => {
        // Not leader any more, or the group stopped: the next leader schedules its own.
      });
    }, delay);
  }

  private deadLetter(queue: LocalQueue, effect: Extract<Effect, { type: 'deadLetter' }>): void {
    if (queue.deadLettersInFlight.has(effect.messageId)) return;
    const stored = queue.replica.message(effect.messageId);
    const source = queue.definition.name;
    this.metrics.deadLettered.inc({ reason: effect.reason });
    this.untilDone(queue, queue.deadLettersInFlight, effect.messageId, 'dead-lettering', async () => {
      const headers = headersFromWire(stored?.headers);
      const routeHere = (): ReturnType<typeof routeDeadLetter> | null => {
        try {
          return routeDeadLetter(this.meta.topology, effect.exchange, effect.routingKeys, headers, effect.deaths);
        } catch (error) {
          if (!(error instanceof TopologyError)) throw error;
          return null; // the dead-letter exchange does not exist (on this node's copy)
        }
      };
      let routed = routeHere();
      if (routed === null || routed.unroutable) {
        // This node's copy of the metadata may lag a declare or bind just made elsewhere:
        // catch up with the metadata leader before deciding the message is unroutable (as a
        // publish does). A barrier that fails throws, and the dead-letter is retried.
        await this.metaBarrier();
        routed = routeHere();
      }
      let kept: readonly string[] = [];
      if (routed === null) {
        this.metrics.dropped.inc({ reason: 'dead_letter_exchange_missing' });
        this.logger.warn({ queue: source, exchange: effect.exchange }, 'dead-letter exchange missing: message dropped');
      } else {
        kept = routed.queues;
        if (routed.droppedAsCycle.length > 0) this.metrics.dropped.inc({ reason: 'dead_letter_cycle' }, routed.droppedAsCycle.length);
        if (routed.unroutable) this.metrics.dropped.inc({ reason: 'dead_letter_unroutable' });
      }
      // Spec 5: an expired message is dead-lettered without its expiration.
      const { message, command } = republication(stored, effect.exchange, effect.routingKeys, effect.deaths, effect.reason !== 'expired');
      await Promise.all(kept.map((target) => this.proposeQueue(target, command, message)));
      if (effect.confirmRequired) await this.proposeLocal(queue, { type: 'deadLetterConfirmed', messageIds: [effect.messageId] });
    });
  }

  /**
   * Runs `attempt` for one message until it succeeds, with a bounded back-off, while this
   * node still leads the queue (a new leader re-issues the work: at least once). `inFlight`
   * keeps a re-issued effect from running twice here.
   */
  private untilDone(queue: LocalQueue, inFlight: Set<number>, messageId: number, what: string, attempt: () => Promise<void>): void {
    inFlight.add(messageId);
    const run = (tries: number): void => {
      attempt().then(
        () => inFlight.delete(messageId),
        (error: unknown) => {
          if (!queue.group.isLeader || this.stopping || this.queues.get(queue.definition.name) !== queue) {
            inFlight.delete(messageId);
            return;
          }
          this.logger.warn({ queue: queue.definition.name, err: error, tries }, `${what} failed; retrying`);
          setTimeout(() => run(tries + 1), Math.min(2000, 100 * 2 ** Math.min(tries, 5))).unref();
        },
      );
    };
    run(0);
  }

  // ------------------------------------------------------------------------------------
  // Consumers attached here

  attachConsumer(consumer: LocalConsumer): void {
    this.consumers.set(consumer.id, consumer);
  }

  detachConsumer(id: string): void {
    this.consumers.delete(id);
  }

  private endConsumers(queue: string, error: BrokerError): void {
    for (const consumer of [...this.consumers.values()]) {
      if (consumer.queue !== queue) continue;
      this.consumers.delete(consumer.id);
      consumer.end(error);
    }
  }

  newConsumerId(): string {
    return `${this.nodeId}/${randomUUID()}`;
  }

  // ------------------------------------------------------------------------------------
  // Proposals

  /**
   * Proposes to a queue group this node leads, in this turn's batch entry; fails (no retry
   * elsewhere) when this node does not lead it or the entry does not commit in time.
   */
  proposeLocal(queue: LocalQueue, command: Command, message: pb.Message.$Properties | Uint8Array | null = null): Promise<QueueApplyResult> {
    return queue.batcher.add(command, message, false);
  }

  /**
   * Proposes a command to a queue's group wherever its leader is, and waits until it is
   * applied there (committed on a majority). Retries while the leader is unknown or moves,
   * until the request timeout.
   */
  proposeQueue(name: string, command: Command, message: pb.Message.$Properties | Uint8Array | null = null): Promise<Reply> {
    return this.proposeQueueFull(name, command, message).then((result) => result.reply);
  }

  /** The queue's definition; when this node does not know it, after catching up with the metadata. */
  async queueDefinition(name: string): Promise<QueueDefinition> {
    let definition = this.meta.queues.get(name);
    if (definition === undefined) {
      await this.metaBarrier();
      definition = this.meta.queues.get(name);
    }
    if (definition === undefined) throw notFound('QUEUE_NOT_FOUND', `queue ${JSON.stringify(name)} does not exist`);
    return definition;
  }

  proposeQueueFull(name: string, command: Command, message: pb.Message.$Properties | Uint8Array | null = null): Promise<QueueApplyResult> {
    const local = this.queues.get(name);
    // The common case: this node leads the queue. The command joins this turn's batch entry
    // (see EntryBatcher, which also retries the general way when leadership just moved).
    if (local !== undefined && local.group.isLeader && !this.stopping && this.meta.queues.has(name)) return local.batcher.add(command, message);
    // Elsewhere: this turn's commands to the queue go to its leader as one batch entry
    // (proposeQueueAnywhere finds the leader and retries; its failures are final).
    let batcher = this.forwarding.get(name);
    if (batcher === undefined) {
      if (this.forwarding.size >= FORWARDING_BATCHERS_MAX) this.forwarding.clear();
      batcher = new EntryBatcher({ propose: (data) => this.proposeQueueAnywhere(name, data), retriable: () => false, fallback: (data) => this.proposeQueueAnywhere(name, data) });
      this.forwarding.set(name, batcher);
    }
    return batcher.add(command, message);
  }

  /**
   * How long a forwarded request that cannot be re-sent safely still waits for its old
   * leader's answer after another node was elected: a few election timeouts, time for a
   * deposed leader that still runs to learn whether the entry committed.
   */
  private leaderMovedGraceMs(): number {
    return 4 * this.config.electionTicks * this.config.tickMs;
  }

  /** Proposes an encoded queue entry on the queue's leader, wherever it is (see withLeader). */
  private async proposeQueueAnywhere(name: string, data: Uint8Array): Promise<QueueApplyResult> {
    if (!this.meta.queues.has(name)) await this.queueDefinition(name);
    return this.withLeader(
      () => {
        const definition = this.meta.queues.get(name);
        if (definition === undefined) throw notFound('QUEUE_NOT_FOUND', `queue ${JSON.stringify(name)} does not exist`);
        const local = this.queues.get(name);
        return {
          groupId: queueGroupId(definition),
          local: local?.group ?? null,
          members: definition.members,
        };
      },
      async (group, deadline) => {
        stampEntry(data, Date.now());
        return group.propose(data, deadline, `queue ${JSON.stringify(name)}`);
      },
      data,
      `queue ${JSON.stringify(name)}`,
      () => isDeduplicated(data),
    );
  }

  /**
   * Proposes a metadata command and waits until this node has applied it too, so that the
   * next request this node serves (a publish right after a declare) sees the change.
   */
  async proposeMeta(command: MetaCommand): Promise<MetaReply> {
    const problem = this.metaCommandProblem(parseMetaCommand(command));
    if (problem !== null) return malformedCommand(problem);
    const data = encodeJson(command);
    const reply = await this.withLeader(
      () => ({ groupId: META_GROUP, local: this.metaGroup, members: [...this.config.peers.keys()] }),
      async (group, deadline) => group.propose(data, deadline, 'the metadata group'),
      data,
      'the metadata group',
      () => command.type === 'barrier',
    );
    if (reply.index !== undefined) await this.waitMetaApplied(reply.index);
    return reply;
  }

  /**
   * Why a metadata command must not be proposed, or null: its shape (meta-command.ts), and
   * what only the proposer can check against its configuration: a new queue's replicas
   * are nodes of this cluster.
   */
  private metaCommandProblem(parsed: ParsedMetaCommand): string | null {
    if (!parsed.ok) return parsed.problem;
    const command = parsed.command;
    if (command.type !== 'declareQueue' || command.passive) return null;
    const stranger = command.members.find((member) => !this.config.peers.has(member));
    return stranger === undefined ? null : `declareQueue: ${stranger} is not a node of this cluster`;
  }

  /**
   * Catches up with every metadata change committed before now (a read barrier). Callers
   * share barriers: while one is in flight, later callers wait for the next one, which is
   * proposed once it finished (a barrier proposed before a caller arrived would not cover
   * changes committed in between). Unroutable publishes and dead-letters at any rate thus
   * cost at most one barrier per round trip of the metadata group, not one each.
   */
  metaBarrier(): Promise<void> {
    if (this.barrierInFlight === null) return this.startBarrier();
    if (this.nextBarrier === null) {
      this.nextBarrier = this.barrierInFlight.then(
        () => this.startBarrier(),
        () => this.startBarrier(),
      );
      this.nextBarrier.then(
        () => undefined,
        () => undefined,
      );
    }
    return this.nextBarrier;
  }

  private barrierInFlight: Promise<void> | null = null;
  private nextBarrier: Promise<void> | null = null;

  private startBarrier(): Promise<void> {
    this.nextBarrier = null;
    const barrier = this.proposeMeta({ type: 'barrier' }).then(() => undefined);
    this.barrierInFlight = barrier;
    const done = (): void => {
      if (this.barrierInFlight === barrier) this.barrierInFlight = null;
    };
    barrier.then(done, done);
    return barrier;
  }

  private async waitMetaApplied(index: number): Promise<void> {
    const deadline = Date.now() + this.config.requestTimeoutMs;
    while (this.metaGroup.appliedIndex < index) {
      if (Date.now() > deadline) throw unavailable('METADATA_BEHIND', `this node has not caught up with the metadata (index ${index}) in time`);
      await sleep(2);
    }
  }

  /** The shared retry loop of proposals: local when this node leads, else forwarded. */
  private async withLeader<R, G extends Pick<RaftGroup<unknown>, 'isLeader' | 'leaderId' | 'whenLeaderOtherThan'>>(
    locate: () => { groupId: string; local: G | null; members: readonly NodeId[] },
    /** Proposes on the local leader; the proposal fails as OUTCOME_UNKNOWN after `deadline`. */
    proposeHere: (group: G, deadline: number) => Promise<R>,
    forwardData: Uint8Array,
    what: string,
    /** Whether `forwardData` may be sent to a new leader while the old one may still commit it. */
    resendable: () => boolean = () => false,
  ): Promise<R> {
    const deadline = Date.now() + this.config.requestTimeoutMs;
    let hint: NodeId | null = null;
    let attempt = 0;
    let lastError: unknown = null;
    while (Date.now() < deadline && !this.stopping) {
      const { groupId, local, members } = locate();
      try {
        if (local?.isLeader) return await proposeHere(local, deadline);
        const leader = local?.leaderId ?? hint ?? (local === null ? (members[attempt % members.length] ?? null) : null);
        if (leader !== null && leader !== this.nodeId) {
          const remaining = Math.max(100, deadline - Date.now());
          const forwarded = this.transport.propose(leader, groupId, forwardData, remaining);
          const reply = local === null ? await forwarded : await untilLeaderMoves(forwarded, local, leader, resendable, this.leaderMovedGraceMs());
          if (reply !== LEADER_MOVED) return decodeJson<R>(reply);
          // Another node was elected while the old leader held the request (it may be paused
          // or cut off). What it was sent may still commit there, so a request whose
          // re-sending is deduplicated goes to the new leader at once; any other waited a
          // grace period for the old leader's own answer (a deposed leader that runs soon
          // learns the entry's fate) and fails now, its outcome unknown.
          if (!resendable()) {
            throw new BrokerError(
              Status.UNAVAILABLE,
              'OUTCOME_UNKNOWN',
              `${what}: leadership moved from ${leader} while it held this request; the outcome is unknown (publishes with a producer id are re-sent safely)`,
            );
          }
          this.metrics.forwardsRerouted.inc();
          hint = local?.leaderId ?? null;
          attempt += 1;
          continue;
        }
      } catch (error) {
        lastError = error;
        if (isServiceError(error) && error.code === Status.DEADLINE_EXCEEDED) {
          throw new BrokerError(Status.UNAVAILABLE, 'OUTCOME_UNKNOWN', `${what} did not answer within the request timeout; the outcome is unknown`);
        }
        if (!retriable(error)) {
          if (error instanceof ForwardError) throw new BrokerError(error.code, error.reason, error.message);
          throw error;
        }
        hint = leaderHint(error);
        if (hint === this.nodeId) hint = null;
      }
      attempt += 1;
      await sleep(Math.min(200, 20 * attempt));
    }
    const known = locate().local?.leaderId ?? null;
    const detail = lastError instanceof Error ? `: ${lastError.message}` : isServiceError(lastError) ? `: ${lastError.details}` : '';
    throw unavailable('NO_QUORUM', `no leader of ${what} answered within ${this.config.requestTimeoutMs} ms${detail}`, this.addressOf(known));
  }

  /**
   * Peer.Propose: a forwarded command for a group this node should lead. The bytes come
   * from another node: they are checked (INVALID_ARGUMENT, nothing proposed) before they
   * can reach the log.
   */
  async handleForwarded(groupId: string, command: Uint8Array): Promise<Uint8Array> {
    const group = this.groupById(groupId);
    if (group === null) throw new BrokerError(Status.UNAVAILABLE, 'UNKNOWN_GROUP', `this node has no replica of ${groupId}`);
    if (!group.isLeader) {
      throw new ForwardError(Status.UNAVAILABLE, 'NOT_LEADER', `this node does not lead ${groupId}`, group.leaderId);
    }
    if (groupId === META_GROUP) {
      const problem = this.metaCommandProblem(decodeMetaCommand(command));
      if (problem !== null) throw invalidArgument(`refused a forwarded metadata command: ${problem}`, 'MALFORMED_COMMAND');
    } else {
      const problem = forwardedEntryProblem(command);
      if (problem !== null) throw invalidArgument(`refused a forwarded entry for ${groupId}: ${problem}`, 'MALFORMED_COMMAND');
      stampEntry(command, Date.now());
    }
    const reply = await group.propose(command, Date.now() + this.config.requestTimeoutMs);
    return encodeJson(reply);
  }

  /** Waits until the metadata group has a leader (startup), bounded. */
  waitForMetaLeader(timeoutMs: number): Promise<boolean> {
    if (this.metaGroup.leaderId !== null) return Promise.resolve(true);
    return new Promise((resolve) => {
      const timer = setTimeout(() => resolve(this.metaGroup.leaderId !== null), timeoutMs);
      this.metaLeaderHandlers.push(() => {
        clearTimeout(timer);
        resolve(true);
      });
    });
  }

  // ------------------------------------------------------------------------------------
  // Shutdown

  /** Hands off leadership, then stops. */
  async shutdown(): Promise<void> {
    if (this.stopping) return;
    const led = [this.metaGroup as RaftGroup<unknown>, ...[...this.queues.values()].map((q) => q.group as RaftGroup<unknown>)].filter((g) => g.isLeader);
    for (const group of led) {
      const target = [...this.config.peers.keys()].find((id) => id !== this.nodeId && this.transport.isConnected(id) && group.status().progress.has(id));
      if (target !== undefined) group.transferLeadership(target);
    }
    if (led.length > 0) {
      const until = Date.now() + 2000;
      while (Date.now() < until && led.some((g) => g.isLeader)) await sleep(20);
    }
    await this.stop();
  }

  async stop(): Promise<void> {
    if (this.stopping) return;
    this.stopping = true;
    if (this.ticker !== null) clearInterval(this.ticker);
    if (this.diskTimer !== null) clearInterval(this.diskTimer);
    for (const queue of this.queues.values()) {
      if (queue.tickTimer !== null) clearTimeout(queue.tickTimer);
      queue.group.stop('the node is shutting down');
    }
    this.metaGroup.stop('the node is shutting down');
    for (const consumer of [...this.consumers.values()]) consumer.end(unavailable('SHUTTING_DOWN', 'the node is shutting down'));
    this.consumers.clear();
    this.transport.close();
    if (this.metricsServer !== null) this.metricsServer.close();
    await this.storage.close();
  }
}

/**
 * A stored message published again (dead-lettered or moved): its routing keys, its deaths in
 * the machine command (not the stored copy), its expiration kept or dropped.
 */
function republication(
  stored: pb.Message.$Properties | undefined,
  exchange: string,
  routingKeys: readonly string[],
  deaths: Deaths | null,
  keepExpiration: boolean,
): { message: pb.Message.$Properties; command: Command } {
  const message: pb.Message.$Properties = { ...(stored ?? { body: new Uint8Array(0) }), deaths: [], firstDeath: null, lastDeath: null };
  message.routingKey = routingKeys[0] ?? '';
  if (!keepExpiration && message.properties != null) message.properties = { ...message.properties, expirationMs: null };
  const properties = message.properties;
  const command: Command = {
    type: 'enqueue',
    sizeBytes: message.body?.length ?? 0,
    exchange,
    routingKeys: [...routingKeys],
    ...(properties?.priority != null ? { priority: properties.priority } : {}),
    ...(keepExpiration && properties?.expirationMs != null ? { expirationMs: properties.expirationMs } : {}),
    ...(deaths !== null ? { deaths } : {}),
  };
  return { message, command };
}

const LEADER_MOVED = Symbol('leader moved');

/**
 * The forwarded request's reply, or LEADER_MOVED once `group` knows a leader other than
 * `leader`: at once for a resendable request, `graceMs` later for any other (if the old
 * leader has not answered by then).
 */
async function untilLeaderMoves(
  forwarded: Promise<Uint8Array>,
  group: Pick<RaftGroup<unknown>, 'whenLeaderOtherThan'>,
  leader: NodeId,
  resendable: () => boolean,
  graceMs: number,
): Promise<Uint8Array | typeof LEADER_MOVED> {
  const watch = group.whenLeaderOtherThan(leader);
  let timer: NodeJS.Timeout | undefined;
  try {
    const moved = watch.moved.then(async (yes): Promise<Uint8Array | typeof LEADER_MOVED> => {
      if (!yes) return forwarded;
      if (resendable()) return LEADER_MOVED;
      await new Promise<void>((resolve) => (timer = setTimeout(resolve, graceMs)));
      return LEADER_MOVED;
    });
    return await Promise.race<Uint8Array | typeof LEADER_MOVED>([forwarded, moved]);
  } finally {
    watch.cancel();
    if (timer !== undefined) clearTimeout(timer);
    forwarded.catch(() => {}); // a late failure of the abandoned forward is not this request's
  }
}

/** Whether every command of a queue entry is an enqueue the queue deduplicates (producer id and sequence). */
function isDeduplicated(data: Uint8Array): boolean {
  let commands: ReturnType<typeof decodeQueueEntry>['commands'];
  try {
    commands = decodeQueueEntry(data).commands;
  } catch {
    return false;
  }
  return commands.length > 0 && commands.every(({ command }) => command.type === 'enqueue' && command.producerId !== undefined && command.sequence !== undefined);
}

function leaderEffectsOf(queue: LocalQueue): Effect[] {
  return leaderEffects(queue.replica.state, Date.now());
}

function retriable(error: unknown): boolean {
  if (error instanceof BrokerError) return error.code === Status.UNAVAILABLE && error.reason !== 'OUTCOME_UNKNOWN';
  if (error instanceof ForwardError) return error.code === Status.UNAVAILABLE && error.reason !== 'OUTCOME_UNKNOWN';
  if (isServiceError(error)) {
    if (error.code === Status.UNAVAILABLE) {
      const reason = error.metadata.get('quorumq-reason')[0];
      return reason !== 'OUTCOME_UNKNOWN';
    }
    return false;
  }
  if (error instanceof Error && /unknown peer/.test(error.message)) return false;
  return false;
}

function leaderHint(error: unknown): NodeId | null {
  if (error instanceof ForwardError) return error.leaderId;
  if (isServiceError(error)) {
    const id = error.metadata.get('quorumq-leader-id')[0];
    return typeof id === 'string' && id !== '' ? id : null;
  }
  return null;
}

/**
 * A proposal that was accepted but not applied in time: it may still commit later, so the
 * outcome is unknown to the client (who may retry; producer ids make that safe).
 */
export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
