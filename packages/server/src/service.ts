/**
 * The client API (proto/quorumq/v1/broker.proto). Any node serves any call: topology
 * changes go to the metadata group's leader, publishes are routed here and forwarded to
 * each target queue's leader, and queue-local calls (consume, get, status) are served by
 * the queue's leader, proxied through this node when it is not the leader.
 */
import { randomUUID } from 'node:crypto';
import {
  makeGenericClientConstructor,
  Metadata,
  type Client,
  type ClientDuplexStream,
  type sendUnaryData,
  type ServerDuplexStream,
  type ServerUnaryCall,
  type ServerWritableStream,
  type ServiceError,
  type UntypedServiceImplementation,
} from '@grpc/grpc-js';
import { BrokerService, quorumq } from '@quorumq/proto';
import { route, TopologyError, type Command, type EnqueueCommand, type QueueArgumentsInput, type Reply, type TopologyCommand } from '@quorumq/queue';

import { BrokerError, Status, failedPrecondition, invalidArgument, notFound, reasonOf, resourceExhausted, toServiceError, unavailable, Reason } from './errors.js';
import { bindingArgumentsFromWire, headersFromWire } from './headers.js';
import type { MetaReply } from './meta-machine.js';
import type { BrokerNode, LocalQueue } from './node.js';
import { publishedDeaths } from './deaths.js';
import { placeMembers } from './placement.js';
import { queueCounts, queueMove } from './queue-view.js';
import { sleep as sleepOn } from './node-env.js';
import { PUBLISH_WINDOW, PUBLISHES_PER_TURN, PublishWindow } from './publish-window.js';
import { deliveryOf } from './queue-replica.js';
import { rawMessageOf } from './wire.js';
import { DeliveryOutbox } from './delivery-outbox.js';
import { whenSent } from './response-sent.js';
import { ANONYMOUS, AccessControl, exchange as exchangeResource, queue as queueResource, type Principal } from './access-control.js';
import { ClientAuthenticator, NO_CREDENTIALS, unauthenticated, type CallCredentials } from './client-auth.js';
import { MembershipAdmin } from './membership-admin.js';
import { UserAdmin } from './user-admin.js';
import { listBindings, listConsumers, listExchanges } from './listing.js';
import { auditLogger } from './audit-log.js';
import type { PeerCredentials } from './tls-credentials.js';
import { forwardPrincipal, forwardedPrincipal, onlyViaPeer, servedWhile, viaPeer } from './via-peer.js';
import { clientCertificateIdentity } from './tls-identity.js';
import { CHANNEL_WINDOW_OPTIONS } from './http2-window.js';

import pb = quorumq.v1;

const BrokerClient = makeGenericClientConstructor(BrokerService, 'Broker');

/** What every incoming call has (grpc-js's ServerSurfaceCall, which it does not export). */
type ServerSurfaceCall = Pick<ServerUnaryCall<unknown, unknown>, 'metadata' | 'getAuthContext' | 'getPeer'>;

/** The caller's session (the SDK sends one id per client), for exclusive queues (spec 7). */
export const SESSION_METADATA = 'quorumq-session';

function sessionOf(call: { metadata: Metadata }): string | undefined {
  const value = call.metadata.get(SESSION_METADATA)[0];
  return typeof value === 'string' && value !== '' && value.length <= 128 ? value : undefined;
}

const withSession = (sessionId: string | undefined): { sessionId?: string } => (sessionId === undefined ? {} : { sessionId });

type Unary<Req, Res> = (call: ServerUnaryCall<Req, Res>, callback: sendUnaryData<Res>) => void;

function unary<Req, Res>(handler: (request: Req, call: ServerUnaryCall<Req, Res>) => Promise<Res>): Unary<Req, Res> {
  return (call, callback) => {
    handler(call.request, call).then(
      (response) => callback(null, response),
      (error: unknown) => callback(toServiceError(error) as ServiceError),
    );
  };
}

/** What a server call offers to authenticate with (client-auth.ts). */
function credentialsOf(call: ServerSurfaceCall): CallCredentials {
  return { metadata: call.metadata, certificateIdentity: clientCertificateIdentity(call), peer: call.getPeer() };
}

function metaError(reply: Extract<MetaReply, { ok: false }>): BrokerError {
  const codes: Record<string, Status> = {
    INVALID_ARGUMENT: Status.INVALID_ARGUMENT,
    NOT_FOUND: Status.NOT_FOUND,
    FAILED_PRECONDITION: Status.FAILED_PRECONDITION,
    PERMISSION_DENIED: Status.PERMISSION_DENIED,
    RESOURCE_EXHAUSTED: Status.RESOURCE_EXHAUSTED,
  };
  return new BrokerError(codes[reply.code] ?? Status.INTERNAL, reply.reason, reply.message);
}

function queueError(reply: Extract<Reply, { type: 'error' }>, queue: string): BrokerError {
  switch (reply.code) {
    case Reason.INVALID_ARGUMENT:
      return invalidArgument(`queue ${JSON.stringify(queue)}: ${reply.message}`);
    case Reason.UNKNOWN_CONSUMER:
    case Reason.UNKNOWN_DELIVERY_TAG:
    case Reason.CONSUMER_EXISTS:
    case Reason.SEQUENCE_TOO_OLD:
      return failedPrecondition(reply.code, `queue ${JSON.stringify(queue)}: ${reply.message}`);
    case 'FAILED_PRECONDITION':
      return failedPrecondition(Reason.PRECONDITION_FAILED, `queue ${JSON.stringify(queue)}: ${reply.message}`);
    case Reason.QUEUE_DELETED:
      return notFound(Reason.QUEUE_NOT_FOUND, `queue ${JSON.stringify(queue)} was deleted`);
    default:
      return failedPrecondition(String(reply.code), `queue ${JSON.stringify(queue)}: ${reply.message}`);
  }
}

function requireName(value: string | null | undefined, what: string): string {
  if (typeof value !== 'string' || value === '') throw invalidArgument(`${what} is required`);
  return value;
}

/** Spec 7 arguments from the wire, without defaults (the machine fills them in). */
function queueArgumentsFromWire(args: pb.QueueArguments.$Properties | null | undefined): { input: QueueArgumentsInput; replicas: number | null } {
  const a = args ?? {};
  if (a.durable != null && !a.durable) {
    throw invalidArgument(
      'non-durable queues are not supported: every quorumq queue is replicated by Raft and durable; declare it without durable = false',
      Reason.DURABLE_REQUIRED,
    );
  }
  const input: Record<string, unknown> = {};
  const copy = (key: keyof pb.QueueArguments.$Properties, target: string): void => {
    const value = a[key];
    if (value !== undefined && value !== null) input[target] = value;
  };
  copy('deliveryLimit', 'deliveryLimit');
  copy('deadLetterExchange', 'deadLetterExchange');
  copy('deadLetterRoutingKey', 'deadLetterRoutingKey');
  copy('deadLetterStrategy', 'deadLetterStrategy');
  copy('messageTtlMs', 'messageTtlMs');
  copy('maxLength', 'maxLength');
  copy('maxLengthBytes', 'maxLengthBytes');
  copy('overflow', 'overflow');
  copy('maxPriority', 'maxPriority');
  copy('singleActiveConsumer', 'singleActiveConsumer');
  copy('dedupWindowMs', 'dedupWindowMs');
  if (a.consumerTimeoutMs != null) input.consumerTimeoutMs = a.consumerTimeoutMs === 0 ? null : a.consumerTimeoutMs;
  copy('autoDelete', 'autoDelete');
  copy('expiresMs', 'expiresMs');
  copy('exclusive', 'exclusive');
  copy('compactionKey', 'compactionKey');
  copy('compactionTombstoneRetentionMs', 'compactionTombstoneRetentionMs');
  copy('compactionMinLagMs', 'compactionMinLagMs');
  copy('compactionDeadLetter', 'compactionDeadLetter');
  return { input: input as QueueArgumentsInput, replicas: a.replicas ?? null };
}

