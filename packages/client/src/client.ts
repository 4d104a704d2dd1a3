import type { ClientReadableStream, StatusObject } from '@grpc/grpc-js';
import { BrokerService, quorumq } from '@quorumq/proto';
import { Reason } from '@quorumq/proto/errors';
import { QuorumqError, toQuorumqError } from './errors.js';
import { Consumer, type ConsumeOptions, type DeliveryHandler } from './consumer.js';
import { DeliveryImpl, type Delivery } from './delivery.js';
import { decodeHeaders, encodeHeaders, type DecodedHeaders, type Headers } from './headers.js';
import { wireNumber } from './longs.js';
import { encodePublish, type Body, type PublishOptions } from './messages.js';
import { ProducerLanes } from './producer-lanes.js';
import { Publisher, type PublisherOptions } from './publisher.js';
import { toPublishResult, type PublishResult } from './results.js';
import { NoFailover, shouldFailover, Transport, type TransportOptions } from './transport.js';

/** Options of {@link connect}. */
export type ConnectOptions = TransportOptions;

/** Queue arguments (QueueArguments in broker.proto); unset means the broker's default. */
export interface QueueArguments {
  /** Default 20; -1 = unlimited. */
  readonly deliveryLimit?: number;
  readonly deadLetterExchange?: string;
  readonly deadLetterRoutingKey?: string;
  readonly deadLetterStrategy?: 'at-least-once' | 'at-most-once';
  readonly messageTtlMs?: number;
  readonly maxLength?: number;
  readonly maxLengthBytes?: number;
  readonly overflow?: 'drop-head' | 'reject-publish' | 'reject-publish-dlx';
  /** 0..31 */
  readonly maxPriority?: number;
  readonly singleActiveConsumer?: boolean;
  readonly dedupWindowMs?: number;
  /** 0 disables the timeout. */
  readonly consumerTimeoutMs?: number;
  readonly autoDelete?: boolean;
  readonly expiresMs?: number;
  readonly exclusive?: boolean;
  /** Raft group size; default 3, at most the cluster size. */
  readonly replicas?: number;
  /** Always true: every queue is replicated and durable; false is refused by the broker. */
  readonly durable?: boolean;
  /**
   * Keyed compaction (spec 9): the header whose value is a message's key, or '$routing_key'.
   * A newer message with the key replaces an older one not yet delivered.
   */
  readonly compactionKey?: string;
  /** How long a tombstone waits to be delivered before it is dropped; default 24 h. */
  readonly compactionTombstoneRetentionMs?: number;
  /** A message younger than this is not replaced; default 0. */
  readonly compactionMinLagMs?: number;
  /** Dead-letter replaced messages (reason 'compacted') instead of dropping them. */
  readonly compactionDeadLetter?: boolean;
}

export interface DeclareQueueOptions {
  /** Only check that the queue exists (NOT_FOUND otherwise). */
  readonly passive?: boolean;
}

export interface DeclareQueueResult {
  readonly name: string;
  readonly created: boolean;
  readonly warnings: readonly string[];
  readonly members: readonly string[];
}

export interface DeleteQueueOptions {
  readonly ifUnused?: boolean;
  readonly ifEmpty?: boolean;
}

export type ExchangeType = 'direct' | 'fanout' | 'topic' | 'headers';

export interface DeclareExchangeOptions {
  readonly autoDelete?: boolean;
  readonly alternateExchange?: string;
  readonly passive?: boolean;
}

/** A binding from `source` to a queue or (exchange-to-exchange) to an exchange. */
export type Binding = {
  readonly source: string;
  readonly bindingKey?: string;
  /** Headers exchanges: the values to match plus 'x-match'. `null` is a presence-only value. */
  readonly arguments?: Headers;
} & ({ readonly queue: string; readonly exchange?: undefined } | { readonly exchange: string; readonly queue?: undefined });

export interface MoveOptions {
  readonly sourceQueue: string;
  readonly destinationExchange: string;
  /** Empty / omitted keeps each message's own routing keys. */
  readonly routingKey?: string;
  /** 0 / omitted: the number of messages the source held at the start. */
  readonly limit?: number;
  readonly onProgress?: (progress: MoveProgress) => void;
}

