/**
 * Seed 004, as written: a work queue with a DLX and delivery limit, and the three-tier
 * retry (retry queues with a TTL and no consumer, dead-lettering back to the work exchange),
 * then a final DLQ. Driven through the real router and one real machine per queue, with
 * simulated time: a tiny broker that does what the server will do with the effects.
 */
import { describe, expect, it } from 'vitest';
import { Topology, apply, createQueueState, parseQueueArguments, route, routeDeadLetter } from '../src/index.js';
import type { Command, Deaths, Effect, QueueArgumentsInput, QueueState, TopologyCommand } from '../src/index.js';

interface Delivery {
  readonly queue: string;
  readonly consumerId: string;
  readonly deliveryTag: number;
  readonly routingKeys: readonly string[];
  readonly deaths: Deaths | null;
}

class MiniBroker {
  readonly topology = new Topology();
  readonly queues = new Map<string, QueueState>();
  readonly deliveries: Delivery[] = [];
  /** Dead-letter targets dropped as cycles (spec 5), as the server counts them. */
  readonly droppedAsCycle: string[] = [];
  now = 0;
  private index = 0;

  admin(command: TopologyCommand): void {
    const reply = this.topology.apply(command);
    if (!reply.ok) throw reply.error;
  }

  declareQueue(name: string, args: QueueArgumentsInput = {}): void {
    this.admin({ type: 'declareQueue', name });
    this.queues.set(name, createQueueState(name, parseQueueArguments(args), this.now));
  }

  bind(exchange: string, queue: string, bindingKey: string): void {
    this.admin({ type: 'bind', source: exchange, destination: { kind: 'queue', name: queue }, bindingKey });
  }

  publish(exchange: string, routingKey: string, deaths?: Deaths): readonly string[] {
    const { queues } = route(this.topology, exchange, routingKey);
    for (const queue of queues) this.run(queue, { type: 'enqueue', sizeBytes: 100, exchange, routingKeys: [routingKey], ...(deaths === undefined ? {} : { deaths }) });
    return queues;
  }

  run(queue: string, command: Command): void {
    const state = this.queues.get(queue);
    if (state === undefined) throw new Error(`no queue ${queue}`);
    const result = apply({ index: ++this.index, term: 1, now: this.now }, command, state);
    if (result.reply.type === 'error') throw new Error(`${queue}: ${result.reply.message}`);
    this.queues.set(queue, result.state);
    for (const effect of result.effects) this.execute(queue, effect);
  }

  /** What the leader's driver does with an effect. */
  private execute(queue: string, effect: Effect): void {
    switch (effect.type) {
      case 'deliver':
        this.deliveries.push({ queue, consumerId: effect.consumerId, deliveryTag: effect.deliveryTag, routingKeys: effect.routingKeys, deaths: effect.deaths });
        return;
      case 'deadLetter': {
        // Route with the dead-letter routing keys, minus cycles; confirm once every target has it.
        const { queues, droppedAsCycle } = routeDeadLetter(this.topology, effect.exchange, effect.routingKeys, undefined, effect.deaths);
        this.droppedAsCycle.push(...droppedAsCycle);
        for (const target of queues) {
          this.run(target, { type: 'enqueue', sizeBytes: 100, exchange: effect.exchange, routingKeys: effect.routingKeys, deaths: effect.deaths });
        }
        if (effect.confirmRequired) this.run(queue, { type: 'deadLetterConfirmed', messageIds: [effect.messageId] });
        return;
      }
      case 'drop':
      case 'consumerTimedOut':
      case 'move':
      case 'moveDone':
      case 'scheduleTick':
      case 'deleteQueue':
        return;
    }
  }

  advance(ms: number): void {
    this.now += ms;
    for (const queue of [...this.queues.keys()]) this.run(queue, { type: 'tick' });
  }

  ready(queue: string): number {
    const state = this.queues.get(queue);
    return state === undefined ? 0 : state.messages.size;
  }

  takeDelivery(queue: string): Delivery {
    const index = this.deliveries.findIndex((d) => d.queue === queue);
    const [delivery] = this.deliveries.splice(index, 1);
    if (index < 0 || delivery === undefined) throw new Error(`no delivery from ${queue}`);
    return delivery;
  }
}

const TIERS = [
  { name: 'retry.5s', ttlMs: 5_000 },
  { name: 'retry.30s', ttlMs: 30_000 },
  { name: 'retry.5m', ttlMs: 300_000 },
];

/** The consumer's rule from the article: attempts so far = sum of the x-death counts. */
function attemptsSoFar(deaths: Deaths | null): number {
  return deaths === null ? 0 : deaths.records.reduce((sum, record) => sum + record.count, 0);
}

function seed004(): MiniBroker {
  const broker = new MiniBroker();
  broker.admin({ type: 'declareExchange', name: 'pesanan', exchangeType: 'topic' });
  broker.admin({ type: 'declareExchange', name: 'pesanan.dlx', exchangeType: 'direct' });
  broker.declareQueue('pesanan.email', { deadLetterExchange: 'pesanan.dlx', deadLetterRoutingKey: 'pesanan.email', deliveryLimit: 5 });
  broker.bind('pesanan', 'pesanan.email', 'pesanan.*.dibuat');
  for (const tier of TIERS) {
    broker.declareQueue(tier.name, { messageTtlMs: tier.ttlMs, deadLetterExchange: 'pesanan', deadLetterRoutingKey: 'pesanan.jakarta.dibuat' });
    broker.bind('pesanan.dlx', tier.name, tier.name);
  }
  broker.declareQueue('pesanan.email.dlq');
  broker.bind('pesanan.dlx', 'pesanan.email.dlq', 'habis');
  broker.bind('pesanan.dlx', 'pesanan.email.dlq', 'pesanan.email');
  return broker;
}

