/** Spec 5: the deaths a message carries in on enqueue are checked like any other field. */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { recordDeath, stateHash, validateDeaths, type Command, type Death, type Deaths } from '../src/machine/index.js';
import { Harness } from './machine-harness.js';

const good: Deaths = recordDeath(recordDeath(null, {
  queue: 'work', reason: 'rejected', exchange: 'ex', routingKeys: ['rk'], time: 10, originalExpirationMs: null,
}), { queue: 'retry', reason: 'expired', exchange: 'ex', routingKeys: ['rk'], time: 20, originalExpirationMs: 500 });

const record = good.records[0]!;

/** Builds a deaths value the type system would reject, as a corrupt log entry could hold. */
const untyped = (value: unknown): Deaths => value as Deaths;

const MALFORMED: ReadonlyArray<[string, unknown]> = [
  ['not an object', 'x-death'],
  ['an array', [record]],
  ['records missing', { first: good.first, last: good.last }],
  ['records empty', { ...good, records: [] }],
  ['records not an array', { ...good, records: record }],
  ['a record not an object', { ...good, records: [null] }],
  ['queue not a string', { ...good, records: [{ ...record, queue: 7 }] }],
  ['unknown reason', { ...good, records: [{ ...record, reason: 'bored' }] }],
  ['count 0', { ...good, records: [{ ...record, count: 0 }] }],
  ['count negative', { ...good, records: [{ ...record, count: -1 }] }],
  ['count fractional', { ...good, records: [{ ...record, count: 1.5 }] }],
  ['count a string', { ...good, records: [{ ...record, count: '1' }] }],
  ['exchange missing', { ...good, records: [{ ...record, exchange: undefined }] }],
  ['routing keys not strings', { ...good, records: [{ ...record, routingKeys: [1] }] }],
  ['firstTime missing', { ...good, records: [{ ...record, firstTime: undefined }] }],
  ['lastTime before firstTime', { ...good, records: [{ ...record, firstTime: 30, lastTime: 20 }] }],
  ['originalExpirationMs negative', { ...good, records: [{ ...record, originalExpirationMs: -5 }] }],
  ['originalExpirationMs missing', { ...good, records: [{ ...record, originalExpirationMs: undefined }] }],
  ['two records for one (queue, reason)', { ...good, records: [record, record] }],
  ['first missing', { records: good.records, last: good.last }],
  ['last missing', { records: good.records, first: good.first }],
  ['first with an unknown reason', { ...good, first: { ...good.first, reason: 'nope' } }],
  ['last without a queue', { ...good, last: { reason: 'expired', exchange: 'ex' } }],
];

describe('spec 5: malformed deaths on enqueue are INVALID_ARGUMENT and change nothing', () => {
  it.each(MALFORMED)('%s', (_what, deaths) => {
    const h = new Harness({ deadLetterExchange: 'dlx' });
    h.publish();
    const before = stateHash(h.state);
    const reply = h.run({ type: 'enqueue', sizeBytes: 1, exchange: 'ex', routingKeys: ['rk'], deaths: untyped(deaths) });
    expect(reply.type === 'error' && reply.code).toBe('INVALID_ARGUMENT');
    expect(reply.type === 'error' && reply.message).toMatch(/^deaths/);
    expect(h.effects).toEqual([]);
    expect(stateHash(h.state)).toBe(before);
    expect(validateDeaths(deaths)).not.toBeNull();
  });

  it('well-formed deaths, null and none are accepted and kept', () => {
    const h = new Harness();
    const id = h.publish({ deaths: good });
    expect(h.reply.type).toBe('enqueued');
    expect(h.state.messages.get(id)?.deaths).toEqual(good);
    const command: Command = { type: 'enqueue', sizeBytes: 1, exchange: 'ex', routingKeys: [], deaths: untyped(null) };
    expect(h.run(command).type).toBe('enqueued');
    expect(validateDeaths(undefined)).toBeNull();
  });

  it('anything recordDeath folds validates (property)', () => {
    const deathArb: fc.Arbitrary<Death> = fc.record({
      queue: fc.constantFrom('a', 'b', 'c'),
      reason: fc.constantFrom('rejected', 'expired', 'maxlen', 'delivery_limit'),
      exchange: fc.string(),
      routingKeys: fc.array(fc.string(), { maxLength: 3 }),
      time: fc.nat(),
      originalExpirationMs: fc.option(fc.nat(), { nil: null }),
    });
    fc.assert(
      fc.property(fc.array(deathArb, { minLength: 1, maxLength: 12 }), (deaths) => {
        // Time goes forward per queue, as on a real machine's clock.
        let folded: Deaths | null = null;
        let clock = 0;
        for (const death of deaths) {
          clock += death.time;
          folded = recordDeath(folded, { ...death, time: clock });
        }
        expect(validateDeaths(folded)).toBeNull();
      }),
      { numRuns: 200 },
    );
  });
});