/** What a move call knows of its move across failovers. */
interface MoveFollow {
  moveId: string;
  last: MoveProgress | undefined;
}

export interface MoveProgress {
  readonly moved: number;
  readonly total: number;
  readonly done: boolean;
}

export interface QueueStatus {
  readonly name: string;
  /** The leader's node id ('' when unknown). */
  readonly leader: string;
  /** The leader's address, when the client knows it. */
  readonly leaderAddress?: string;
  readonly members: readonly string[];
  readonly commitIndex: number;
  readonly ready: number;
  readonly unacked: number;
  readonly delayed: number;
  readonly deadLettering: number;
  readonly bytes: number;
  readonly consumers: number;
  readonly term: number;
  /** Nodes removed from `members` that still hold a replica until the queue's group dropped them. */
  readonly retiring: readonly string[];
  /** The group's configuration, as the answering node's replica knows it (empty without one there). */
  readonly voters: readonly string[];
  /** Members catching up before they vote. */
  readonly learners: readonly string[];
  /** Keyed compaction (spec 9): present on a queue with `compactionKey` only. */
  readonly compaction?: QueueCompactionStatus;
}

export interface QueueCompactionStatus {
  /** Keys with a live value (not a tombstone). */
  readonly keys: number;
  /** Messages replaced by a newer one of their key, since the queue was created. */
  readonly replaced: number;
  /** Tombstones held now. */
  readonly tombstones: number;
  /** Tombstones dropped once their retention ended. */
  readonly tombstonesExpired: number;
}

export interface NodeStatus {
  readonly id: string;
  readonly address: string;
  readonly reachable: boolean;
  readonly diskAlarm: boolean;
  /** Resident memory above the node's high watermark: it refuses publishes (`MEMORY_ALARM`). */
  readonly memoryAlarm: boolean;
  /** `active`, or `removing` (its replicas are moving away). */
  readonly state: string;
  /** Its peer listener. */
  readonly peerAddress: string;
  /** Whether it votes in the metadata group (a new node is a learner until caught up). */
  readonly voter: boolean;
}

export interface ClusterStatus {
  /** The node that answered. */
  readonly node: string;
  readonly metadataLeader: string;
  /** By node id. */
  readonly nodes: Readonly<Record<string, NodeStatus>>;
  /** By queue name; `leader` is a node id (see `nodes`). */
  readonly queues: Readonly<Record<string, QueueStatus>>;
}

export interface GetOptions {
  /** true: the message stays unacked until settled (or the consumer timeout). Default false. */
  readonly manualAck?: boolean;
}

function queueArguments(args: QueueArguments | undefined): quorumq.v1.QueueArguments.$Properties {
  const out: quorumq.v1.QueueArguments.$Properties = {};
  if (args === undefined) return out;
  const keys = [
    'deliveryLimit', 'deadLetterExchange', 'deadLetterRoutingKey', 'deadLetterStrategy', 'messageTtlMs', 'maxLength',
    'maxLengthBytes', 'overflow', 'maxPriority', 'singleActiveConsumer', 'dedupWindowMs', 'consumerTimeoutMs',
    'autoDelete', 'expiresMs', 'exclusive', 'replicas', 'durable',
    'compactionKey', 'compactionTombstoneRetentionMs', 'compactionMinLagMs', 'compactionDeadLetter',
  ] as const;
  const target = out as Record<string, unknown>;
  for (const key of keys) if (args[key] !== undefined) target[key] = args[key];
  return out;
}

function bindingRequest(binding: Binding): quorumq.v1.BindRequest.$Properties {
  const request: quorumq.v1.BindRequest.$Properties = {
    source: binding.source,
    bindingKey: binding.bindingKey ?? '',
    arguments: encodeHeaders(binding.arguments, 'arguments'),
  };
  if (binding.queue !== undefined && binding.exchange === undefined) request.queue = binding.queue;
  else if (binding.exchange !== undefined && binding.queue === undefined) request.exchange = binding.exchange;
  else throw new QuorumqError('a binding needs exactly one of queue or exchange', { code: 'INVALID_ARGUMENT', reason: Reason.INVALID_ARGUMENT, retriable: false });
  return request;
}