export class BrokerApi {
  /** Broker clients to other nodes' peer listeners, by node id. */
  private readonly clients = new Map<string, Client>();
  readonly access: AccessControl;
  readonly authenticator: ClientAuthenticator;
  private readonly users: UserAdmin;
  private readonly membership: MembershipAdmin;

  constructor(
    private readonly node: BrokerNode,
    /** How this node dials its peers (peer TLS, or plaintext), for proxied calls. */
    private readonly peerCredentials: PeerCredentials,
  ) {
    this.access = new AccessControl(() => node.meta.users);
    const audit = auditLogger(node.logger);
    this.authenticator = new ClientAuthenticator(node.config.requireAuthentication, () => node.meta.users, (failure) => {
      node.metrics.authenticationFailures.inc({ mechanism: failure.mechanism });
      audit.warn({ audit: 'authentication_failed', user: failure.user?.slice(0, 255) ?? null, mechanism: failure.mechanism, peer: failure.peer }, 'authentication failed');
    });
    this.users = new UserAdmin({
      users: () => node.meta.users,
      access: this.access,
      authenticationRequired: node.config.requireAuthentication,
      propose: (command) => node.router.proposeMeta(command),
      metaError,
      logger: audit,
    });
    this.membership = new MembershipAdmin({
      nodeId: node.nodeId,
      directory: node.directory,
      access: this.access,
      metaVoters: () => node.metaGroup.status().config.voters,
      isMetaMember: () => node.metaGroup.isMember,
      queues: () => node.knownQueues.values(),
      localQueue: (name) => node.queues.get(name),
      queueDefinition: (name) => node.router.queueDefinition(name),
      isUp: (id) => id === node.nodeId || node.link.isConnected(id),
      propose: (command) => node.router.proposeMeta(command),
      metaError,
      logger: audit,
    });
  }

  /**
   * The caller of a client call. A refusal is final only once this node's copy of the users
   * is known current: a user just created (or a password just changed) through another node
   * may not have reached this one yet, so it first catches up with the metadata leader and,
   * if that applied anything, checks again.
   */
  private async principalOf(call: ServerSurfaceCall): Promise<Principal> {
    // A call another node proxied: that node authenticated its caller and says who it is.
    if (viaPeer(call) !== null) {
      const forwarded = forwardedPrincipal(call);
      // A node that lets anonymous callers in (authentication off there) cannot vouch for them here.
      if (forwarded.kind === 'anonymous' && this.node.config.requireAuthentication) throw unauthenticated(NO_CREDENTIALS);
      return forwarded;
    }
    if (!this.authenticator.required) return ANONYMOUS;
    const credentials = credentialsOf(call);
    const first = await this.authenticator.check(credentials);
    if ('kind' in first) return first;
    const applied = this.node.meta.appliedIndex;
    await this.node.router.barrier.wait().catch(() => undefined);
    const second = this.node.meta.appliedIndex === applied ? first : await this.authenticator.check(credentials);
    if ('kind' in second) return second;
    return this.authenticator.refuse(second);
  }

  /**
   * Checks a permission; a refusal is final once this node's copy of the permissions is
   * current (as for principalOf). Returns null (no wait) when allowed, the common case.
   */
  private permit(check: () => void): Promise<void> | null {
    try {
      check();
      return null;
    } catch (error) {
      if (!(error instanceof BrokerError) || error.reason !== Reason.ACCESS_REFUSED) throw error;
      const applied = this.node.meta.appliedIndex;
      return this.node.router.barrier.wait().then(
        () => {
          if (this.node.meta.appliedIndex === applied) throw error;
          check();
        },
        () => {
          throw error;
        },
      );
    }
  }

  private async require(principal: Principal, permission: 'configure' | 'write' | 'read', resource: ReturnType<typeof queueResource>): Promise<void> {
    await this.permit(() => this.access.require(principal, permission, resource));
  }

  private async requireAny(principal: Principal, resource: ReturnType<typeof queueResource>): Promise<void> {
    await this.permit(() => this.access.requireAny(principal, ['configure', 'write', 'read'], resource));
  }

  /** A unary handler that runs once the caller is authenticated. */
  private unaryAs<Req, Res>(handler: (request: Req, principal: Principal, call: ServerUnaryCall<Req, Res>) => Promise<Res> | Res): Unary<Req, Res> {
    return unary(async (request: Req, call: ServerUnaryCall<Req, Res>) => handler(request, await this.principalOf(call), call));
  }

  /**
   * A Broker client to node `leader`'s peer listener (its address in `peers`, with the peer
   * credentials), for proxied calls; the peer listener serves them only to authenticated
   * peers (proxyMetadata carries this node's peer credentials).
   */
  private clientFor(leader: string): Client {
    let client = this.clients.get(leader);
    if (client === undefined) {
      const address = this.node.directory.peerAddress(leader);
      if (address === undefined || leader === this.node.nodeId) throw unavailable(Reason.NO_LEADER, `no peer address for node ${JSON.stringify(leader)}`);
      // What a leader answers holds at most max_message_bytes of body (its own limit may be
      // larger than this node's): no receive limit between nodes.
      client = new BrokerClient(address, this.peerCredentials.channel(leader), {
        'grpc.max_receive_message_length': -1,
        'grpc.max_send_message_length': -1,
        ...CHANNEL_WINDOW_OPTIONS,
        ...this.peerCredentials.channelOptions(leader),
      });
      this.clients.set(leader, client);
    }
    return client;
  }

  /**
   * The metadata of a call proxied to another node for `call`: this node's peer credentials
   * (its id, the cluster secret) and what the client sent that the leader needs (its session).
   */
  private proxyMetadata(call: ServerSurfaceCall | undefined, principal: Principal): Metadata {
    const metadata = this.node.peerCallMetadata();
    forwardPrincipal(metadata, principal);
    const session = call === undefined ? undefined : sessionOf(call);
    if (session !== undefined) metadata.set(SESSION_METADATA, session);
    return metadata;
  }

  close(): void {
    for (const client of this.clients.values()) client.close();
    this.clients.clear();
  }

  /** Spec 2: a body larger than max_message_bytes is the outcome REJECTED (not an RPC error); null when it fits. */
  private rejectTooLarge(publishId: number, message: pb.Message.$Properties): pb.PublishResponse.$Properties | null {
    const size = message.body?.length ?? 0;
    if (size <= this.node.config.maxMessageBytes) return null;
    this.node.metrics.publishes.inc({ outcome: 'rejected' });
    return {
      publishId,
      outcome: pb.PublishOutcome.PUBLISH_OUTCOME_REJECTED,
      reason: `message body of ${size} bytes exceeds max_message_bytes (${this.node.config.maxMessageBytes})`,
      queues: [],
      statusCode: Status.RESOURCE_EXHAUSTED,
    };
  }

  // ------------------------------------------------------------------------------------
  // Topology

