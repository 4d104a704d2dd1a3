/**
 * Spec 5 in the SDK: a received message's death records (Dates) go back out unchanged when the
 * application republishes it, through the mapping shared with the node (@quorumq/proto/deaths).
 */
import { quorumq } from '@quorumq/proto';
import { describe, expect, it } from 'vitest';
import { decodeMessage, encodeMessage, type DeathRecord } from '../src/messages.js';

import pb = quorumq.v1;

const overTheWire = (message: pb.Message.$Properties): pb.Message => pb.Message.decode(pb.Message.encode(message).finish());

const RECORDS: DeathRecord[] = [
  { queue: 'work', reason: 'rejected', count: 2, exchange: 'ex', routingKeys: ['job'], firstTime: new Date(1_000), lastTime: new Date(70_000) },
  { queue: 'retry', reason: 'expired', count: 1, exchange: 'ex', routingKeys: ['job'], firstTime: new Date(62_500), lastTime: new Date(62_500), originalExpirationMs: 60_000 },
];

describe('death records in the SDK', () => {
  it('a received message republished with its deaths carries the same records and summaries', () => {
    const firstDeath = { reason: 'expired', queue: 'retry', exchange: 'ex' };
    const lastDeath = { reason: 'rejected', queue: 'work', exchange: 'ex' };
    const wire = overTheWire(encodeMessage('rk', 'body', { deaths: RECORDS, firstDeath, lastDeath }));
    expect(wire.deaths.map((d) => [d.queue, d.count, d.firstTimeMs, d.lastTimeMs, d.originalExpirationMs ?? null])).toEqual([
      ['work', 2, 1_000, 70_000, null],
      ['retry', 1, 62_500, 62_500, 60_000],
    ]);
    const received = decodeMessage(wire);
    expect(received.deaths).toEqual(RECORDS);
    expect(received.firstDeath).toEqual(firstDeath);
    expect(received.lastDeath).toEqual(lastDeath);
    // And once more: what the application received goes out the same.
    const again = decodeMessage(overTheWire(encodeMessage('rk', 'body', { deaths: received.deaths, firstDeath: received.firstDeath!, lastDeath: received.lastDeath! })));
    expect(again).toEqual(received);
  });

  it('without deaths nothing is sent, and nothing is received', () => {
    const wire = overTheWire(encodeMessage('rk', 'body', { deaths: [] }));
    expect(wire.deaths).toEqual([]);
    expect(wire.firstDeath).toBeNull();
    const received = decodeMessage(wire);
    expect(received.deaths).toEqual([]);
    expect(received.firstDeath).toBeUndefined();
    expect(received.lastDeath).toBeUndefined();
  });

  it('a message decoded by a protobufjs with Long support gives numbers; missing summaries come from the records', () => {
    const long = (value: number) => ({ low: value, high: 0, unsigned: true }) as unknown as number;
    const received = decodeMessage({
      deaths: [{ queue: 'work', reason: 'rejected', count: long(3), exchange: 'ex', routingKeys: ['job'], firstTimeMs: long(1_000), lastTimeMs: long(2_000) }],
    });
    expect(received.deaths).toEqual([{ queue: 'work', reason: 'rejected', count: 3, exchange: 'ex', routingKeys: ['job'], firstTime: new Date(1_000), lastTime: new Date(2_000) }]);
    expect(received.firstDeath).toEqual({ reason: 'rejected', queue: 'work', exchange: 'ex' });
    expect(received.lastDeath).toEqual({ reason: 'rejected', queue: 'work', exchange: 'ex' });
  });
});