/** A connection to a quorumq cluster. */
export class QuorumqClient {
  private readonly transport: Transport;
  private readonly publishers = new Set<Publisher>();
  private readonly consumers = new Set<Consumer>();
  /** Producer ids of unary publishes without one (dedup by default). */
  private readonly lanes = new ProducerLanes();
  private lastRefresh = 0;
  private refreshing: Promise<void> | undefined;

  /** Exclusive queues this session declared: their leases are renewed, and they go with the session. */
  private readonly exclusive = new Map<string, QueueArguments | undefined>();
  private readonly keepAlive: NodeJS.Timeout;

  constructor(options: ConnectOptions) {
    this.transport = new Transport(options);
    this.keepAlive = setInterval(() => this.renewExclusive(), options.sessionKeepAliveMs ?? 10_000);
    this.keepAlive.unref();
  }

  /** This client's session id (sent with every call; exclusive queues belong to it). */
  get sessionId(): string {
    return this.transport.sessionId;
  }

  private renewExclusive(): void {
    for (const [name, args] of this.exclusive) {
      this.declareQueue(name, args).catch(() => undefined);
    }
  }

  /** The configured node addresses. */
  get nodes(): readonly string[] {
    return this.transport.nodes;
  }

  /** The cached address of a queue's leader (leader-aware routing), if known. */
  leaderOf(queue: string): string | undefined {
    return this.transport.leaderOf(queue);
  }

  // ----- topology -------------------------------------------------------------------------

  async declareQueue(name: string, args?: QueueArguments, options: DeclareQueueOptions = {}): Promise<DeclareQueueResult> {
    const response = await this.transport.unary(BrokerService.declareQueue, {
      name,
      arguments: queueArguments(args),
      passive: options.passive ?? false,
    });
    if (args?.exclusive === true && options.passive !== true) this.exclusive.set(name, args);
    this.learnLeaderFrom(name, response.leader);
    return {
      name: response.name ?? name,
      created: response.created ?? false,
      warnings: [...(response.warnings ?? [])],
      members: [...(response.members ?? [])],
    };
  }

  /** Deletes a queue; resolves with the number of messages dropped. */
  async deleteQueue(name: string, options: DeleteQueueOptions = {}): Promise<{ messagesDropped: number }> {
    const response = await this.transport.unary(BrokerService.deleteQueue, { name, ifUnused: options.ifUnused ?? false, ifEmpty: options.ifEmpty ?? false });
    this.transport.forgetLeader(name);
    this.exclusive.delete(name);
    return { messagesDropped: wireNumber(response.messagesDropped) };
  }

  // ------------------------------------------------------------------ listing

  /** Exchanges, sorted by name (the built-in amq.* ones flagged; the default exchange "" is not listed). */
  async listExchanges(): Promise<ExchangeInfo[]> {
    const response = await this.transport.unary(BrokerService.listExchanges, {});
    return (response.exchanges ?? []).map((e) => ({
      name: e.name ?? '',
      type: (e.type ?? 'direct') as ExchangeType,
      autoDelete: e.autoDelete ?? false,
      alternateExchange: e.alternateExchange ? e.alternateExchange : null,
      builtIn: e.builtIn ?? false,
    }));
  }

  /** Bindings, optionally only those from `source`, or to a queue or an exchange. */
  async listBindings(filter: { source?: string; queue?: string; exchange?: string } = {}): Promise<BindingInfo[]> {
    const response = await this.transport.unary(BrokerService.listBindings, { source: filter.source ?? '', queue: filter.queue ?? '', exchange: filter.exchange ?? '' });
    return (response.bindings ?? []).map((b) => ({
      source: b.source ?? '',
      destination: b.queue ? { queue: b.queue } : { exchange: b.exchange ?? '' },
      bindingKey: b.bindingKey ?? '',
      arguments: decodeHeaders(b.arguments ?? {}),
    }));
  }