  async declareQueue(request: pb.DeclareQueueRequest, principal: Principal, sessionId?: string): Promise<pb.DeclareQueueResponse.$Properties> {
    const name = requireName(request.name, 'name');
    const { input, replicas } = queueArgumentsFromWire(request.arguments);
    if (request.passive) {
      await this.requireAny(principal, queueResource(name));
    } else {
      await this.require(principal, 'configure', queueResource(name));
      // RabbitMQ's rule: dead-lettering writes to the exchange on the queue's behalf.
      if (typeof input.deadLetterExchange === 'string') {
        await this.require(principal, 'write', exchangeResource(input.deadLetterExchange));
        await this.require(principal, 'read', queueResource(name));
      }
    }
    if (input.exclusive === true && !request.passive) {
      if (sessionId === undefined) {
        throw invalidArgument(`an exclusive queue belongs to a client session: declare it with the SDK (metadata ${SESSION_METADATA})`, Reason.SESSION_REQUIRED);
      }
      // Its lease: unused (no consumer, no get, no redeclare by its session) this long, it goes.
      if (input.expiresMs === undefined) (input as Record<string, unknown>).expiresMs = this.node.config.exclusiveLeaseMs;
    }
    // New replicas go to active nodes (not to one being removed).
    const nodes = this.node.directory.activeIds();
    const clusterSize = nodes.length;
    const size = replicas ?? Math.min(this.node.config.defaultReplicas, clusterSize);
    if (size < 1 || size > clusterSize) {
      throw invalidArgument(`replicas must be between 1 and the cluster size (${clusterSize}), got ${size}`);
    }
    const reply = await this.node.router.proposeMeta({
      type: 'declareQueue',
      name,
      args: input,
      passive: request.passive,
      members: placeMembers(nodes, this.node.knownQueues.size, name, size),
      createdAt: this.node.env.now(),
    });
    if (!reply.ok) throw metaError(reply);
    const definition = reply.queue;
    if (definition === undefined) throw new BrokerError(Status.INTERNAL, Reason.INTERNAL, 'declare returned no queue');
    if (replicas !== null && replicas !== definition.members.length && !request.passive) {
      throw failedPrecondition(
        Reason.ARGUMENT_MISMATCH,
        `queue ${JSON.stringify(name)} exists with replicas = ${definition.members.length}, the declare asked for ${replicas}`,
      );
    }
    if (reply.changed) {
      // Wait (bounded) until the new queue's group has a leader, so a publish right after
      // the declare does not have to.
      await this.waitForQueueLeader(name, this.node.config.requestTimeoutMs);
    }
    if (definition.args.exclusive && !request.passive) {
      // Records the owner on the first declare, renews the lease after; another session
      // gets RESOURCE_LOCKED.
      const owned = await this.node.router.proposeQueue(name, { type: 'declare', ...withSession(sessionId) });
      if (owned.type === 'error') throw queueError(owned, name);
    } else if (!reply.changed && definition.args.expiresMs !== null) {
      // A redeclare renews the queue's `expires` lease (spec 7).
      await this.node.router.proposeQueue(name, { type: 'declare' }).catch(() => undefined);
    }
    return { name, created: reply.changed, warnings: [...(reply.warnings ?? [])], members: [...definition.members], leader: this.leaderAddress(name) };
  }

  /** Waits (bounded) until this node knows the new queue's leader, or is no member of it. */
  private async waitForQueueLeader(name: string, timeoutMs: number): Promise<void> {
    const definition = this.node.knownQueues.get(name);
    if (definition === undefined || !definition.members.includes(this.node.nodeId)) return;
    // The replica starts when this node applies the declare (already done: proposeMeta waits
    // for it) and reconciles at the end of that microtask batch.
    const local = this.node.queues.get(name) ?? (await Promise.resolve().then(() => this.node.queues.get(name)));
    if (local === undefined) return;
    await Promise.race([local.group.whenLeaderKnown(), sleepOn(this.node.env, timeoutMs)]);
  }

  async deleteQueue(request: pb.DeleteQueueRequest, principal: Principal, sessionId?: string): Promise<pb.DeleteQueueResponse.$Properties> {
    const name = requireName(request.name, 'name');
    await this.require(principal, 'configure', queueResource(name));
    const definition = await this.node.router.queueDefinition(name);
    const reply = await this.node.router.proposeQueue(name, { type: 'delete', ifUnused: request.ifUnused, ifEmpty: request.ifEmpty, ...withSession(sessionId) });
    if (reply.type === 'error') throw queueError(reply, name);
    const dropped = reply.type === 'deleted' ? reply.messagesDropped : 0;
    const meta = await this.node.router.proposeMeta({ type: 'deleteQueue', name, reason: 'delete', createdIndex: definition.createdIndex });
    if (!meta.ok) throw metaError(meta);
    this.node.logger.info({ queue: name, messagesDropped: dropped }, 'queue deleted');
    return { messagesDropped: dropped };
  }

  async purgeQueue(request: pb.PurgeQueueRequest, principal: Principal, sessionId?: string): Promise<pb.PurgeQueueResponse.$Properties> {
    const name = requireName(request.name, 'name');
    await this.require(principal, 'read', queueResource(name));
    const reply = await this.node.router.proposeQueue(name, { type: 'purge', ...withSession(sessionId) });
    if (reply.type === 'error') throw queueError(reply, name);
    const dropped = reply.type === 'purged' ? reply.messagesDropped : 0;
    this.node.logger.info({ queue: name, messagesDropped: dropped }, 'queue purged');
    return { messagesDropped: dropped, leader: this.leaderAddress(name) };
  }

  private async topology(command: TopologyCommand): Promise<Extract<MetaReply, { ok: true }>> {
    const reply = await this.node.router.proposeMeta({ type: 'topology', command });
    if (!reply.ok) throw metaError(reply);
    return reply;
  }

  async declareExchange(request: pb.DeclareExchangeRequest, principal: Principal): Promise<pb.DeclareExchangeResponse.$Properties> {
    const type = request.type;
    if (request.passive) {
      await this.requireAny(principal, exchangeResource(request.name));
    } else {
      await this.require(principal, 'configure', exchangeResource(request.name));
      // RabbitMQ's rule: unroutable messages go on to the alternate exchange.
      if (request.alternateExchange !== '') {
        await this.require(principal, 'write', exchangeResource(request.alternateExchange));
        await this.require(principal, 'read', exchangeResource(request.name));
      }
    }
    if (!request.passive && !['direct', 'fanout', 'topic', 'headers'].includes(type)) {
      throw invalidArgument(`exchange type must be direct, fanout, topic or headers, got ${JSON.stringify(type)}`);
    }
    const reply = await this.topology({
      type: 'declareExchange',
      name: request.name,
      exchangeType: (type || 'direct') as 'direct',
      autoDelete: request.autoDelete,
      alternateExchange: request.alternateExchange === '' ? null : request.alternateExchange,
      passive: request.passive,
    });
    return { created: reply.changed };
  }

  async deleteExchange(request: pb.DeleteExchangeRequest, principal: Principal): Promise<pb.DeleteExchangeResponse.$Properties> {
    await this.require(principal, 'configure', exchangeResource(request.name));
    await this.topology({ type: 'deleteExchange', name: request.name, ifUnused: request.ifUnused });
    return {};
  }

