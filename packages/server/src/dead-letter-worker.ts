/**
 * Dead-lettering (spec 5), on the source queue's leader: routes a dead-lettered message
 * through its dead-letter exchange, publishes it to every target queue, and, for the
 * at-least-once strategy, lets it leave the source (`deadLetterConfirmed`) only once every
 * target committed it. A leader change re-issues unconfirmed dead-letters (at least once).
 * As ra keeps rabbit_fifo_dlx_worker beside rabbit_fifo.
 */
import { routeDeadLetter, TopologyError, type Effect } from '@quorumq/queue';

import { headersFromWire } from './headers.js';
import type { LeaderWorkContext } from './leader-work.js';
import type { LocalQueue } from './local-queue.js';
import { republication } from './republication.js';
import { UntilDone } from './until-done.js';

type DeadLetter = Extract<Effect, { type: 'deadLetter' }>;

export interface DeadLetterTestOnlyBugs {
  /** Confirm the dead-letter to the source before the targets committed it (loses messages). */
  readonly confirmBeforeTargets?: boolean;
}

export class DeadLetterWorker {
  private readonly work: UntilDone;

  constructor(
    private readonly context: LeaderWorkContext,
    private readonly testOnlyBugs: DeadLetterTestOnlyBugs = {},
  ) {
    this.work = new UntilDone(context.env, context.logger, context.stillLeads, 'dead-lettering');
  }

  /** The queue's leadership ended here: its next leader re-issues what is unconfirmed. */
  forget(queue: LocalQueue): void {
    this.work.forget(queue);
  }

  deadLetter(queue: LocalQueue, effect: DeadLetter): void {
    if (this.work.isRunning(queue, effect.messageId)) return;
    const stored = queue.replica.message(effect.messageId);
    const { context } = this;
    context.metrics.deadLettered.inc({ reason: effect.reason });
    queue.leaderCounts.deadLettered.set(effect.reason, (queue.leaderCounts.deadLettered.get(effect.reason) ?? 0) + 1);
    this.work.run(queue, effect.messageId, async () => {
      const headers = headersFromWire(stored?.headers);
      const routeHere = (): ReturnType<typeof routeDeadLetter> | null => {
        try {
          return routeDeadLetter(context.topology(), effect.exchange, effect.routingKeys, headers, effect.deaths);
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
        await context.metaBarrier();
        routed = routeHere();
      }
      let kept: readonly string[] = [];
      if (routed === null) {
        context.metrics.dropped.inc({ reason: 'dead_letter_exchange_missing' });
        context.logger.warn({ queue: queue.definition.name, exchange: effect.exchange }, 'dead-letter exchange missing: message dropped');
      } else {
        kept = routed.queues;
        if (routed.droppedAsCycle.length > 0) context.metrics.dropped.inc({ reason: 'dead_letter_cycle' }, routed.droppedAsCycle.length);
        if (routed.unroutable) context.metrics.dropped.inc({ reason: 'dead_letter_unroutable' });
      }
      // Spec 5: an expired message is dead-lettered without its expiration.
      const { message, command } = republication(stored, effect.exchange, effect.routingKeys, effect.deaths, effect.reason !== 'expired');
      const confirm = (): Promise<unknown> => context.proposeLocal(queue, { type: 'deadLetterConfirmed', messageIds: [effect.messageId] });
      if (effect.confirmRequired && this.testOnlyBugs.confirmBeforeTargets === true) {
        await confirm();
        await Promise.all(kept.map((target) => context.proposeQueue(target, command, message)));
        return;
      }
      await Promise.all(kept.map((target) => context.proposeQueue(target, command, message)));
      if (effect.confirmRequired) await confirm();
    });
  }
}
