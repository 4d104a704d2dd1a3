/**
 * Seed 004's tiered retry, driven through two machines with simulated time and a
 * stand-in for the router (the real one lives in topology/): the work queue dead-letters
 * rejected messages to a retry queue with a TTL and no consumer, which dead-letters them
 * back to the work queue when they expire.
 */
import { describe, expect, it } from 'vitest';
import { isDeadLetterCycle, type Effect } from '../src/machine/index.js';
import { Harness } from './machine-harness.js';

type DeadLetter = Extract<Effect, { type: 'deadLetter' }>;

function deadLetters(h: Harness): DeadLetter[] {
  return h.ofType('deadLetter');
}

describe('seed 004: tiered retry through a TTL queue without consumers', () => {
  it('a rejected message comes back after the retry TTL with its deaths, and is not a cycle', () => {
    const work = new Harness({ deadLetterExchange: 'retry-ex', deadLetterRoutingKey: 'retry' }, 'work');
    const retry = new Harness({ messageTtlMs: 1000, deadLetterExchange: 'work-ex', deadLetterRoutingKey: 'job' }, 'retry');
    work.run({ type: 'subscribe', consumerId: 'worker', prefetch: 1 });
    work.publish({ exchange: 'work-ex', routingKeys: ['job'] });

    for (let attempt = 1; attempt <= 3; attempt += 1) {
      const tag = work.deliveries('worker')[0]?.deliveryTag ?? -1;
      work.run({ type: 'discard', consumerId: 'worker', deliveryTag: tag });
      const [toRetry] = deadLetters(work);
      expect(toRetry).toMatchObject({ reason: 'rejected', exchange: 'retry-ex', routingKeys: ['retry'], confirmRequired: true });
      if (toRetry === undefined) return;
      expect(isDeadLetterCycle(toRetry.deaths, 'retry')).toBe(false);
      retry.now = work.now;
      retry.publish({ exchange: 'retry-ex', routingKeys: ['retry'], deaths: toRetry.deaths });
      // The retry queue committed it: at-least-once lets the work queue forget it.
      work.run({ type: 'deadLetterConfirmed', messageIds: [toRetry.messageId] });

      retry.advance(1000);
      const [back] = deadLetters(retry);
      expect(back).toMatchObject({ reason: 'expired', exchange: 'work-ex', routingKeys: ['job'] });
      if (back === undefined) return;
      expect(isDeadLetterCycle(back.deaths, 'work')).toBe(false);
      retry.run({ type: 'deadLetterConfirmed', messageIds: [back.messageId] });
      work.now = retry.now;
      work.publish({ exchange: 'work-ex', routingKeys: ['job'], deaths: back.deaths });
      const delivered = work.deliveries('worker')[0];
      expect(delivered?.deaths?.records.map((r) => [r.queue, r.reason, r.count])).toEqual([
        ['retry', 'expired', attempt],
        ['work', 'rejected', attempt],
      ]);
      expect(delivered?.deaths?.first).toEqual({ reason: 'rejected', queue: 'work', exchange: 'work-ex' });
    }
    expect(work.state.gone.rejected).toBe(3);
    expect(retry.state.gone.expired).toBe(3);
    expect(retry.state.messages.size).toBe(0);
  });
});
