/**
 * Executes the effects a queue's leader replica returns from apply: the one place where a
 * machine effect becomes an action of the node. The switch is exhaustive: a new `Effect`
 * variant is a type error here until it is handled. Effects run on the leader only, inside
 * apply (QueueReplica calls `run` synchronously); anything slow is started, not awaited.
 */
import type { Effect } from '@quorumq/queue';
import type { Logger } from 'pino';

import type { ConsumerRegistry } from './consumers.js';
import type { DeadLetterWorker } from './dead-letter-worker.js';
import type { LocalQueue } from './local-queue.js';
import type { MetaCommand, MetaReply } from './meta-machine.js';
import type { NodeMetrics } from './metrics.js';
import type { MoveWorker } from './move-worker.js';
import { invariant } from './invariant.js';
import { streamDeliveryOf } from './queue-replica.js';

export interface EffectRunnerParts {
  readonly consumers: ConsumerRegistry;
  readonly deadLetters: DeadLetterWorker;
  readonly moves: MoveWorker;
  readonly metrics: NodeMetrics;
  readonly logger: Logger;
  /** Proposes a `tick` to the queue at (or soon after) leader time `at`. */
  scheduleTick(queue: LocalQueue, at: number): void;
  proposeMeta(command: MetaCommand): Promise<MetaReply>;
}

export class EffectRunner {
  constructor(private readonly parts: EffectRunnerParts) {}

  run(queue: LocalQueue, effects: readonly Effect[]): void {
    if (effects.length === 0) return;
    // The hand-off from apply: only the leader's replica acts on its machine's effects.
    invariant(queue.group.isLeader, () => `effects of queue ${JSON.stringify(queue.definition.name)} reached a node that does not lead it`);
    for (const effect of effects) this.runOne(queue, effect);
  }

  private runOne(queue: LocalQueue, effect: Effect): void {
    const { parts } = this;
    const name = queue.definition.name;
    switch (effect.type) {
      case 'deliver': {
        const consumer = parts.consumers.get(effect.consumerId);
        if (consumer === undefined) return; // a get, or a consumer attached elsewhere
        consumer.deliver(streamDeliveryOf(name, consumer.tag, effect, queue.replica.encoded(effect.messageId)));
        parts.metrics.deliveryPushed();
        queue.leaderCounts.deliveries += 1;
        return;
      }
      case 'deadLetter':
        parts.deadLetters.deadLetter(queue, effect);
        return;
      case 'drop':
        parts.metrics.dropped.inc({ reason: effect.reason });
        return;
      case 'dropWaiting':
        parts.metrics.dropped.inc({ reason: effect.reason }, effect.count);
        return;
      case 'consumerTimedOut':
        parts.consumers.get(effect.consumerId)?.event({
          kind: 'consumer_timeout',
          message: `delivery ${effect.deliveryTag} was not acknowledged within consumer_timeout and was returned to the queue`,
          deliveryTag: effect.deliveryTag,
        });
        return;
      case 'scheduleTick':
        parts.scheduleTick(queue, effect.at);
        return;
      case 'deleteQueue':
        parts.logger.info({ queue: name, reason: effect.reason }, 'queue deletes itself');
        parts.proposeMeta({ type: 'deleteQueue', name, reason: effect.reason, createdIndex: queue.definition.createdIndex }).catch((error: unknown) =>
          parts.logger.warn({ err: error, queue: name }, 'could not delete queue from metadata; will retry on next tick'),
        );
        return;
      case 'move':
        parts.moves.move(queue, effect);
        return;
      case 'moveDone':
        parts.logger.info({ queue: name, move: effect.moveId, outcome: effect.outcome, moved: effect.moved, failed: effect.failed }, 'move finished');
        return;
      default:
        return unhandled(effect);
    }
  }
}

/** Compile-time exhaustiveness: `effect` is `never` once every variant has a case. */
function unhandled(effect: never): never {
  throw new Error(`unhandled effect ${JSON.stringify(effect)}`);
}
