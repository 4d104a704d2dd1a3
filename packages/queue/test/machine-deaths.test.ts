import { describe, expect, it } from 'vitest';
import { isDeadLetterCycle, recordDeath, type Death, type Deaths } from '../src/machine/index.js';

const death = (queue: string, reason: Death['reason'], time: number, originalExpirationMs: number | null = null): Death => ({
  queue,
  reason,
  exchange: 'work-ex',
  routingKeys: ['job'],
  time,
  originalExpirationMs,
});

function chain(...deaths: Death[]): Deaths {
  let result: Deaths | null = null;
  for (const d of deaths) result = recordDeath(result, d);
  if (result === null) throw new Error('empty chain');
  return result;
}

describe('spec 5: death records', () => {
  it('fold per (queue, reason): count increments and the record moves to the front', () => {
    const deaths = chain(death('work', 'rejected', 1000), death('retry', 'expired', 2000), death('work', 'rejected', 3000));
    expect(deaths.records.map((r) => [r.queue, r.reason, r.count, r.firstTime, r.lastTime])).toEqual([
      ['work', 'rejected', 2, 1000, 3000],
      ['retry', 'expired', 1, 2000, 2000],
    ]);
  });

  it('first_death is set once and never changes; last_death follows every death', () => {
    const deaths = chain(death('work', 'rejected', 1), death('retry', 'expired', 2));
    expect(deaths.first).toEqual({ reason: 'rejected', queue: 'work', exchange: 'work-ex' });
    expect(deaths.last).toEqual({ reason: 'expired', queue: 'retry', exchange: 'work-ex' });
  });

  it('keeps original_expiration', () => {
    expect(chain(death('q', 'expired', 5, 250)).records[0]?.originalExpirationMs).toBe(250);
  });

  it('recordDeath does not mutate the previous records', () => {
    const first = chain(death('q', 'rejected', 1));
    const snapshot = JSON.stringify(first);
    recordDeath(first, death('q', 'rejected', 2));
    expect(JSON.stringify(first)).toBe(snapshot);
  });
});

describe('spec 5: dead-letter cycles', () => {
  it('a queue dead-lettering expired messages to itself is a cycle', () => {
    expect(isDeadLetterCycle(chain(death('q', 'expired', 1)), 'q')).toBe(true);
  });

  it('the seed 004 tiered retry (reject -> retry TTL -> back to work) is not a cycle', () => {
    const deaths = chain(death('work', 'rejected', 1), death('retry-1', 'expired', 2));
    expect(isDeadLetterCycle(deaths, 'work')).toBe(false);
  });

  it('an expiry loop between two queues without a rejection is a cycle', () => {
    const deaths = chain(death('a', 'expired', 1), death('b', 'expired', 2));
    expect(isDeadLetterCycle(deaths, 'a')).toBe(true);
    expect(isDeadLetterCycle(deaths, 'c')).toBe(false);
  });

  it('a rejection in between breaks the cycle', () => {
    const deaths = chain(death('a', 'expired', 1), death('b', 'rejected', 2), death('c', 'expired', 3));
    expect(isDeadLetterCycle(deaths, 'a')).toBe(false);
  });
});