describe('seed 004: DLX and three-tier retry, through the router and the machines', () => {
  it('a message that always fails goes 5s -> 30s -> 5m, then to the DLQ, with its history', () => {
    const broker = seed004();
    broker.run('pesanan.email', { type: 'subscribe', consumerId: 'worker', prefetch: 1 });
    expect(broker.publish('pesanan', 'pesanan.jakarta.dibuat')).toEqual(['pesanan.email']);

    for (let attempt = 0; attempt <= TIERS.length; attempt++) {
      const delivery = broker.takeDelivery('pesanan.email');
      const n = attemptsSoFar(delivery.deaths);
      expect(n).toBe(attempt);
      // The consumer republishes to the chosen tier, then acks the original.
      const target = n < TIERS.length ? TIERS[n]!.name : 'habis';
      broker.publish('pesanan.dlx', target, delivery.deaths ?? undefined);
      broker.run('pesanan.email', { type: 'ack', consumerId: 'worker', deliveryTag: delivery.deliveryTag });
      if (target === 'habis') break;
      const tier = TIERS[n]!;
      // Nobody consumes a retry queue: the broker moves it back when its TTL is over.
      broker.advance(tier.ttlMs - 1);
      expect(broker.ready(tier.name)).toBe(1);
      broker.advance(1);
      expect(broker.ready(tier.name)).toBe(0);
    }
    expect(broker.ready('pesanan.email.dlq')).toBe(1);
    const dlq = broker.queues.get('pesanan.email.dlq')!;
    const parked = apply({ index: 10_000, term: 1, now: broker.now }, { type: 'get', ackMode: 'auto' }, dlq).reply;
    expect(parked.type).toBe('message');
    if (parked.type !== 'message') return;
    // Its history: one expiry in each tier, newest first.
    expect(parked.message.deaths?.records.map((r) => [r.queue, r.reason, r.count])).toEqual([
      ['retry.5m', 'expired', 1],
      ['retry.30s', 'expired', 1],
      ['retry.5s', 'expired', 1],
    ]);
  });

  it('a poison message that is redelivered past x-delivery-limit lands in the DLQ by the DLX rule', () => {
    const broker = seed004();
    broker.run('pesanan.email', { type: 'subscribe', consumerId: 'worker', prefetch: 1 });
    broker.publish('pesanan', 'pesanan.bandung.dibuat');
    let returns = 0;
    while (broker.deliveries.length > 0) {
      const delivery = broker.takeDelivery('pesanan.email');
      broker.run('pesanan.email', { type: 'return', consumerId: 'worker', deliveryTag: delivery.deliveryTag });
      returns++;
      if (returns > 10) break;
    }
    // Routed with the queue's dead-letter routing key, not the original one.
    expect(broker.ready('pesanan.email')).toBe(0);
    expect(broker.ready('pesanan.email.dlq')).toBe(1);
    const parked = apply({ index: 20_000, term: 1, now: broker.now }, { type: 'get', ackMode: 'auto' }, broker.queues.get('pesanan.email.dlq')!).reply;
    expect(parked.type).toBe('message');
    if (parked.type !== 'message') return;
    expect(parked.message.routingKeys).toEqual(['pesanan.email']);
    expect(parked.message.deaths?.records.map((r) => [r.queue, r.reason])).toEqual([['pesanan.email', 'delivery_limit']]);
  });
});

describe('spec 5 cycles through the router and the machines', () => {
  it('a TTL ping-pong between two queues ends after one round: the message is dropped as a cycle', () => {
    const broker = new MiniBroker();
    broker.admin({ type: 'declareExchange', name: 'dlx', exchangeType: 'direct' });
    broker.declareQueue('a', { messageTtlMs: 1_000, deadLetterExchange: 'dlx', deadLetterRoutingKey: 'to-b' });
    broker.declareQueue('b', { messageTtlMs: 1_000, deadLetterExchange: 'dlx', deadLetterRoutingKey: 'to-a' });
    broker.bind('dlx', 'b', 'to-b');
    broker.bind('dlx', 'a', 'to-a');
    broker.publish('', 'a');
    broker.advance(1_000);
    expect([broker.ready('a'), broker.ready('b')]).toEqual([0, 1]);
    broker.advance(1_000);
    // Expired in b, back to a where it already expired: a cycle, so it goes nowhere.
    expect([broker.ready('a'), broker.ready('b')]).toEqual([0, 0]);
    expect(broker.droppedAsCycle).toEqual(['a']);
    for (let i = 0; i < 5; i++) broker.advance(1_000);
    expect(broker.droppedAsCycle).toEqual(['a']);
  });

  it('a queue whose DLX routes back to itself drops its expired messages instead of looping', () => {
    const broker = new MiniBroker();
    broker.admin({ type: 'declareExchange', name: 'dlx', exchangeType: 'fanout' });
    broker.declareQueue('self', { messageTtlMs: 500, deadLetterExchange: 'dlx' });
    broker.declareQueue('audit');
    broker.bind('dlx', 'self', '');
    broker.bind('dlx', 'audit', '');
    broker.publish('', 'self');
    broker.advance(500);
    expect([broker.ready('self'), broker.ready('audit')]).toEqual([0, 1]);
    expect(broker.droppedAsCycle).toEqual(['self']);
  });
});