  /** A queue's consumers, from its leader, in subscription order. */
  async listConsumers(queue: string): Promise<ConsumerInfo[]> {
    const preferred = await this.queueRoute(queue);
    const response = await this.transport.unary(BrokerService.listConsumers, { queue }, { queue, ...(preferred === undefined ? {} : { preferred }) });
    return (response.consumers ?? []).map((c) => ({
      consumerTag: c.consumerTag ?? '',
      prefetch: c.prefetch ?? 0,
      priority: c.priority ?? 0,
      unacked: c.unacked ?? 0,
      active: c.active ?? false,
    }));
  }

  // ------------------------------------------------------------------ users (docs/security.md)

  /**
   * Creates a user or changes one: its tags (replaced) and, when given, its password. A user
   * created without a password authenticates only with a client certificate naming it.
   * Needs the `administrator` tag when the brokers require authentication.
   */
  async putUser(name: string, options: { password?: string; tags?: readonly string[] } = {}): Promise<{ created: boolean }> {
    const response = await this.transport.unary(BrokerService.putUser, { name, ...(options.password !== undefined ? { password: options.password } : {}), tags: [...(options.tags ?? [])] });
    return { created: response.created ?? false };
  }

  async deleteUser(name: string): Promise<void> {
    await this.transport.unary(BrokerService.deleteUser, { name });
  }

  async listUsers(): Promise<UserInfo[]> {
    const response = await this.transport.unary(BrokerService.listUsers, {});
    return (response.users ?? []).map((u) => ({ name: u.name ?? '', tags: [...(u.tags ?? [])], hasPassword: u.hasPassword ?? false, permissions: permissionsOf(u.permissions) }));
  }

  /** RabbitMQ's three regular expressions over queue and exchange names ("" matches nothing). */
  async setPermissions(user: string, permissions: Permissions): Promise<void> {
    await this.transport.unary(BrokerService.setPermissions, { user, permissions });
  }

  async clearPermissions(user: string): Promise<void> {
    await this.transport.unary(BrokerService.clearPermissions, { user });
  }

  /** Who the broker takes this client for, and what it may do. */
  async whoAmI(): Promise<WhoAmI> {
    const response = await this.transport.unary(BrokerService.whoAmI, {});
    return {
      user: response.user ?? '',
      mechanism: response.mechanism ?? '',
      tags: [...(response.tags ?? [])],
      permissions: permissionsOf(response.permissions),
      authenticationRequired: response.authenticationRequired ?? false,
    };
  }

  // ------------------------------------------------------------------ membership (docs/operations.md)
  // Each records the intent in the metadata and returns; the groups' leaders carry it out
  // (a new replica catches up as a learner, then votes): follow it with clusterStatus().
  // Each needs the `administrator` tag when the brokers require authentication.

  /** Adds a node started with `join` (its peer listener at `peerAddress`) to the cluster. */
  async addNode(node: string, peerAddress: string): Promise<{ changed: boolean }> {
    return changed(await this.transport.unary(BrokerService.addNode, { node, peerAddress }));
  }

  /** Moves the node's queue replicas to `replacement` (or shrinks them away), then removes it. */
  async removeNode(node: string, options: { replacement?: string } = {}): Promise<{ changed: boolean }> {
    return changed(await this.transport.unary(BrokerService.removeNode, { node, replacement: options.replacement ?? '' }));
  }

  /** Adds a replica of the queue on `node`. */
  async growQueue(queue: string, node: string): Promise<{ changed: boolean }> {
    return changed(await this.transport.unary(BrokerService.growQueue, { queue, node }));
  }

  /** Removes the queue's replica on `node`. */
  async shrinkQueue(queue: string, node: string): Promise<{ changed: boolean }> {
    return changed(await this.transport.unary(BrokerService.shrinkQueue, { queue, node }));
  }

  /** Makes `node` the queue's preferred leader; the current leader hands over. */
  async transferLeadership(queue: string, node: string): Promise<{ changed: boolean }> {
    return changed(await this.transport.unary(BrokerService.transferLeadership, { queue, node }));
  }