  private bindingOf(request: pb.BindRequest | pb.UnbindRequest) {
    const destination =
      request.destination === 'queue'
        ? { kind: 'queue' as const, name: request.queue ?? '' }
        : request.destination === 'exchange'
          ? { kind: 'exchange' as const, name: request.exchange ?? '' }
          : null;
    if (destination === null) throw invalidArgument('a binding needs a destination queue or exchange');
    return { source: request.source, destination, bindingKey: request.bindingKey, arguments: bindingArgumentsFromWire(request.arguments) };
  }

  /** A binding writes into its destination and reads from its source exchange (RabbitMQ's rule). */
  private async permitBinding(binding: ReturnType<BrokerApi['bindingOf']>, principal: Principal): Promise<void> {
    const destination = binding.destination.kind === 'queue' ? queueResource(binding.destination.name) : exchangeResource(binding.destination.name);
    await this.require(principal, 'write', destination);
    await this.require(principal, 'read', exchangeResource(binding.source));
  }

  async bind(request: pb.BindRequest, principal: Principal): Promise<pb.BindResponse.$Properties> {
    const binding = this.bindingOf(request);
    await this.permitBinding(binding, principal);
    const reply = await this.topology({ type: 'bind', ...binding });
    return { created: reply.changed };
  }

  async unbind(request: pb.UnbindRequest, principal: Principal): Promise<pb.UnbindResponse.$Properties> {
    const binding = this.bindingOf(request);
    await this.permitBinding(binding, principal);
    const reply = await this.topology({ type: 'unbind', ...binding });
    return { removed: reply.changed };
  }

  // ------------------------------------------------------------------------------------
  // Publishing

  /** The target queues, or null when the exchange does not exist (on this node's copy). */
  /**
   * Proposes one published message to several queues. Every entry carries the same fan-out
   * key, so a node stores the bytes once for all its replicas of these queues.
   */
  private proposeFanOut(targets: readonly string[], command: Command, stored: pb.Message.$Properties | Uint8Array): Promise<Array<{ queue: string; reply: Reply }>> {
    const key = `${this.node.nodeId}/${this.node.env.uniqueId()}`;
    const bytes = stored instanceof Uint8Array ? stored : pb.Message.encode(stored).finish();
    return Promise.all(targets.map(async (queue) => ({ queue, reply: await this.node.router.proposeQueue(queue, command, bytes, key) })));
  }

  private route(exchange: string, routingKey: string, headers: ReturnType<typeof headersFromWire>): readonly string[] | null {
    try {
      return route(this.node.topology, exchange, [routingKey], headers).queues;
    } catch (error) {
      if (error instanceof TopologyError) {
        if (error.code === 'NOT_FOUND') return null;
        throw invalidArgument(error.message);
      }
      throw error;
    }
  }

  /** Routes one publish and waits until every target queue committed it. */
  async publish(request: pb.PublishRequest.$Properties, principal: Principal): Promise<pb.PublishResponse.$Properties> {
    const started = performance.now();
    const publishId = request.publishId ?? 0;
    const message = request.message;
    if (message == null) throw invalidArgument('publish needs a message');
    // Anonymous (authentication off) may do everything: nothing to allocate per publish.
    if (principal.kind !== 'anonymous') {
      const permitted = this.permit(() => this.access.require(principal, 'write', exchangeResource(request.exchange ?? '')));
      if (permitted !== null) await permitted;
    }
    const tooLarge = this.rejectTooLarge(publishId, message);
    if (tooLarge !== null) return tooLarge;
    if (this.node.diskAlarm) {
      throw resourceExhausted(Reason.DISK_ALARM, `node ${this.node.nodeId} is low on disk space (below disk_free_limit); publishes are refused until space is freed`);
    }
    const memory = this.node.memory;
    if (memory?.active) throw resourceExhausted(Reason.MEMORY_ALARM, memory.refusal(this.node.nodeId));
    const exchange = request.exchange ?? '';
    const routingKey = message.routingKey ?? '';
    const headers = headersFromWire(message.headers);
    let targets = this.route(exchange, routingKey, headers);
    if (targets === null || targets.length === 0) {
      // This node's copy of the topology may lag a change just made through another node:
      // catch up with the metadata leader, then route again. Only unroutable publishes pay.
      await this.node.router.barrier.wait();
      targets = this.route(exchange, routingKey, headers);
      if (targets === null) throw notFound(Reason.EXCHANGE_NOT_FOUND, `exchange ${JSON.stringify(exchange)} does not exist; declare it before publishing to it`);
    }
    if (targets.length === 0) {
      this.node.metrics.publishes.inc({ outcome: 'unroutable' });
      return {
        publishId,
        outcome: pb.PublishOutcome.PUBLISH_OUTCOME_UNROUTABLE,
        reason: `no queue is bound to exchange ${JSON.stringify(exchange)} for routing key ${JSON.stringify(routingKey)}`,
        returned: request.mandatory ? message : null,
      };
    }
    const properties = message.properties ?? {};
    if (properties.priority != null && properties.priority > 255) throw invalidArgument('priority must be between 0 and 255');
    const producerId = request.producerId ?? '';
    if (producerId !== '' && request.sequence == null) throw invalidArgument('a publish with a producer_id needs a sequence');
    const deaths = publishedDeaths(message);
    // The client's own bytes go into the log unless they carry death records, which live in
    // the machine command rather than in the stored message.
    const raw = deaths === undefined && message.firstDeath == null && message.lastDeath == null ? rawMessageOf(message) : undefined;
    const stored: pb.Message.$Properties | Uint8Array = raw ?? { ...message, deaths: [], firstDeath: null, lastDeath: null };
    const command: { -readonly [K in keyof EnqueueCommand]: EnqueueCommand[K] } = {
      type: 'enqueue',
      sizeBytes: message.body?.length ?? 0,
      exchange,
      routingKeys: [routingKey],
    };
    if (properties.priority != null) command.priority = properties.priority;
    if (properties.expirationMs != null) command.expirationMs = Number(properties.expirationMs);
    if (message.delayMs != null) command.delayMs = Number(message.delayMs);
    if (message.notBeforeMs != null) command.notBefore = Number(message.notBeforeMs);
    if (producerId !== '') {
      command.producerId = producerId;
      command.sequence = Number(request.sequence ?? 0);
    }
    if (deaths !== undefined) command.deaths = deaths;
    if (this.node.config.testOnlyConfirmBeforeCommit) {
      // Deliberately broken (test-only switch): confirm before the message is committed.
      for (const queue of targets) void this.node.router.proposeQueue(queue, command, stored).catch(() => undefined);
      return { publishId, outcome: pb.PublishOutcome.PUBLISH_OUTCOME_CONFIRMED, queues: [...targets] };
    }
    const replies =
      targets.length === 1
        ? [{ queue: targets[0]!, reply: await this.node.router.proposeQueue(targets[0]!, command, stored) }]
        : await this.proposeFanOut(targets, command, stored);
    let duplicates = 0;
    const committed: string[] = [];
    for (const { queue, reply } of replies) {
      if (reply.type === 'error') throw queueError(reply, queue);
      if (reply.type === 'rejected') {
        this.node.metrics.publishes.inc({ outcome: 'rejected' });
        return {
          publishId,
          outcome: pb.PublishOutcome.PUBLISH_OUTCOME_REJECTED,
          reason: `queue ${JSON.stringify(queue)} is full (max_length / max_length_bytes with overflow = reject-publish)`,
          queues: committed,
          statusCode: Status.RESOURCE_EXHAUSTED,
        };
      }
      if (reply.type === 'duplicate') duplicates += 1;
      committed.push(queue);
    }
    const outcome = duplicates === replies.length ? pb.PublishOutcome.PUBLISH_OUTCOME_DUPLICATE : pb.PublishOutcome.PUBLISH_OUTCOME_CONFIRMED;
    this.node.metrics.publishConfirmed(duplicates === replies.length, (performance.now() - started) / 1000);
    const leader = targets.length === 1 ? this.leaderHint(targets[0]!) : null;
    return leader === null ? { publishId, outcome, queues: committed } : { publishId, outcome, queues: committed, leader };
  }

