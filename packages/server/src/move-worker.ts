/**
 * Moves (spec 8), on the source queue's leader: publishes one message of a move to its
 * destination, then lets it leave the source (`moveConfirmed`), or puts it back
 * (`moveFailed`) when the destination refused it. A leader change re-issues unsettled
 * moves: at least once.
 */
import { route, TopologyError, type Effect } from '@quorumq/queue';

import { headersFromWire } from './headers.js';
import type { LeaderWorkContext } from './leader-work.js';
import type { LocalQueue } from './local-queue.js';
import { republication } from './republication.js';
import { UntilDone } from './until-done.js';

type Move = Extract<Effect, { type: 'move' }>;

export interface MoveTestOnlyBugs {
  /** Confirm each message to the source before the destination committed it (loses messages). */
  readonly confirmBeforeTarget?: boolean;
}

export class MoveWorker {
  private readonly work: UntilDone;

  constructor(
    private readonly context: LeaderWorkContext,
    private readonly testOnlyBugs: MoveTestOnlyBugs = {},
  ) {
    this.work = new UntilDone(context.env, context.logger, context.stillLeads, 'moving a message');
  }

  forget(queue: LocalQueue): void {
    this.work.forget(queue);
  }

  move(queue: LocalQueue, effect: Move): void {
    if (this.work.isRunning(queue, effect.messageId)) return;
    const stored = queue.replica.message(effect.messageId);
    const { context } = this;
    this.work.run(queue, effect.messageId, async () => {
      const headers = headersFromWire(stored?.headers);
      const routeHere = (): readonly string[] => {
        try {
          return route(context.topology(), effect.exchange, effect.routingKeys, headers).queues;
        } catch (error) {
          if (!(error instanceof TopologyError)) throw error;
          return [];
        }
      };
      let targets = routeHere();
      if (targets.length === 0) {
        // As for dead-letters: a bind made through another node just before may not be
        // applied here yet. Catch up before calling the message unroutable.
        await context.metaBarrier();
        targets = routeHere();
      }
      const { message, command } = republication(stored, effect.exchange, effect.routingKeys, effect.deaths, true);
      if (this.testOnlyBugs.confirmBeforeTarget === true) {
        await context.proposeLocal(queue, { type: 'moveConfirmed', moveId: effect.moveId, messageIds: [effect.messageId] });
        await Promise.all(targets.map((target) => context.proposeQueue(target, command, message)));
        return;
      }
      const replies = await Promise.all(targets.map((target) => context.proposeQueue(target, command, message)));
      const ok = targets.length > 0 && !replies.some((r) => r.type === 'error' || r.type === 'rejected');
      await context.proposeLocal(queue, { type: ok ? 'moveConfirmed' : 'moveFailed', moveId: effect.moveId, messageIds: [effect.messageId] });
    });
  }
}