  /** Spreads the queues' leaders over the reachable nodes. */
  async rebalance(): Promise<{ changed: boolean }> {
    return changed(await this.transport.unary(BrokerService.rebalance, {}));
  }

  /** The groups that would lose their majority if `node` stopped (empty lists: it is safe to stop). */
  async quorumCritical(node: string): Promise<{ queues: string[]; metadata: boolean }> {
    const response = await this.transport.unary(BrokerService.quorumCritical, { node });
    return { queues: [...(response.queues ?? [])], metadata: response.metadata ?? false };
  }

  async purgeQueue(name: string): Promise<{ messagesDropped: number }> {
    const response = await this.transport.unary(BrokerService.purgeQueue, { name });
    this.learnLeaderFrom(name, response.leader);
    return { messagesDropped: wireNumber(response.messagesDropped) };
  }

  async declareExchange(name: string, type: ExchangeType, options: DeclareExchangeOptions = {}): Promise<{ created: boolean }> {
    const response = await this.transport.unary(BrokerService.declareExchange, {
      name,
      type,
      autoDelete: options.autoDelete ?? false,
      alternateExchange: options.alternateExchange ?? '',
      passive: options.passive ?? false,
    });
    return { created: response.created ?? false };
  }

  async deleteExchange(name: string, options: { ifUnused?: boolean } = {}): Promise<void> {
    await this.transport.unary(BrokerService.deleteExchange, { name, ifUnused: options.ifUnused ?? false });
  }

  async bind(binding: Binding): Promise<{ created: boolean }> {
    const response = await this.transport.unary(BrokerService.bind, bindingRequest(binding));
    return { created: response.created ?? false };
  }

  async unbind(binding: Binding): Promise<{ removed: boolean }> {
    const response = await this.transport.unary(BrokerService.unbind, bindingRequest(binding));
    return { removed: response.removed ?? false };
  }

  /** A declare or purge named the queue's leader: publishers and consumers open their streams there. */
  private learnLeaderFrom(queue: string, leader: string | null | undefined): void {
    if (leader !== undefined && leader !== null && leader !== '') this.transport.learnLeader(queue, leader);
  }

  // ----- status ---------------------------------------------------------------------------

  async queueStatus(name: string): Promise<QueueStatus> {
    const response = await this.transport.unary(BrokerService.queueStatus, { name });
    const status = this.toQueueStatus(response);
    if (status.leaderAddress !== undefined) this.transport.learnLeader(name, status.leaderAddress);
    return status;
  }

  /**
   * The cluster's nodes and queues; also refreshes the client's routing cache. `depths`: also
   * the depths of queues the answering node holds no replica of (it asks the other nodes).
   */
  async clusterStatus(options: { depths?: boolean } = {}): Promise<ClusterStatus> {
    const response = await this.transport.unary(BrokerService.clusterStatus, { depths: options.depths === true });
    this.lastRefresh = Date.now();
    const nodes: Record<string, NodeStatus> = {};
    for (const n of response.nodes ?? []) {
      const node: NodeStatus = {
        id: n.id ?? '',
        address: n.address ?? '',
        reachable: n.reachable ?? false,
        diskAlarm: n.diskAlarm ?? false,
        memoryAlarm: n.memoryAlarm ?? false,
        state: n.state || 'active',
        peerAddress: n.peerAddress ?? '',
        voter: n.voter ?? false,
      };
      nodes[node.id] = node;
      this.transport.learnNode(node.id, node.address);
    }
    const queues: Record<string, QueueStatus> = {};
    for (const q of response.queues ?? []) {
      const status = this.toQueueStatus(q);
      queues[status.name] = status;
      if (status.leaderAddress !== undefined) this.transport.learnLeader(status.name, status.leaderAddress);
      else this.transport.forgetLeader(status.name);
    }
    return { node: response.node ?? '', metadataLeader: response.metadataLeader ?? '', nodes, queues };
  }