  /**
   * The client address of the queue's leader when another node leads it (this node forwarded
   * the publish); null when this node leads it or does not know who does. Publishers move their
   * streams to it (PublishResponse.leader).
   */
  /**
   * The client address of the queue's leader as this node knows it, or '' (a declare or purge
   * tells it, and the SDK opens its streams there).
   */
  private leaderAddress(queue: string): string {
    return this.node.addressOf(this.node.queues.get(queue)?.group.leaderId ?? null) ?? '';
  }

  private leaderHint(queue: string): string | null {
    const leader = this.node.queues.get(queue)?.group.leaderId ?? null;
    return leader === null || leader === this.node.nodeId ? null : this.node.addressOf(leader);
  }

  /** The publish stream, once its caller is authenticated (a refusal ends the stream with its status). */
  private publishStreamAs(call: ServerDuplexStream<pb.PublishBatch, pb.PublishOutcomes.$Properties>): void {
    if (!this.node.config.requireAuthentication) {
      this.publishStream(call, ANONYMOUS);
      return;
    }
    // Publishes that arrive while the caller is checked wait in the stream (paused).
    call.pause();
    call.on('error', () => {});
    this.principalOf(call).then(
      (principal) => {
        this.publishStream(call, principal);
        call.resume();
      },
      (error: unknown) => fail(call, error),
    );
  }

  publishStream(call: ServerDuplexStream<pb.PublishBatch, pb.PublishOutcomes.$Properties>, principal: Principal): void {
    let ended = false;
    let inFlight = 0;
    // Outcomes settled together (an applied batch) leave as one PublishOutcomes message.
    let outcomes: pb.PublishResponse.$Properties[] = [];
    const flush = (): void => {
      const batch = outcomes;
      outcomes = [];
      if (batch.length > 0 && !call.cancelled) call.write({ outcomes: batch });
      if (ended && inFlight === 0 && outcomes.length === 0) call.end();
    };
    const answer = (outcome: pb.PublishResponse.$Properties): void => {
      // A microtask, not an immediate: written in an immediate, they would leave a turn later (NodeEnv.soon).
      if (outcomes.length === 0) queueMicrotask(flush);
      outcomes.push(outcome);
    };
    // A large batch is published over several turns, a window at a time (publish-window.ts).
    const paced = new PublishWindow<pb.PublishRequest.$Properties>(
      (request) =>
        this.publish(request, principal).then(
          (outcome) => {
            inFlight -= 1;
            answer(outcome);
          },
          (error: unknown) => {
            inFlight -= 1;
            const status = toServiceError(error);
            const code = status.code ?? Status.INTERNAL;
            answer({
              publishId: request.publishId,
              outcome: pb.PublishOutcome.PUBLISH_OUTCOME_FAILED,
              reason: status.details ?? 'failed',
              statusCode: code,
              errorReason: reasonOf(status),
            });
          },
        ),
      { perTurn: PUBLISHES_PER_TURN, window: PUBLISH_WINDOW, onBacklog: (backlogged) => (backlogged ? call.pause() : call.resume()) },
    );
    call.on('data', (batch: pb.PublishBatch) => {
      inFlight += batch.publishes.length;
      paced.push(batch.publishes);
    });
    call.on('end', () => {
      ended = true;
      const waitForOutcomes = (): void => {
        if (inFlight === 0) setImmediate(flush);
        else setTimeout(waitForOutcomes, 5);
      };
      waitForOutcomes();
    });
    call.on('error', () => {});
  }

  // ------------------------------------------------------------------------------------
  // Consuming

  consume(call: ServerDuplexStream<pb.ConsumeRequest, pb.ConsumeResponse.$Properties>): void {
    let started = false;
    call.on('error', () => {});
    const first = (request: pb.ConsumeRequest): void => {
      if (started) return;
      started = true;
      call.off('data', first);
      if (request.request !== 'subscribe' || request.subscribe == null) {
        fail(call, invalidArgument('the first message of a consume stream must be subscribe'));
        return;
      }
      const subscribe = request.subscribe;
      this.startConsumer(call, subscribe).catch((error: unknown) => fail(call, error));
    };
    call.on('data', first);
    // Input that ends before a subscribe (or is refused unread, see unreadable.ts) ends the call.
    call.on('end', () => {
      if (!started) call.end();
    });
  }

  private async startConsumer(call: ServerDuplexStream<pb.ConsumeRequest, pb.ConsumeResponse.$Properties>, subscribe: pb.Subscribe.$Properties): Promise<void> {
    const name = requireName(subscribe.queue, 'queue');
    const principal = await this.principalOf(call);
    await this.require(principal, 'read', queueResource(name));
    const leader = await this.queueLeader(name);
    if (leader !== this.node.nodeId) {
      this.proxyConsume(call, subscribe, leader, principal);
      return;
    }
    const local = this.node.queues.get(name);
    if (local === undefined) throw unavailable(Reason.NOT_LEADER, `queue ${JSON.stringify(name)} moved`);
    const id = this.node.newConsumerId();
    const tag = subscribe.consumerTag || id;
    let closed = false;
    const close = (): void => {
      if (closed) return;
      closed = true;
      this.node.consumers.detach(id);
    };
    const outbox = new DeliveryOutbox(call);
    this.node.consumers.attach({
      id,
      queue: name,
      tag,
      deliver: (delivery) => outbox.push(delivery),
      event: (event) => call.write({ event }),
      end: (error) => {
        closed = true;
        fail(call, error);
      },
    });
    const prefetch = this.prefetchOf(subscribe.prefetch ?? 0);
    const reply = await this.node.router.proposeLocal(local, { type: 'subscribe', consumerId: id, prefetch, priority: subscribe.priority ?? 0, ...withSession(sessionOf(call)) });
    if (reply.reply.type === 'error') {
      close();
      throw queueError(reply.reply, name);
    }
    call.write({ subscribed: { consumerTag: tag, queue: name, leader: this.node.nodeId } });
    const proposeFromStream = (command: Command): void => {
      if (closed) return;
      this.node.router.proposeLocal(local, command).then(
        (result) => {
          if (result.reply.type === 'error' && !closed) {
            call.write({ event: { kind: 'error', message: queueError(result.reply, name).message } });
          }
        },
        (error: unknown) => {
          if (closed) return;
          close();
          fail(call, error);
        },
      );
    };
    call.on('data', (request: pb.ConsumeRequest) => {
      const settles = request.request === 'settle' && request.settle != null ? [request.settle] : request.request === 'settles' ? (request.settles?.settles ?? []) : null;
      if (settles !== null) {
        // In order, all in this turn: one Raft batch for the lot.
        for (const settle of settles) {
          const command = settleCommand(id, settle);
          if (command instanceof BrokerError) call.write({ event: { kind: 'error', message: command.message } });
          else proposeFromStream(command);
        }
      } else if (request.request === 'credit' && request.credit != null) {
        proposeFromStream({ type: 'credit', consumerId: id, prefetch: this.prefetchOf(request.credit.prefetch ?? 0) });
      } else {
        call.write({ event: { kind: 'error', message: 'unexpected request on a consume stream (subscribe twice?)' } });
      }
    });
    /** The consumer left: its unacked deliveries go back (counted as failed). */
    const cancelled = (): Promise<unknown> => {
      if (closed) return Promise.resolve();
      close();
      if (!local.group.isLeader) return Promise.resolve();
      return this.node.router.proposeLocal(local, { type: 'cancel', consumerId: id }).catch(() => {});
    };
    // A client that half-closes sees the stream end only once its cancel committed, after
    // every settle it sent before (the log keeps their order): a status read next counts
    // neither the consumer nor what it acked.
    call.on('end', () => {
      void cancelled().finally(() => call.end());
    });
    call.on('cancelled', cancelled);
    call.on('close', cancelled);
  }

