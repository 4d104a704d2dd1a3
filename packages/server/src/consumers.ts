/**
 * The consumers whose streams are attached to this node (which leads their queues): where
 * the effect runner hands deliveries and consumer events, and what the node ends when it
 * stops leading a queue. The API layer (service.ts) attaches a gRPC stream; the simulator
 * attaches its simulated clients through the same interface.
 */
import { quorumq } from '@quorumq/proto';

import type { BrokerError } from './errors.js';
import type { OutgoingDelivery } from './wire.js';

import pb = quorumq.v1;

export interface LocalConsumer {
  readonly id: string;
  readonly queue: string;
  readonly tag: string;
  /** A delivery for this consumer (sent at the turn's end, in bounded batches: see DeliveryOutbox). */
  deliver(delivery: OutgoingDelivery): void;
  /** An event on the consumer's stream (a consumer timeout). */
  event(event: pb.ConsumerEvent.$Properties): void;
  /** The node ends the consumer (lost leadership, queue deleted, shutdown). */
  end(error: BrokerError): void;
}

export class ConsumerRegistry {
  private readonly consumers = new Map<string, LocalConsumer>();

  attach(consumer: LocalConsumer): void {
    this.consumers.set(consumer.id, consumer);
  }

  detach(id: string): void {
    this.consumers.delete(id);
  }

  get(id: string): LocalConsumer | undefined {
    return this.consumers.get(id);
  }

  has(id: string): boolean {
    return this.consumers.has(id);
  }

  /** Whether some consumer of `queue` is attached here. */
  servesQueue(queue: string): boolean {
    for (const consumer of this.consumers.values()) if (consumer.queue === queue) return true;
    return false;
  }

  /** Ends (and detaches) the consumers of `queue`, or every consumer with `queue` null. */
  endAll(queue: string | null, error: BrokerError): void {
    for (const consumer of [...this.consumers.values()]) {
      if (queue !== null && consumer.queue !== queue) continue;
      this.consumers.delete(consumer.id);
      consumer.end(error);
    }
  }
}