  private toQueueStatus(q: quorumq.v1.QueueStatusResponse.$Properties): QueueStatus {
    const leader = q.leader ?? '';
    const leaderAddress = this.transport.resolveNode(leader);
    return {
      name: q.name ?? '',
      leader,
      ...(leaderAddress === undefined ? {} : { leaderAddress }),
      members: [...(q.members ?? [])],
      commitIndex: wireNumber(q.commitIndex),
      ready: wireNumber(q.ready),
      unacked: wireNumber(q.unacked),
      delayed: wireNumber(q.delayed),
      deadLettering: wireNumber(q.deadLettering),
      bytes: wireNumber(q.bytes),
      consumers: q.consumers ?? 0,
      term: wireNumber(q.term),
      retiring: [...(q.retiring ?? [])],
      voters: [...(q.voters ?? [])],
      learners: [...(q.learners ?? [])],
      ...(q.compaction == null
        ? {}
        : {
            compaction: {
              keys: wireNumber(q.compaction.keys),
              replaced: wireNumber(q.compaction.replaced),
              tombstones: wireNumber(q.compaction.tombstones),
              tombstonesExpired: wireNumber(q.compaction.tombstonesExpired),
            },
          }),
    };
  }

  /** Refreshes the routing cache, at most once per `topologyRefreshMs`; never throws. */
  private refreshTopology(): Promise<void> {
    if (!this.transport.leaderRouting || this.transport.isClosed) return Promise.resolve();
    if (this.refreshing !== undefined) return this.refreshing;
    if (Date.now() - this.lastRefresh < this.transport.topologyRefreshMs) return Promise.resolve();
    this.lastRefresh = Date.now();
    this.refreshing = this.clusterStatus().then(
      () => undefined,
      () => undefined,
    ).finally(() => {
      this.refreshing = undefined;
    });
    return this.refreshing;
  }

  private async queueRoute(queue: string): Promise<string | undefined> {
    let leader = this.transport.leaderOf(queue);
    if (leader === undefined && this.transport.leaderRouting) {
      await this.refreshTopology();
      leader = this.transport.leaderOf(queue);
    }
    return leader;
  }

  // ----- publishing -----------------------------------------------------------------------

  /**
   * Publishes one message with a unary call, failing over to another node when the call fails
   * with UNAVAILABLE (e.g. its connection broke). Resolves with the outcome; rejects with a
   * QuorumqError for outcome FAILED (its `code` is the outcome's status code; not retried:
   * retry it yourself when `retriable`).
   *
   * Retries never store a message twice: without a `producerId` (and `sequence`) the SDK
   * gives the publish one of the client's own producer ids and the next sequence for it, so
   * the broker answers a retry of a publish it already stored with DUPLICATE, reported as
   * 'confirmed'. With your own `producerId`, your sequence does the same and a DUPLICATE is
   * reported as 'duplicate'.
   */
  async publish(exchange: string, routingKey: string, body: Body, options: PublishOptions = {}): Promise<PublishResult> {
    const own = options.producerId === undefined && options.sequence === undefined;
    const lane = own ? this.lanes.acquire() : undefined;
    try {
      const dedup = lane === undefined ? options : { ...options, producerId: lane.producerId, sequence: lane.nextSequence++ };
      const request = { ...encodePublish(exchange, routingKey, body, dedup), publishId: 1 };
      // The default exchange routes to the queue named by the key: start at that queue's
      // leader when it is known, which saves the broker a forwarding hop.
      const leader = exchange === '' && this.transport.leaderRouting ? this.transport.leaderOf(routingKey) : undefined;
      let attempts = 0;
      return await this.transport.withFailover(
        async (address) => {
          attempts += 1;
          const response = await this.transport.unaryOn(address, BrokerService.publish, request);
          let result: PublishResult;
          try {
            result = toPublishResult(response, address);
          } catch (error) {
            // An outcome FAILED is the broker's answer, not a failed call: not retried here.
            throw new NoFailover(toQuorumqError(error, address));
          }
          // A retry of this publish found the first attempt stored: that is its confirm.
          return lane !== undefined && attempts > 1 && result.outcome === 'duplicate' ? { ...result, outcome: 'confirmed' } : result;
        },
        leader === undefined ? {} : { preferred: leader },
      );
    } finally {
      if (lane !== undefined) this.lanes.release(lane);
    }
  }

