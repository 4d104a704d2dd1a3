// An in-process fake quorumq node for the SDK's tests: a grpc-js Server on 127.0.0.1 (port 0)
// implementing BrokerService over a small in-memory state. Several fake nodes may share one
// FakeState, the way a real cluster's nodes share the replicated queues.
import * as grpc from '@grpc/grpc-js';
import type { ServerDuplexStream, ServerUnaryCall, ServerWritableStream, sendUnaryData } from '@grpc/grpc-js';
import { BrokerService, quorumq } from '@quorumq/proto';
import { wireNumber } from '../src/longs.js';

const v1 = quorumq.v1;

export interface StoredMessage {
  readonly id: number;
  readonly exchange: string;
  readonly routingKey: string;
  readonly message: quorumq.v1.Message.$Properties;
  deliveryCount: number;
}

export interface FakeQueue {
  readonly name: string;
  readonly args: quorumq.v1.QueueArguments.$Properties;
  ready: StoredMessage[];
  /** Held by a consumer stream or a manual get. */
  readonly unacked: Map<number, StoredMessage>;
  consumers: number;
}

/** A status the fake returns instead of serving a call. */
export interface InjectedError {
  readonly code: grpc.status;
  readonly details?: string;
  readonly reason?: string;
  readonly leader?: string;
}

/** The replicated state, shared by every fake node of a cluster. */
export class FakeState {
  readonly queues = new Map<string, FakeQueue>();
  readonly exchanges = new Map<string, string>();
  readonly bindings: Array<{ source: string; queue: string; key: string }> = [];
  /** producerId → committed sequences. */
  readonly committed = new Map<string, Set<number>>();
  /** queue name → leader node id (for ClusterStatus). */
  readonly leaders = new Map<string, string>();
  readonly nodes: Array<{ id: string; address: string }> = [];
  private nextMessageId = 1;

  declareQueue(name: string, args: quorumq.v1.QueueArguments.$Properties = {}): FakeQueue {
    let queue = this.queues.get(name);
    if (queue === undefined) {
      queue = { name, args, ready: [], unacked: new Map(), consumers: 0 };
      this.queues.set(name, queue);
    }
    return queue;
  }

  route(exchange: string, routingKey: string): FakeQueue[] {
    if (exchange === '') {
      const queue = this.queues.get(routingKey);
      return queue === undefined ? [] : [queue];
    }
    const type = this.exchanges.get(exchange);
    const names = this.bindings
      .filter((b) => b.source === exchange && (type === 'fanout' || b.key === routingKey))
      .map((b) => b.queue);
    return [...new Set(names)].flatMap((n) => {
      const q = this.queues.get(n);
      return q === undefined ? [] : [q];
    });
  }

  enqueue(queue: FakeQueue, exchange: string, message: quorumq.v1.Message.$Properties): void {
    queue.ready.push({ id: this.nextMessageId++, exchange, routingKey: message.routingKey ?? '', message, deliveryCount: 0 });
  }

  /** Puts a message published with `body` directly into a queue. */
  put(queueName: string, body: string, headers: { [key: string]: quorumq.v1.HeaderValue.$Properties } = {}): void {
    this.enqueue(this.declareQueue(queueName), '', { body: Buffer.from(body), routingKey: queueName, headers });
  }
}

type PublishMode = 'respond' | 'hold' | 'commit-and-hold';

interface ConsumerStream {
  readonly call: ServerDuplexStream<quorumq.v1.ConsumeRequest, quorumq.v1.ConsumeResponse.$Properties>;
  readonly queue: FakeQueue;
  readonly tag: string;
  prefetch: number;
  nextTag: number;
  readonly inFlight: Map<number, StoredMessage>;
}

function trailers(error: InjectedError): grpc.Metadata {
  const metadata = new grpc.Metadata();
  metadata.set('quorumq-reason', error.reason ?? grpc.status[error.code]);
  if (error.leader !== undefined) metadata.set('quorumq-leader', error.leader);
  return metadata;
}

function serviceError(error: InjectedError): grpc.ServerErrorResponse {
  return Object.assign(new Error(error.details ?? grpc.status[error.code]), {
    code: error.code,
    details: error.details ?? grpc.status[error.code],
    metadata: trailers(error),
  });
}

