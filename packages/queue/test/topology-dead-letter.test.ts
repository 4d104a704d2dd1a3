/** Spec 5 cycles, decided by the router per target queue: routeDeadLetter. */
import { describe, expect, test } from 'vitest';
import { recordDeath, type Death, type Deaths } from '../src/machine/index.js';
import { route, routeDeadLetter, TopologyError } from '../src/topology/index.js';
import { args, bind, declareExchange, declareQueue, queue, setUp, str } from './topology-helpers.js';

const death = (queueName: string, reason: Death['reason']): Death => ({
  queue: queueName,
  reason,
  exchange: 'work',
  routingKeys: ['job'],
  time: 1_000,
  originalExpirationMs: null,
});

function chain(...deaths: Death[]): Deaths {
  let result: Deaths | null = null;
  for (const next of deaths) result = recordDeath(result, next);
  if (result === null) throw new Error('empty chain');
  return result;
}

/** dlx (fanout) reaches both the work queue and a parking queue. */
const topology = () => setUp([declareQueue('work'), declareQueue('parked'), declareExchange('dlx', 'fanout'), bind('dlx', queue('work')), bind('dlx', queue('parked'))]);

describe('spec 5: a dead-letter cycle drops the message for that target only', () => {
  test('expired in work and routed back to work: work is dropped as a cycle, parked keeps it', () => {
    const result = routeDeadLetter(topology(), 'dlx', ['job'], undefined, chain(death('work', 'expired')));
    expect(result).toEqual({ queues: ['parked'], droppedAsCycle: ['work'], unroutable: false });
  });

  test('a rejected death in between is a client decision: no cycle (reject -> retry loops are allowed)', () => {
    const deaths = chain(death('work', 'expired'), death('retry', 'rejected'));
    expect(routeDeadLetter(topology(), 'dlx', ['job'], undefined, deaths)).toEqual({ queues: ['parked', 'work'], droppedAsCycle: [], unroutable: false });
  });

  test('the latest death rejected: never a cycle', () => {
    const deaths = chain(death('work', 'rejected'), death('work', 'rejected'));
    expect(routeDeadLetter(topology(), 'dlx', ['job'], undefined, deaths).droppedAsCycle).toEqual([]);
  });

  test('an earlier death in work with another reason is not a cycle', () => {
    const deaths = chain(death('work', 'maxlen'), death('retry', 'expired'));
    expect(routeDeadLetter(topology(), 'dlx', ['job'], undefined, deaths).queues).toEqual(['parked', 'work']);
  });

  test('every target a cycle: no queue left, but it was routable (the server drops and counts it)', () => {
    const t = setUp([declareQueue('work'), declareExchange('dlx', 'direct'), bind('dlx', queue('work'), 'job')]);
    expect(routeDeadLetter(t, 'dlx', ['job'], undefined, chain(death('work', 'delivery_limit')))).toEqual({
      queues: [],
      droppedAsCycle: ['work'],
      unroutable: false,
    });
    expect(routeDeadLetter(t, 'dlx', ['other'], undefined, chain(death('work', 'expired')))).toEqual({ queues: [], droppedAsCycle: [], unroutable: true });
  });

  test('routes like route(): several keys, headers, the default exchange', () => {
    const t = setUp([declareQueue('a'), declareQueue('b'), declareExchange('h', 'headers'), bind('h', queue('a'), '', args({ k: str('v') }))]);
    const deaths = chain(death('b', 'expired'));
    expect(routeDeadLetter(t, 'h', [], new Map([['k', str('v')]]), deaths).queues).toEqual(['a']);
    expect(routeDeadLetter(t, '', ['a', 'b'], undefined, deaths)).toEqual({ queues: ['a'], droppedAsCycle: ['b'], unroutable: false });
    expect(route(t, '', ['a', 'b']).queues).toEqual(['a', 'b']);
  });

  test('an unknown dead-letter exchange throws NOT_FOUND like route()', () => {
    expect(() => routeDeadLetter(topology(), 'nope', ['job'], undefined, chain(death('work', 'expired')))).toThrow(TopologyError);
  });
});