  /** A publisher over one PublishStream, with up to `maxInFlight` publishes outstanding. */
  createPublisher(options: PublisherOptions = {}): Publisher {
    const publisher = new Publisher(this.transport, options);
    this.publishers.add(publisher);
    return publisher;
  }

  // ----- consuming ------------------------------------------------------------------------

  /** Subscribes to a queue: iterate the consumer with `for await`. */
  consume(queue: string, options?: ConsumeOptions): Consumer;
  /**
   * Subscribes to a queue and calls `handler` for each delivery, one at a time: the delivery
   * is acked when the handler resolves and nacked (requeued) when it throws, unless the handler
   * settled it itself.
   */
  consume(queue: string, options: ConsumeOptions, handler: DeliveryHandler): Consumer;
  consume(queue: string, options: ConsumeOptions = {}, handler?: DeliveryHandler): Consumer {
    const consumer = new Consumer(this.transport, queue, options, () => this.refreshTopology());
    this.consumers.add(consumer);
    void consumer.ended.then(() => this.consumers.delete(consumer));
    if (handler !== undefined) void runHandler(consumer, handler, options.onError);
    return consumer;
  }

  /** basic.get: one message or null. With `manualAck`, settle it (ack / nack / reject) via SettleGet. */
  async get(queue: string, options: GetOptions = {}): Promise<Delivery | null> {
    const manualAck = options.manualAck ?? false;
    const preferred = await this.queueRoute(queue);
    const response = await this.transport.unary(BrokerService.get, { queue, manualAck }, { queue, ...(preferred === undefined ? {} : { preferred }) });
    if (response.delivery === null || response.delivery === undefined) return null;
    return new DeliveryImpl(response.delivery, 0, async (delivery, settle) => {
      const target = this.transport.leaderOf(queue);
      await this.transport.unary(
        BrokerService.settleGet,
        { queue, consumerTag: delivery.consumerTag, settle },
        { queue, ...(target === undefined ? {} : { preferred: target }) },
      );
    }, !manualAck);
  }

  // ----- moving ---------------------------------------------------------------------------

  /**
   * Moves messages from a queue to an exchange; resolves with the final progress. Fails over
   * like any call until the move started; after that, a lost node or a leadership change
   * does not stop the move (it goes on in the broker): the client follows it on the queue's
   * new leader by its id, as long as each round of failover finds it further along.
   */
  async move(options: MoveOptions): Promise<MoveProgress> {
    const request: quorumq.v1.MoveRequest.$Properties = {
      sourceQueue: options.sourceQueue,
      destinationExchange: options.destinationExchange,
      routingKey: options.routingKey ?? '',
      limit: options.limit ?? 0,
    };
    const state: MoveFollow = { moveId: '', last: undefined };
    for (;;) {
      const before = state.last;
      try {
        return await this.transport.withFailover((address) => this.moveOn(address, request, state, options), { queue: options.sourceQueue });
      } catch (error) {
        // Failover gave up; go on only if the move made progress since the last round.
        const progressed = state.last !== undefined && (before === undefined || state.last.moved !== before.moved);
        if (state.moveId !== '' && progressed && error instanceof QuorumqError && shouldFailover(error)) continue;
        throw error;
      }
    }
  }

  /** One move call on one node: starts the move, or follows it once its id is known. */
  private async moveOn(address: string, request: quorumq.v1.MoveRequest.$Properties, state: MoveFollow, options: MoveOptions): Promise<MoveProgress> {
    if (!this.transport.isConnected(address)) await this.transport.connected(address);
    return new Promise<MoveProgress>((resolve, reject) => {
      const method = BrokerService.move;
      const call: ClientReadableStream<quorumq.v1.MoveProgress> = this.transport.client(address).makeServerStreamRequest(
        method.path, method.requestSerialize, method.responseDeserialize, { ...request, moveId: state.moveId },
      );
      call.on('data', (p: quorumq.v1.MoveProgress) => {
        if (p.moveId) state.moveId = p.moveId;
        state.last = { moved: wireNumber(p.moved), total: wireNumber(p.total), done: p.done ?? false };
        try {
          options.onProgress?.(state.last);
        } catch {
          // A throwing progress callback does not stop the move.
        }
      });
      call.on('error', () => undefined);
      call.on('status', (status: StatusObject) => {
        if (status.code === 0) {
          resolve(state.last ?? { moved: 0, total: 0, done: true });
          return;
        }
        const error = toQuorumqError(status, address);
        // A move that started but cannot be followed (a broker without move ids) must not
        // be started again by a failover.
        reject(state.last !== undefined && state.moveId === '' ? new NoFailover(error) : error);
      });
    });
  }