export class FakeBroker {
  readonly server = new grpc.Server();
  address = '';
  /** Whether a declare and a purge answer with this node's address as the queue's leader (DeclareQueueResponse.leader). */
  tellsLeader = false;
  /** Every call the node received, by method name. */
  readonly calls: string[] = [];
  readonly publishRequests: quorumq.v1.PublishRequest[] = [];
  readonly settles: quorumq.v1.Settle.$Properties[] = [];
  readonly subscribes: quorumq.v1.Subscribe.$Properties[] = [];
  readonly credits: number[] = [];
  readonly settleGets: quorumq.v1.SettleGetRequest[] = [];
  /** Errors to return, per method name, consumed one per call. */
  readonly inject = new Map<string, InjectedError[]>();
  /** 'hold': never answer publishes on the stream; 'commit-and-hold': commit but never answer. */
  publishMode: PublishMode = 'respond';
  /** Publishes received on streams and not answered yet (at this node). */
  outstanding = 0;
  maxOutstanding = 0;
  /** The outcome to return for the next stream / unary publishes, overriding routing. */
  readonly forcedOutcomes: Array<quorumq.v1.PublishResponse.$Properties> = [];
  /** Stream publishes to commit and then answer UNAVAILABLE / OUTCOME_UNKNOWN (leadership moved after the commit). */
  commitThenUnknown = 0;
  /** Errors to answer unary publishes with after storing them (the call broke after the commit), one per call. */
  readonly failAfterStore: InjectedError[] = [];
  /** How long a consume stream the client half-closed takes to end (the broker committing its cancel). */
  consumeEndDelayMs = 0;
  /** Consume streams ended after the client half-closed them. */
  consumeStreamsEnded = 0;
  private readonly held: Array<() => void> = [];
  readonly consumerStreams = new Set<ConsumerStream>();
  /** The number of publishes of each PublishBatch received, in order. */
  readonly publishBatchSizes: number[] = [];
  readonly publishStreams = new Set<ServerDuplexStream<quorumq.v1.PublishBatch, quorumq.v1.PublishOutcomes.$Properties>>();

  private constructor(readonly state: FakeState, readonly nodeId: string) {}