  private proxyConsume(
    call: ServerDuplexStream<pb.ConsumeRequest, pb.ConsumeResponse.$Properties>,
    subscribe: pb.Subscribe.$Properties,
    leader: string,
    principal: Principal,
  ): void {
    const upstream = this.clientFor(leader).makeBidiStreamRequest(
      BrokerService.consume.path,
      BrokerService.consume.requestSerialize,
      BrokerService.consume.responseDeserialize,
      this.proxyMetadata(call, principal),
    ) as ClientDuplexStream<pb.ConsumeRequest.$Properties, pb.ConsumeResponse>;
    upstream.write({ subscribe });
    // Flow control end to end: while the client does not read, stop reading the leader (its
    // stream then stops too, see DeliveryOutbox), instead of buffering here.
    upstream.on('data', (response: pb.ConsumeResponse) => {
      if (!call.write(response)) {
        upstream.pause();
        call.once('drain', () => upstream.resume());
      }
    });
    upstream.on('error', (error: ServiceError) => fail(call, error));
    upstream.on('end', () => call.end());
    call.on('data', (request: pb.ConsumeRequest) => upstream.write(request));
    call.on('end', () => upstream.end());
    call.on('cancelled', () => upstream.cancel());
  }

  /** The node leading a queue, waiting (bounded) while an election runs. */
  private async queueLeader(name: string): Promise<string> {
    const until = this.node.env.now() + this.node.config.requestTimeoutMs;
    for (;;) {
      const definition = await this.node.router.queueDefinition(name);
      const local = this.node.queues.get(name);
      if (local !== undefined && local.group.leaderId !== null) return local.group.leaderId;
      if (local === undefined) {
        // Not a member: ask a member (it proxies again if it is not the leader).
        const member = definition.members[Math.floor(Math.random() * definition.members.length)];
        if (member !== undefined) return member;
      }
      const left = until - this.node.env.now();
      if (left <= 0) throw unavailable(Reason.NO_LEADER, `queue ${JSON.stringify(name)} has no leader (no quorum?)`);
      // An election is running: woken when it ends (or when the time is up).
      await (local === undefined ? sleepOn(this.node.env, 20) : Promise.race([local.group.whenLeaderKnown(), sleepOn(this.node.env, left)]));
    }
  }

  /** Runs `here` on the queue's leader, or proxies the same Broker call to it. */
  private async atLeader<Req, Res>(
    name: string,
    method: { path: string; requestSerialize: (r: Req) => Buffer; responseDeserialize: (b: Buffer) => Res },
    request: Req,
    here: () => Promise<Res>,
    call: ServerSurfaceCall | undefined,
    /** Who the call is from (told to the leader: proxyMetadata). */
    principal: Principal,
  ): Promise<Res> {
    const leader = await this.queueLeader(name);
    if (leader === this.node.nodeId) return here();
    const client = this.clientFor(leader);
    return new Promise<Res>((resolve, reject) => {
      client.makeUnaryRequest(
        method.path,
        method.requestSerialize,
        method.responseDeserialize,
        request,
        this.proxyMetadata(call, principal),
        { deadline: this.node.env.now() + this.node.config.requestTimeoutMs },
        (error: ServiceError | null, response?: Res) => (error !== null || response === undefined ? reject(error) : resolve(response)),
      );
    });
  }

  /**
   * Get. An auto-ack get is served as a manual one, and this node acks it once its response
   * left (see whenSent): a response that could not be sent (the call was cancelled, its
   * deadline passed, the stream broke) returns the message to the queue instead of losing it.
   */
  async get(request: pb.GetRequest, principal: Principal, sessionId?: string, call?: ServerSurfaceCall): Promise<pb.GetResponse.$Properties> {
    const name = requireName(request.queue, 'queue');
    await this.require(principal, 'read', queueResource(name));
    const manual: pb.GetRequest.$Properties = { queue: name, manualAck: true };
    const response = await this.atLeader<pb.GetRequest.$Properties, pb.GetResponse.$Properties>(name, BrokerService.get, manual, async () => {
      const local = this.node.queues.get(name);
      if (local === undefined || !local.group.isLeader) throw unavailable(Reason.NOT_LEADER, 'leadership moved; retry');
      const consumerId = `${this.node.nodeId}/get/${this.node.newConsumerId()}`;
      const result = await this.node.router.proposeLocal(local, { type: 'get', ackMode: 'manual', consumerId, ...withSession(sessionId) });
      const reply = result.reply;
      if (reply.type === 'error') throw queueError(reply, name);
      const messageCount = queueCounts(local).ready;
      if (reply.type !== 'message') return { messageCount };
      return { delivery: deliveryOf(name, consumerId, reply.message, result.stored), messageCount };
    }, call, principal);
    const delivery = response.delivery;
    if (request.manualAck || delivery == null) return response;
    const holder = delivery.consumerTag ?? '';
    const deliveryTag = delivery.deliveryTag ?? 0;
    const answer: pb.GetResponse.$Properties = { ...response, delivery: { ...delivery, consumerTag: '' } };
    whenSent(answer, (sent) => {
      const base = { consumerId: holder, deliveryTag, multiple: false };
      this.node.router.proposeQueue(name, sent ? { type: 'ack', ...base } : { type: 'return', ...base }).catch((error: unknown) =>
        this.node.logger.warn({ err: error, queue: name, sent }, 'settling an auto-ack get failed; the message stays held until its holder is released'),
      );
    });
    return answer;
  }

  /** Spec 3: the prefetch a consumer gets; 0 (unlimited) and anything above max_prefetch are max_prefetch. */
  private prefetchOf(requested: number): number {
    const max = this.node.config.maxPrefetch;
    return requested <= 0 || requested > max ? max : requested;
  }

  async settleGet(request: pb.SettleGetRequest, principal: Principal): Promise<pb.SettleGetResponse.$Properties> {
    const name = requireName(request.queue, 'queue');
    await this.require(principal, 'read', queueResource(name));
    if (request.settle == null) throw invalidArgument('settle_get needs a settle');
    const command = settleCommand(requireName(request.consumerTag, 'consumer_tag'), request.settle);
    if (command instanceof BrokerError) throw command;
    const reply = await this.node.router.proposeQueue(name, command);
    if (reply.type === 'error') throw queueError(reply, name);
    return {};
  }

  // ------------------------------------------------------------------------------------
  // Status