  // ----- lifecycle ------------------------------------------------------------------------

  /**
   * Ends the client: cancels every consumer and waits until the broker ended each subscription
   * (as `consumer.close()` does), deletes this session's exclusive queues (best effort: if that
   * fails, their leases run out on the brokers), destroys every publisher (flush them first if
   * you need their outcomes) and closes all channels.
   */
  async close(): Promise<void> {
    clearInterval(this.keepAlive);
    // Each resolves once the broker ended that subscription.
    await Promise.all([...this.consumers].map((consumer) => consumer.cancel()));
    this.consumers.clear();
    // The session ends: so do its exclusive queues (spec 7). If this fails (no quorum), their
    // leases expire on the brokers instead.
    await Promise.all([...this.exclusive.keys()].map((name) => this.deleteQueue(name).catch(() => undefined)));
    for (const publisher of this.publishers) publisher.destroy();
    this.publishers.clear();
    this.transport.close();
  }
}

async function runHandler(consumer: Consumer, handler: DeliveryHandler, onError: ConsumeOptions['onError']): Promise<void> {
  try {
    for await (const delivery of consumer) {
      // The SDK's own settlements are not awaited: they go out in order, in this turn's batch
      // (consumer.close() sends them before it ends the stream).
      try {
        await handler(delivery);
        if (!delivery.settled) void delivery.ack();
      } catch (error) {
        if (!delivery.settled) void delivery.nack({ requeue: true });
        onError?.(error, delivery);
      }
    }
  } catch {
    // A fatal consumer error: reported through `consumer.ended`.
  }
}

/** Connects to a quorumq cluster (channels are opened lazily, on the first call). */
export function connect(options: ConnectOptions): QuorumqClient {
  return new QuorumqClient(options);
}

/** A user's permissions: regular expressions over queue and exchange names. */
export interface Permissions {
  readonly configure: string;
  readonly write: string;
  readonly read: string;
}

export interface UserInfo {
  readonly name: string;
  readonly tags: string[];
  readonly hasPassword: boolean;
  /** Null: none set (the user may do nothing on queues and exchanges). */
  readonly permissions: Permissions | null;
}

export interface WhoAmI {
  /** "" when the broker does not require authentication and the client sent none. */
  readonly user: string;
  /** "password", "certificate" or "none". */
  readonly mechanism: string;
  readonly tags: string[];
  readonly permissions: Permissions | null;
  readonly authenticationRequired: boolean;
}

function permissionsOf(p: { configure?: string | null; write?: string | null; read?: string | null } | null | undefined): Permissions | null {
  return p == null ? null : { configure: p.configure ?? '', write: p.write ?? '', read: p.read ?? '' };
}

export interface ExchangeInfo {
  readonly name: string;
  readonly type: ExchangeType;
  readonly autoDelete: boolean;
  readonly alternateExchange: string | null;
  readonly builtIn: boolean;
}

export interface BindingInfo {
  readonly source: string;
  readonly destination: { readonly queue: string } | { readonly exchange: string };
  readonly bindingKey: string;
  readonly arguments: DecodedHeaders;
}

export interface ConsumerInfo {
  readonly consumerTag: string;
  /** 0 = unlimited. */
  readonly prefetch: number;
  readonly priority: number;
  readonly unacked: number;
  /** With single active consumer: whether this one is served (always true otherwise). */
  readonly active: boolean;
}

const changed = (response: { changed?: boolean | null }): { changed: boolean } => ({ changed: response.changed ?? false });