  static async start(state = new FakeState(), nodeId = `node-${state.nodes.length + 1}`): Promise<FakeBroker> {
    const broker = new FakeBroker(state, nodeId);
    broker.server.addService(BrokerService, broker.implementation());
    const port = await new Promise<number>((resolve, reject) => {
      broker.server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (error, p) => (error === null ? resolve(p) : reject(error)));
    });
    broker.address = `127.0.0.1:${port}`;
    state.nodes.push({ id: nodeId, address: broker.address });
    return broker;
  }

  /** An address nothing listens on (a node that is down). */
  static async deadAddress(): Promise<string> {
    const server = new grpc.Server();
    const port = await new Promise<number>((resolve, reject) => {
      server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (error, p) => (error === null ? resolve(p) : reject(error)));
    });
    server.forceShutdown();
    return `127.0.0.1:${port}`;
  }

  failNext(method: string, error: InjectedError, times = 1): void {
    const list = this.inject.get(method) ?? [];
    for (let i = 0; i < times; i++) list.push(error);
    this.inject.set(method, list);
  }

  /** Kills the node: every connection and call is dropped. */
  kill(): void {
    this.server.forceShutdown();
  }

  /** Ends every consume stream with a status (e.g. UNAVAILABLE naming the new leader). */
  endConsumeStreams(error: InjectedError): void {
    for (const c of [...this.consumerStreams]) {
      this.dropConsumer(c);
      c.call.emit('error', serviceError(error));
    }
  }

  /** Sends a consumer event on every consume stream; a delivery tag > 0 also takes that delivery back. */
  sendEvent(kind: string, message: string, deliveryTag = 0): void {
    for (const c of this.consumerStreams) {
      const m = c.inFlight.get(deliveryTag);
      if (m !== undefined) {
        c.inFlight.delete(deliveryTag);
        c.queue.unacked.delete(m.id);
        c.queue.ready.unshift(m);
      }
      c.call.write({ event: { kind, message, deliveryTag } });
      this.pump(c);
    }
  }

  /** Pushes ready messages to this node's consumers (after `state.put`). */
  pumpAll(): void {
    for (const c of this.consumerStreams) this.pump(c);
  }

  /** Answers the publishes held so far. */
  releaseHeld(): void {
    for (const answer of this.held.splice(0)) answer();
  }

  /** Answers the publishes held so far except the oldest `keep`, which stay held. */
  releaseHeldExceptOldest(keep: number): void {
    for (const answer of this.held.splice(keep)) answer();
  }

  private takeInjected(method: string): InjectedError | undefined {
    const list = this.inject.get(method);
    return list === undefined ? undefined : list.shift();
  }

  private unary<Req, Res>(method: string, handler: (request: Req) => Res | InjectedError) {
    return (call: ServerUnaryCall<Req, Res>, callback: sendUnaryData<Res>): void => {
      this.calls.push(method);
      const injected = this.takeInjected(method);
      if (injected !== undefined) {
        callback(serviceError(injected));
        return;
      }
      const result = handler(call.request);
      if (typeof result === 'object' && result !== null && 'code' in result && typeof result.code === 'number') callback(serviceError(result));
      else callback(null, result as Res);
    };
  }

  private notFound(kind: 'QUEUE' | 'EXCHANGE', name: string): InjectedError {
    return { code: grpc.status.NOT_FOUND, details: `no ${kind.toLowerCase()} '${name}'`, reason: `${kind}_NOT_FOUND` };
  }

  /** The outcome of one publish (committing it to the shared state when it succeeds). */
  /** One publish arriving on a stream (each batch is split into its publishes). */
  private onStreamPublish(call: ServerDuplexStream<quorumq.v1.PublishBatch, quorumq.v1.PublishOutcomes.$Properties>, r: quorumq.v1.PublishRequest): void {
    this.publishRequests.push(r);
    this.outstanding += 1;
    this.maxOutstanding = Math.max(this.maxOutstanding, this.outstanding);
    const answer = (response: quorumq.v1.PublishResponse.$Properties): void => {
      this.outstanding -= 1;
      if (!call.cancelled && call.writable) call.write({ outcomes: [response] });
    };
    if (this.commitThenUnknown > 0) {
      this.commitThenUnknown -= 1;
      const committed = this.doPublish(r);
      setImmediate(() =>
        answer({ publishId: committed.publishId, outcome: v1.PublishOutcome.PUBLISH_OUTCOME_FAILED, statusCode: grpc.status.UNAVAILABLE, errorReason: 'OUTCOME_UNKNOWN' }),
      );
    } else if (this.publishMode === 'hold') this.held.push(() => answer(this.doPublish(r)));
    else if (this.publishMode === 'commit-and-hold') {
      const response = this.doPublish(r);
      this.held.push(() => answer(response));
    } else {
      // Answer asynchronously, like a broker waiting for its commit.
      setImmediate(() => answer(this.doPublish(r)));
    }
  }

  private doPublish(request: quorumq.v1.PublishRequest): quorumq.v1.PublishResponse.$Properties {
    const publishId = wireNumber(request.publishId);
    const forced = this.forcedOutcomes.shift();
    if (forced !== undefined) return { ...forced, publishId };
    const exchange = request.exchange ?? '';
    if (exchange !== '' && !this.state.exchanges.has(exchange)) {
      return { publishId, outcome: v1.PublishOutcome.PUBLISH_OUTCOME_FAILED, statusCode: grpc.status.NOT_FOUND, reason: 'EXCHANGE_NOT_FOUND' };
    }
    const message = request.message ?? {};
    const queues = this.state.route(exchange, message.routingKey ?? '');
    if (queues.length === 0) {
      return request.mandatory === true
        ? { publishId, outcome: v1.PublishOutcome.PUBLISH_OUTCOME_UNROUTABLE, returned: message }
        : { publishId, outcome: v1.PublishOutcome.PUBLISH_OUTCOME_UNROUTABLE };
    }
    const producer = request.producerId ?? '';
    const hasSequence = request.sequence !== null && request.sequence !== undefined;
    if (producer !== '' && hasSequence) {
      const seen = this.state.committed.get(producer) ?? new Set<number>();
      this.state.committed.set(producer, seen);
      const sequence = wireNumber(request.sequence);
      if (seen.has(sequence)) return { publishId, outcome: v1.PublishOutcome.PUBLISH_OUTCOME_DUPLICATE, queues: queues.map((q) => q.name) };
      seen.add(sequence);
    }
    for (const queue of queues) {
      const max = queue.args.maxLength;
      if (max !== null && max !== undefined && queue.ready.length >= wireNumber(max) && queue.args.overflow === 'reject-publish') {
        return { publishId, outcome: v1.PublishOutcome.PUBLISH_OUTCOME_REJECTED, reason: 'QUEUE_FULL' };
      }
    }
    for (const queue of queues) this.state.enqueue(queue, exchange, message);
    for (const c of this.consumerStreams) this.pump(c);
    return { publishId, outcome: v1.PublishOutcome.PUBLISH_OUTCOME_CONFIRMED, queues: queues.map((q) => q.name) };
  }

  private deliveryOf(queue: FakeQueue, consumerTag: string, tag: number, m: StoredMessage): quorumq.v1.Delivery.$Properties {
    return {
      queue: queue.name,
      consumerTag,
      deliveryTag: tag,
      deliveryCount: m.deliveryCount,
      redelivered: m.deliveryCount > 1,
      exchange: m.exchange,
      routingKeys: [m.routingKey],
      message: m.message,
    };
  }

  private pump(c: ConsumerStream): void {
    while (c.queue.ready.length > 0 && (c.prefetch === 0 || c.inFlight.size < c.prefetch)) {
      const m = c.queue.ready.shift();
      if (m === undefined) return;
      m.deliveryCount += 1;
      const tag = c.nextTag++;
      c.inFlight.set(tag, m);
      c.queue.unacked.set(m.id, m);
      c.call.write({ delivery: this.deliveryOf(c.queue, c.tag, tag, m) });
    }
  }

  private dropConsumer(c: ConsumerStream): void {
    if (!this.consumerStreams.delete(c)) return;
    c.queue.consumers -= 1;
    // Unsettled deliveries go back to the head of the queue.
    const returned = [...c.inFlight.values()];
    for (const m of returned) c.queue.unacked.delete(m.id);
    c.queue.ready.unshift(...returned);
    c.inFlight.clear();
  }

  private settleConsumer(c: ConsumerStream, settle: quorumq.v1.Settle.$Properties): void {
    const tag = wireNumber(settle.deliveryTag);
    const tags = settle.multiple ? [...c.inFlight.keys()].filter((t) => t <= tag) : [tag];
    for (const t of tags) {
      const m = c.inFlight.get(t);
      if (m === undefined) continue;
      c.inFlight.delete(t);
      c.queue.unacked.delete(m.id);
      const requeue = settle.kind === v1.SettleKind.SETTLE_KIND_NACK || settle.kind === v1.SettleKind.SETTLE_KIND_REJECT ? settle.requeue : false;
      if (requeue) c.queue.ready.unshift(m);
    }
    this.pump(c);
  }

  private implementation(): grpc.UntypedServiceImplementation {
    const state = this.state;
    return {
      declareQueue: this.unary('declareQueue', (r: quorumq.v1.DeclareQueueRequest): quorumq.v1.DeclareQueueResponse.$Properties | InjectedError => {
        const name = r.name ?? '';
        const existed = state.queues.has(name);
        if (r.passive) return existed ? { name, created: false } : this.notFound('QUEUE', name);
        const dlx = r.arguments?.deadLetterExchange;
        state.declareQueue(name, r.arguments ?? {});
        state.leaders.set(name, this.nodeId);
        const warnings = r.arguments?.deliveryLimit !== null && r.arguments?.deliveryLimit !== undefined && (dlx === null || dlx === undefined)
          ? ['delivery limit without a dead-letter exchange']
          : [];
        return { name, created: !existed, warnings, members: state.nodes.map((n) => n.id), leader: this.tellsLeader ? this.address : '' };
      }),
      deleteQueue: this.unary('deleteQueue', (r: quorumq.v1.DeleteQueueRequest): quorumq.v1.DeleteQueueResponse.$Properties | InjectedError => {
        const queue = state.queues.get(r.name ?? '');
        if (queue === undefined) return this.notFound('QUEUE', r.name ?? '');
        if (r.ifEmpty && queue.ready.length > 0) return { code: grpc.status.FAILED_PRECONDITION, reason: 'QUEUE_NOT_EMPTY' };
        state.queues.delete(queue.name);
        return { messagesDropped: queue.ready.length };
      }),
      purgeQueue: this.unary('purgeQueue', (r: quorumq.v1.PurgeQueueRequest): quorumq.v1.PurgeQueueResponse.$Properties | InjectedError => {
        const queue = state.queues.get(r.name ?? '');
        if (queue === undefined) return this.notFound('QUEUE', r.name ?? '');
        const dropped = queue.ready.length;
        queue.ready = [];
        return { messagesDropped: dropped, leader: this.tellsLeader ? this.address : '' };
      }),
      declareExchange: this.unary('declareExchange', (r: quorumq.v1.DeclareExchangeRequest): quorumq.v1.DeclareExchangeResponse.$Properties | InjectedError => {
        const name = r.name ?? '';
        const existing = state.exchanges.get(name);
        if (r.passive) return existing === undefined ? this.notFound('EXCHANGE', name) : { created: false };
        if (existing !== undefined && existing !== r.type) return { code: grpc.status.FAILED_PRECONDITION, reason: 'EXCHANGE_TYPE_MISMATCH' };
        state.exchanges.set(name, r.type ?? 'direct');
        return { created: existing === undefined };
      }),
      deleteExchange: this.unary('deleteExchange', (r: quorumq.v1.DeleteExchangeRequest): quorumq.v1.DeleteExchangeResponse.$Properties | InjectedError => {
        if (!state.exchanges.delete(r.name ?? '')) return this.notFound('EXCHANGE', r.name ?? '');
        return {};
      }),
      bind: this.unary('bind', (r: quorumq.v1.BindRequest): quorumq.v1.BindResponse.$Properties | InjectedError => {
        const source = r.source ?? '';
        if (!state.exchanges.has(source)) return this.notFound('EXCHANGE', source);
        if (r.destination !== 'queue') return { code: grpc.status.INVALID_ARGUMENT, reason: 'UNSUPPORTED_IN_FAKE' };
        const queue = r.queue ?? '';
        if (!state.queues.has(queue)) return this.notFound('QUEUE', queue);
        const key = r.bindingKey ?? '';
        const exists = state.bindings.some((b) => b.source === source && b.queue === queue && b.key === key);
        if (!exists) state.bindings.push({ source, queue, key });
        return { created: !exists };
      }),
      unbind: this.unary('unbind', (r: quorumq.v1.UnbindRequest): quorumq.v1.UnbindResponse.$Properties => {
        const index = state.bindings.findIndex((b) => b.source === r.source && b.queue === r.queue && b.key === (r.bindingKey ?? ''));
        if (index >= 0) state.bindings.splice(index, 1);
        return { removed: index >= 0 };
      }),
      publish: this.unary('publish', (r: quorumq.v1.PublishRequest): quorumq.v1.PublishResponse.$Properties | InjectedError => {
        this.publishRequests.push(r);
        const response = this.doPublish(r);
        return this.failAfterStore.shift() ?? response;
      }),
      publishStream: (call: ServerDuplexStream<quorumq.v1.PublishBatch, quorumq.v1.PublishOutcomes.$Properties>): void => {
        this.calls.push('publishStream');
        this.publishStreams.add(call);
        call.on('data', (batch: quorumq.v1.PublishBatch) => {
          this.publishBatchSizes.push(batch.publishes.length);
          for (const r of batch.publishes) this.onStreamPublish(call, r as quorumq.v1.PublishRequest);
        });
        call.on('end', () => call.end());
        call.on('error', () => undefined);
        call.on('close', () => this.publishStreams.delete(call));
      },
      consume: (call: ServerDuplexStream<quorumq.v1.ConsumeRequest, quorumq.v1.ConsumeResponse.$Properties>): void => {
        this.calls.push('consume');
        let consumer: ConsumerStream | undefined;
        call.on('data', (r: quorumq.v1.ConsumeRequest) => {
          if (r.subscribe !== null && r.subscribe !== undefined) {
            this.subscribes.push(r.subscribe);
            const injected = this.takeInjected('consume');
            if (injected !== undefined) {
              call.emit('error', serviceError(injected));
              return;
            }
            const queue = state.queues.get(r.subscribe.queue ?? '');
            if (queue === undefined) {
              call.emit('error', serviceError(this.notFound('QUEUE', r.subscribe.queue ?? '')));
              return;
            }
            const tag = r.subscribe.consumerTag === '' || r.subscribe.consumerTag === undefined || r.subscribe.consumerTag === null
              ? `amq.ctag-${this.calls.length}`
              : r.subscribe.consumerTag;
            consumer = { call, queue, tag, prefetch: r.subscribe.prefetch ?? 0, nextTag: 1, inFlight: new Map() };
            queue.consumers += 1;
            this.consumerStreams.add(consumer);
            call.write({ subscribed: { consumerTag: tag, queue: queue.name, leader: this.nodeId } });
            this.pump(consumer);
          } else if ((r.settle !== null && r.settle !== undefined) || (r.settles !== null && r.settles !== undefined)) {
            const settles = r.settle !== null && r.settle !== undefined ? [r.settle] : (r.settles?.settles ?? []);
            for (const settle of settles) {
              this.settles.push(settle);
              if (consumer !== undefined) this.settleConsumer(consumer, settle);
            }
          } else if (r.credit !== null && r.credit !== undefined) {
            this.credits.push(r.credit.prefetch ?? 0);
            if (consumer !== undefined) {
              consumer.prefetch = r.credit.prefetch ?? 0;
              this.pump(consumer);
            }
          }
        });
        const drop = (): void => {
          if (consumer !== undefined) this.dropConsumer(consumer);
        };
        call.on('end', () => {
          setTimeout(() => {
            drop();
            this.consumeStreamsEnded += 1;
            call.end();
          }, this.consumeEndDelayMs);
        });
        call.on('error', drop);
        call.on('close', drop);
        call.on('cancelled', drop);
      },
      get: this.unary('get', (r: quorumq.v1.GetRequest): quorumq.v1.GetResponse.$Properties | InjectedError => {
        const queue = state.queues.get(r.queue ?? '');
        if (queue === undefined) return this.notFound('QUEUE', r.queue ?? '');
        const m = queue.ready.shift();
        if (m === undefined) return { messageCount: 0 };
        m.deliveryCount += 1;
        if (r.manualAck) queue.unacked.set(m.id, m);
        return { delivery: this.deliveryOf(queue, `get-${m.id}`, m.id, m), messageCount: queue.ready.length };
      }),
      settleGet: this.unary('settleGet', (r: quorumq.v1.SettleGetRequest): quorumq.v1.SettleGetResponse.$Properties | InjectedError => {
        this.settleGets.push(r);
        const queue = state.queues.get(r.queue ?? '');
        if (queue === undefined) return this.notFound('QUEUE', r.queue ?? '');
        const id = wireNumber(r.settle?.deliveryTag);
        const m = queue.unacked.get(id);
        if (m === undefined) return { code: grpc.status.FAILED_PRECONDITION, reason: 'UNKNOWN_DELIVERY_TAG' };
        queue.unacked.delete(id);
        if (r.settle?.requeue === true) queue.ready.unshift(m);
        return {};
      }),
      move: (call: ServerWritableStream<quorumq.v1.MoveRequest, quorumq.v1.MoveProgress.$Properties>): void => {
        this.calls.push('move');
        const injected = this.takeInjected('move');
        if (injected !== undefined) {
          call.emit('error', serviceError(injected));
          return;
        }
        const source = state.queues.get(call.request.sourceQueue ?? '');
        if (source === undefined) {
          call.emit('error', serviceError(this.notFound('QUEUE', call.request.sourceQueue ?? '')));
          return;
        }
        const limit = wireNumber(call.request.limit);
        const total = limit === 0 ? source.ready.length : Math.min(limit, source.ready.length);
        for (let moved = 1; moved <= total; moved++) {
          const m = source.ready.shift();
          if (m === undefined) break;
          const key = call.request.routingKey === '' ? m.routingKey : call.request.routingKey ?? '';
          for (const q of state.route(call.request.destinationExchange ?? '', key)) state.enqueue(q, call.request.destinationExchange ?? '', m.message);
          call.write({ moved, total, done: moved === total });
        }
        if (total === 0) call.write({ moved: 0, total: 0, done: true });
        call.end();
      },
      queueStatus: this.unary('queueStatus', (r: quorumq.v1.QueueStatusRequest): quorumq.v1.QueueStatusResponse.$Properties | InjectedError => {
        const queue = state.queues.get(r.name ?? '');
        if (queue === undefined) return this.notFound('QUEUE', r.name ?? '');
        return this.queueStatus(queue);
      }),
      clusterStatus: this.unary('clusterStatus', (): quorumq.v1.ClusterStatusResponse.$Properties => ({
        node: this.nodeId,
        metadataLeader: state.nodes[0]?.id ?? '',
        nodes: state.nodes.map((n) => ({ id: n.id, address: n.address, reachable: true, diskAlarm: false, memoryAlarm: false })),
        queues: [...state.queues.values()].map((q) => this.queueStatus(q)),
      })),
    };
  }

  private queueStatus(queue: FakeQueue): quorumq.v1.QueueStatusResponse.$Properties {
    return {
      name: queue.name,
      leader: this.state.leaders.get(queue.name) ?? '',
      members: this.state.nodes.map((n) => n.id),
      commitIndex: 42,
      ready: queue.ready.length,
      unacked: queue.unacked.size,
      consumers: queue.consumers,
      term: 3,
    };
  }
}

/** Resolves once `predicate` holds (polling), or rejects after `timeoutMs`. */
export async function waitFor(predicate: () => boolean, timeoutMs = 3_000, what = 'condition'): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!predicate()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}
