/**
 * Spec 5: death records between the queue machine and the wire, written once in
 * @quorumq/proto/deaths (shared with the SDK): a delivery carries them and their x-death
 * headers, a publish that carries them back is checked and gives the machine the same records.
 */
import { quorumq } from '@quorumq/proto';
import { DEAD_LETTER_REASONS, deathsFromWire, deathsToWire, xDeathHeaders } from '@quorumq/proto/deaths';
import { recordDeath, validateDeaths, type DeadLetterReason, type Death, type DeliveredMessage, type Deaths } from '@quorumq/queue';
import { describe, expect, it } from 'vitest';

import { publishedDeaths } from '../src/deaths.js';
import { BrokerError, Status } from '../src/errors.js';
import { deliveryOf } from '../src/queue-replica.js';

import pb = quorumq.v1;

const death = (queue: string, reason: DeadLetterReason, time: number, originalExpirationMs: number | null = null): Death => ({
  queue,
  reason,
  exchange: 'work-ex',
  routingKeys: ['job', 'job.eu'],
  time,
  originalExpirationMs,
});

/** rejected from `work` at 1 s, expired from `retry` at 62.5 s (it had a 60 s expiration), rejected from `work` again at 70 s. */
const DEATHS: Deaths = [death('work', 'rejected', 1_000), death('retry', 'expired', 62_500, 60_000), death('work', 'rejected', 70_000)].reduce<Deaths | null>(
  (previous, d) => recordDeath(previous, d),
  null,
) as Deaths;

/** Through protobuf bytes, as a peer or a client receives it. */
const overTheWire = (message: pb.Message.$Properties): pb.Message => pb.Message.decode(pb.Message.encode(message).finish());

describe('death records on the wire', () => {
  it('go out and come back as the same records, through protobuf bytes', () => {
    const message = overTheWire({ body: Buffer.from('x'), ...deathsToWire(DEATHS) });
    expect(message.deaths.map((r) => [r.queue, r.reason, r.count, r.firstTimeMs, r.lastTimeMs, r.originalExpirationMs ?? null])).toEqual([
      ['work', 'rejected', 2, 1_000, 70_000, null],
      ['retry', 'expired', 1, 62_500, 62_500, 60_000],
    ]);
    expect(deathsFromWire(message)).toEqual(DEATHS);
    expect(publishedDeaths(message)).toEqual(DEATHS);
  });

  it('none: the wire fields are cleared, and a message without records has none', () => {
    expect(deathsToWire(null)).toEqual({ deaths: [], firstDeath: null, lastDeath: null });
    expect(deathsFromWire(overTheWire({ body: Buffer.from('x') }))).toBeNull();
    expect(publishedDeaths(overTheWire({ body: Buffer.from('x'), firstDeath: { reason: 'rejected' } }))).toBeUndefined();
  });

  it('a publish without summaries gets them from the oldest and newest record; a count of 0 counts once', () => {
    const { deaths } = deathsToWire(DEATHS);
    const message = overTheWire({ body: Buffer.from('x'), deaths: deaths.map((d) => ({ ...d, count: 0 })) });
    expect(publishedDeaths(message)).toEqual({
      records: DEATHS.records.map((r) => ({ ...r, count: 1 })),
      first: { reason: 'expired', queue: 'retry', exchange: 'work-ex' },
      last: { reason: 'rejected', queue: 'work', exchange: 'work-ex' },
    });
  });

  it('a publish with an unknown reason is refused with INVALID_ARGUMENT, naming the record or summary', () => {
    const wire = deathsToWire(DEATHS);
    const refusal = (message: pb.Message.$Properties): unknown => {
      try {
        publishedDeaths(overTheWire(message));
        return null;
      } catch (error) {
        return error instanceof BrokerError ? [error.code, error.reason, error.message] : error;
      }
    };
    const reasons = 'rejected, expired, maxlen, delivery_limit, compacted';
    const deaths = [wire.deaths[0]!, { ...wire.deaths[1]!, reason: 'bored' }];
    expect(refusal({ ...wire, deaths })).toEqual([Status.INVALID_ARGUMENT, 'INVALID_ARGUMENT', `deaths[1]: reason must be one of ${reasons}`]);
    expect(refusal({ ...wire, lastDeath: { ...wire.lastDeath, reason: '' } })).toEqual([Status.INVALID_ARGUMENT, 'INVALID_ARGUMENT', `last_death: reason must be one of ${reasons}`]);
  });

  it('the shared list of reasons is the queue machine\'s', () => {
    // Both ways at compile time...
    const listed: readonly DeadLetterReason[] = DEAD_LETTER_REASONS;
    const allListed: [Exclude<DeadLetterReason, (typeof DEAD_LETTER_REASONS)[number]>] extends [never] ? true : false = true;
    expect(allListed).toBe(true);
    // ...and the machine accepts every listed one, and no other.
    const withReason = (reason: string) => ({ ...DEATHS, records: [{ ...DEATHS.records[1]!, reason }], first: { ...DEATHS.first, reason }, last: { ...DEATHS.last, reason } });
    for (const reason of listed) expect(validateDeaths(withReason(reason))).toBeNull();
    expect(validateDeaths(withReason('bored'))?.code).toBe('INVALID_ARGUMENT');
  });
});

describe('x-death headers (spec 5: the RabbitMQ header form of the same records)', () => {
  it('newest first, with the first death time of each (queue, reason) and the original expiration', () => {
    const str = (value: string) => ({ stringValue: value });
    const keys = { listValue: { values: [str('job'), str('job.eu')] } };
    expect(xDeathHeaders(DEATHS)).toEqual({
      'x-death': {
        listValue: {
          values: [
            { mapValue: { entries: { count: { intValue: 2 }, reason: str('rejected'), queue: str('work'), time: { timestampMs: 1_000 }, exchange: str('work-ex'), 'routing-keys': keys } } },
            {
              mapValue: {
                entries: {
                  count: { intValue: 1 },
                  reason: str('expired'),
                  queue: str('retry'),
                  time: { timestampMs: 62_500 },
                  exchange: str('work-ex'),
                  'routing-keys': keys,
                  'original-expiration': str('60000'),
                },
              },
            },
          ],
        },
      },
      'x-first-death-reason': str('rejected'),
      'x-first-death-queue': str('work'),
      'x-first-death-exchange': str('work-ex'),
      'x-last-death-reason': str('rejected'),
      'x-last-death-queue': str('work'),
      'x-last-death-exchange': str('work-ex'),
    });
  });

  it('a delivery carries the machine\'s records and their headers next to the message\'s own, and never a stale copy\'s', () => {
    const delivered: DeliveredMessage = { messageId: 1, deliveryTag: 1, deliveryCount: 0, redelivered: false, sizeBytes: 1, exchange: 'dlx', routingKeys: ['dead'], deaths: DEATHS };
    const stale = deathsToWire({ ...DEATHS, records: DEATHS.records.slice(1) });
    const stored: pb.Message.$Properties = { body: Buffer.from('x'), headers: { tenant: { stringValue: 'acme' } }, ...stale };
    const message = overTheWire(deliveryOf('q', 'c', delivered, stored).message!);
    expect(deathsFromWire(message)).toEqual(DEATHS);
    expect(Object.keys(message.headers).sort()).toEqual(['tenant', ...Object.keys(xDeathHeaders(DEATHS))].sort());
    const plain = overTheWire(deliveryOf('q', 'c', { ...delivered, deaths: null }, stored).message!);
    expect(plain.deaths).toEqual([]);
    expect(plain.firstDeath).toBeNull();
    expect(Object.keys(plain.headers)).toEqual(['tenant']);
  });
});