  async queueStatus(request: pb.QueueStatusRequest, principal: Principal, call?: ServerSurfaceCall): Promise<pb.QueueStatusResponse.$Properties> {
    const name = requireName(request.name, 'name');
    await this.requireAny(principal, queueResource(name));
    return this.atLeader<pb.QueueStatusRequest.$Properties, pb.QueueStatusResponse.$Properties>(name, BrokerService.queueStatus, request, async () => {
      const local = this.node.queues.get(name);
      if (local === undefined) throw unavailable(Reason.NOT_LEADER, 'leadership moved; retry');
      // A linearizable read: a leader just elected has not applied the entries its
      // predecessor committed until an entry of its own term commits; the counts then
      // include every publish confirmed before this request.
      await local.group.readIndex(this.node.env.now() + this.node.config.requestTimeoutMs);
      return this.localQueueStatus(name);
    }, call, principal);
  }

  private localQueueStatus(name: string): pb.QueueStatusResponse.$Properties {
    const local = this.node.queues.get(name);
    const definition = this.node.knownQueues.get(name);
    const retiring = [...(definition?.retiring ?? [])];
    if (local === undefined || definition === undefined) return { name, members: [...(definition?.members ?? [])], retiring };
    const status = local.group.status();
    return {
      name,
      leader: status.leaderId ?? '',
      members: [...definition.members],
      retiring,
      voters: [...status.config.voters],
      learners: [...status.config.learners],
      commitIndex: status.commitIndex,
      term: status.term,
      ...queueCounts(local),
    };
  }

  /**
   * The depths of the queues this node holds no replica of, from the other nodes' own
   * ClusterStatus (one proxied call per reachable node, in parallel): each reports the
   * queues it leads. A node that does not answer in time leaves its queues without depths.
   */
  private async fillDepths(queues: pb.QueueStatusResponse.$Properties[], principal: Principal, call: ServerSurfaceCall | undefined): Promise<void> {
    const missing = new Map(queues.filter((q) => q.leader === undefined).map((q) => [q.name ?? '', q]));
    if (missing.size === 0) return;
    const others = this.node.directory.ids().filter((id) => id !== this.node.nodeId && this.node.link.isConnected(id));
    const answers = await Promise.all(
      others.map(
        (id) =>
          new Promise<pb.ClusterStatusResponse | null>((resolve) => {
            let client: Client;
            try {
              client = this.clientFor(id);
            } catch {
              resolve(null);
              return;
            }
            client.makeUnaryRequest(
              BrokerService.clusterStatus.path,
              BrokerService.clusterStatus.requestSerialize,
              BrokerService.clusterStatus.responseDeserialize,
              { depths: false },
              this.proxyMetadata(call, principal),
              { deadline: this.node.env.now() + this.node.config.requestTimeoutMs },
              (error: ServiceError | null, response?: pb.ClusterStatusResponse) => resolve(error === null && response !== undefined ? response : null),
            );
          }),
      ),
    );
    others.forEach((id, i) => {
      for (const q of answers[i]?.queues ?? []) {
        const entry = missing.get(q.name ?? '');
        if (entry === undefined || q.leader !== id) continue;
        Object.assign(entry, { ...q, members: entry.members, retiring: entry.retiring });
        missing.delete(q.name ?? '');
      }
    });
  }

  async listConsumers(request: pb.ListConsumersRequest, principal: Principal, call: ServerSurfaceCall): Promise<pb.ListConsumersResponse.$Properties> {
    const name = requireName(request.queue, 'queue');
    await this.requireAny(principal, queueResource(name));
    return this.atLeader<pb.ListConsumersRequest.$Properties, pb.ListConsumersResponse.$Properties>(name, BrokerService.listConsumers, request, async () => {
      const local = this.node.queues.get(name);
      if (local === undefined || !local.group.isLeader) throw unavailable(Reason.NOT_LEADER, 'leadership moved; retry');
      return listConsumers(local, (id) => this.node.consumers.get(id)?.tag);
    }, call, principal);
  }

  /** Every authenticated user may ask; the queues listed are those it has a permission on. */
  async clusterStatus(principal: Principal, depths = false, call?: ServerSurfaceCall): Promise<pb.ClusterStatusResponse.$Properties> {
    // Client addresses (a peer's once it told it), never the peer listeners'.
    const metaConfig = this.node.metaGroup.status().config;
    const nodes = this.node.directory.ids().map((id) => ({
      id,
      address: this.node.addressOf(id) ?? '',
      reachable: id === this.node.nodeId || this.node.link.isConnected(id),
      diskAlarm: id === this.node.nodeId ? this.node.diskAlarm : false,
      memoryAlarm: id === this.node.nodeId ? this.node.memoryAlarm : false,
      state: id === this.node.nodeId && this.node.removed ? 'removed' : this.node.directory.isIntroduced(id) ? 'introduced' : (this.node.meta.nodes.get(id)?.state ?? 'active'),
      peerAddress: this.node.directory.peerAddress(id) ?? '',
      voter: metaConfig.voters.includes(id),
    }));
    const queues = [...this.node.knownQueues.keys()]
      .filter((name) => ['configure', 'write', 'read'].some((permission) => this.access.allowed(principal, permission as 'read', queueResource(name))))
      .sort()
      .map((name) => this.localQueueStatus(name));
    if (depths) await this.fillDepths(queues, principal, call);
    return { node: this.node.nodeId, metadataLeader: this.node.metaGroup.leaderId ?? '', nodes, queues, maxMessageBytes: this.node.config.maxMessageBytes };
  }

  /**
   * Spec 8: runs on the source queue's leader (elsewhere it answers UNAVAILABLE with the
   * leader's address, and the SDK goes there). The machine hands messages out one by one;
   * the node publishes each and confirms it (see BrokerNode.moveOne); this call streams the
   * progress until the move is done. If the stream breaks, the move goes on in the broker.
   */
  async move(call: ServerWritableStream<pb.MoveRequest, pb.MoveProgress.$Properties>): Promise<void> {
    const request = call.request;
    const name = requireName(request.sourceQueue, 'source_queue');
    // Moving reads the source and publishes through the destination exchange.
    const principal = await this.principalOf(call);
    await this.require(principal, 'read', queueResource(name));
    await this.require(principal, 'write', exchangeResource(request.destinationExchange ?? ''));
    const leader = await this.queueLeader(name);
    const local = this.node.queues.get(name);
    if (leader !== this.node.nodeId || local === undefined || !local.group.isLeader) {
      throw unavailable(Reason.NOT_LEADER, `a move runs on the leader of ${JSON.stringify(name)}`, this.node.addressOf(leader));
    }
    const moveId = request.moveId ? request.moveId : await this.startMove(local, name, request);
    let last = '';
    for (;;) {
      if (call.cancelled) return;
      const current = this.node.queues.get(name);
      if (current === undefined || !current.group.isLeader) {
        throw unavailable(Reason.LEADER_MOVED, `leadership of ${JSON.stringify(name)} moved; the move continues on the new leader`);
      }
      const progress = queueMove(current);
      if (progress === null || progress.moveId !== moveId) {
        if (request.moveId && last === '') {
          throw notFound(Reason.MOVE_NOT_FOUND, `${JSON.stringify(name)} has no move ${JSON.stringify(moveId)} (another move replaced it, or there was none)`);
        }
        throw failedPrecondition(Reason.MOVE_REPLACED, `another move of ${JSON.stringify(name)} replaced this one`);
      }
      const report = { moved: progress.moved, total: progress.count, done: progress.done, moveId };
      const key = JSON.stringify(report);
      if (key !== last) {
        call.write(report);
        last = key;
      }
      if (progress.done) return;
      // Progress changes only when the queue applies something (or leadership moves).
      await Promise.race([current.group.nextApplied(), sleepOn(this.node.env, 500)]);
    }
  }

