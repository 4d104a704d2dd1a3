/**
 * Leader work on one message of one queue (a dead-letter, a move), retried with a bounded
 * back-off until it succeeds or this node stops leading the queue: the next leader re-issues
 * unsettled work from the machine's state, so the work is done at least once. A message's
 * work never runs twice at once on this node.
 */
import type { Logger } from 'pino';

import type { LocalQueue } from './local-queue.js';
import type { NodeEnv } from './node-env.js';

export class UntilDone {
  /** Messages with work running, per queue replica (a re-created queue starts empty). */
  private readonly running = new WeakMap<LocalQueue, Set<number>>();

  constructor(
    private readonly env: NodeEnv,
    private readonly logger: Logger,
    /** Whether this node still leads `queue` (the same replica): else retrying stops. */
    private readonly stillLeads: (queue: LocalQueue) => boolean,
    private readonly what: string,
  ) {}

  isRunning(queue: LocalQueue, messageId: number): boolean {
    return this.running.get(queue)?.has(messageId) ?? false;
  }

  /** Forgets the work of `queue` (its leadership ended: the next leader re-issues it). */
  forget(queue: LocalQueue): void {
    this.running.delete(queue);
  }

  run(queue: LocalQueue, messageId: number, attempt: () => Promise<void>): void {
    let running = this.running.get(queue);
    if (running === undefined) {
      running = new Set();
      this.running.set(queue, running);
    }
    if (running.has(messageId)) return;
    running.add(messageId);
    const inFlight = running;
    const once = (tries: number): void => {
      attempt().then(
        () => inFlight.delete(messageId),
        (error: unknown) => {
          if (!this.stillLeads(queue)) {
            inFlight.delete(messageId);
            return;
          }
          this.logger.warn({ queue: queue.definition.name, err: error, tries }, `${this.what} failed; retrying`);
          this.env.after(Math.min(2000, 100 * 2 ** Math.min(tries, 5)), () => once(tries + 1));
        },
      );
    };
    once(0);
  }
}