  /** Proposes the start of a move (spec 8); returns its id. */
  private async startMove(local: LocalQueue, name: string, request: pb.MoveRequest): Promise<string> {
    const exchange = request.destinationExchange ?? '';
    if (exchange !== '' && this.node.topology.exchange(exchange) === undefined) {
      await this.node.router.barrier.wait();
      if (this.node.topology.exchange(exchange) === undefined) throw notFound(Reason.EXCHANGE_NOT_FOUND, `exchange ${JSON.stringify(exchange)} does not exist`);
    }
    const moveId = `${this.node.nodeId}/${randomUUID()}`;
    const started = await this.node.router.proposeLocal(local, {
      type: 'moveStart',
      moveId,
      exchange,
      routingKey: request.routingKey ? request.routingKey : null,
      ...(request.limit ? { limit: request.limit } : {}),
    });
    if (started.reply.type === 'error') throw queueError(started.reply, name);
    return moveId;
  }

  /**
   * The Broker service's handlers. `viaPeer`: for the peer listener, where other nodes proxy
   * their clients' calls: every handler serves only calls the listener authenticated and
   * marked as coming from a peer (via-peer.ts; a handler reads `viaPeer(call)`).
   */
  implementation(options: { viaPeer?: boolean } = {}): UntypedServiceImplementation {
    const handlers: UntypedServiceImplementation = {
      declareQueue: this.unaryAs((r: pb.DeclareQueueRequest, principal, call) => this.declareQueue(r, principal, sessionOf(call))),
      deleteQueue: this.unaryAs((r: pb.DeleteQueueRequest, principal, call) => this.deleteQueue(r, principal, sessionOf(call))),
      purgeQueue: this.unaryAs((r: pb.PurgeQueueRequest, principal, call) => this.purgeQueue(r, principal, sessionOf(call))),
      declareExchange: this.unaryAs((r: pb.DeclareExchangeRequest, principal) => this.declareExchange(r, principal)),
      deleteExchange: this.unaryAs((r: pb.DeleteExchangeRequest, principal) => this.deleteExchange(r, principal)),
      bind: this.unaryAs((r: pb.BindRequest, principal) => this.bind(r, principal)),
      unbind: this.unaryAs((r: pb.UnbindRequest, principal) => this.unbind(r, principal)),
      publish: this.unaryAs((r: pb.PublishRequest, principal) => this.publish(r, principal)),
      publishStream: (call: ServerDuplexStream<pb.PublishBatch, pb.PublishOutcomes.$Properties>) => this.publishStreamAs(call),
      consume: (call: ServerDuplexStream<pb.ConsumeRequest, pb.ConsumeResponse.$Properties>) => this.consume(call),
      get: this.unaryAs((r: pb.GetRequest, principal, call) => this.get(r, principal, sessionOf(call), call)),
      settleGet: this.unaryAs((r: pb.SettleGetRequest, principal) => this.settleGet(r, principal)),
      move: (call: ServerWritableStream<pb.MoveRequest, pb.MoveProgress.$Properties>) => {
        this.move(call).then(
          () => call.end(),
          (error: unknown) => call.emit('error', Object.assign(new Error('move failed'), toServiceError(error))),
        );
      },
      queueStatus: this.unaryAs((r: pb.QueueStatusRequest, principal, call) => this.queueStatus(r, principal, call)),
      clusterStatus: this.unaryAs((r: pb.ClusterStatusRequest, principal, call) => this.clusterStatus(principal, r.depths === true && viaPeer(call) === null, call)),
      putUser: this.unaryAs((r: pb.PutUserRequest, principal) => this.users.putUser(r, principal)),
      deleteUser: this.unaryAs((r: pb.DeleteUserRequest, principal) => this.users.deleteUser(r, principal)),
      listUsers: this.unaryAs((_r: pb.ListUsersRequest, principal) => this.users.listUsers(principal)),
      setPermissions: this.unaryAs((r: pb.SetPermissionsRequest, principal) => this.users.setPermissions(r, principal)),
      clearPermissions: this.unaryAs((r: pb.ClearPermissionsRequest, principal) => this.users.clearPermissions(r, principal)),
      whoAmI: this.unaryAs((_r: pb.WhoAmIRequest, principal) => this.users.whoAmI(principal)),
      addNode: this.unaryAs((r: pb.AddNodeRequest, principal) => this.membership.addNode(r, principal)),
      removeNode: this.unaryAs((r: pb.RemoveNodeRequest, principal) => this.membership.removeNode(r, principal)),
      growQueue: this.unaryAs((r: pb.QueueMemberRequest, principal) => this.membership.queueMember('growQueue', r, principal)),
      shrinkQueue: this.unaryAs((r: pb.QueueMemberRequest, principal) => this.membership.queueMember('shrinkQueue', r, principal)),
      transferLeadership: this.unaryAs((r: pb.QueueMemberRequest, principal) => this.membership.queueMember('preferLeader', r, principal)),
      rebalance: this.unaryAs((_r: pb.RebalanceRequest, principal) => this.membership.rebalance(principal)),
      quorumCritical: this.unaryAs((r: pb.QuorumCriticalRequest, principal) => this.membership.quorumCritical(r, principal)),
      listExchanges: this.unaryAs(async (_r: pb.ListExchangesRequest, principal) => {
        await this.node.router.barrier.wait().catch(() => undefined);
        return listExchanges(this.node.topology, this.access, principal);
      }),
      listBindings: this.unaryAs(async (r: pb.ListBindingsRequest, principal) => {
        await this.node.router.barrier.wait().catch(() => undefined);
        return listBindings(this.node.topology, this.access, principal, r);
      }),
      listConsumers: this.unaryAs((r: pb.ListConsumersRequest, principal, call) => this.listConsumers(r, principal, call)),
    };
    // A node removed from the cluster serves no client; ClusterStatus still says so.
    const removed = servedWhile(handlers, () => (this.node.removed ? toServiceError(unavailable(Reason.NODE_REMOVED, `node ${this.node.nodeId} was removed from the cluster; use another node`)) as { code: Status; details: string } : null), ['clusterStatus']);
    return options.viaPeer === true ? onlyViaPeer(removed) : removed;
  }
}

function settleCommand(consumerId: string, settle: pb.Settle.$Properties): Command | BrokerError {
  const base = { consumerId, deliveryTag: settle.deliveryTag ?? 0, multiple: settle.multiple ?? false };
  switch (settle.kind) {
    case pb.SettleKind.SETTLE_KIND_ACK:
      return { type: 'ack', ...base };
    case pb.SettleKind.SETTLE_KIND_NACK:
    case pb.SettleKind.SETTLE_KIND_REJECT:
      if (settle.requeue) return { type: 'return', ...base, ...((settle.delayMs ?? 0) > 0 ? { delayMs: settle.delayMs ?? 0 } : {}) };
      return { type: 'discard', ...base };
    default:
      return invalidArgument('settle.kind must be ACK, NACK or REJECT');
  }
}

/** Ends a server stream with a status. */
function fail(call: ServerDuplexStream<unknown, unknown>, error: unknown): void {
  const status = toServiceError(error);
  if (call.cancelled || call.destroyed) return;
  call.emit('error', Object.assign(new Error(status.details ?? 'error'), status));
}

