/**
 * Keyed compaction (spec 9), the node's part: the key an enqueue to a compacting queue
 * carries, read from the header (or routing key) the queue names, and the tombstone flag;
 * both written to the log and read back exactly, and old entries without them still read.
 */
import { quorumq } from '@quorumq/proto';
import { parseQueueArguments, type Command, type EnqueueCommand } from '@quorumq/queue';
import { describe, expect, it } from 'vitest';

import { headerKey, messageCompactionKey, withCompactionKey } from '../src/compaction-key.js';
import { decodeQueueCommand, encodeQueueCommand } from '../src/log-format.js';

import pb = quorumq.v1;

const ENQUEUE: EnqueueCommand = { type: 'enqueue', sizeBytes: 3, exchange: '', routingKeys: ['prices'] };
const KEYED = parseQueueArguments({ compactionKey: 'symbol' });

describe('the compaction key of a message', () => {
  it('reads scalar header values as strings; lists, maps, void and missing headers are no key', () => {
    expect(headerKey({ stringValue: 'ACME' })).toBe('ACME');
    expect(headerKey({ intValue: 7 })).toBe('7');
    expect(headerKey({ doubleValue: 1.5 })).toBe('1.5');
    expect(headerKey({ boolValue: false })).toBe('false');
    expect(headerKey({ timestampMs: 1_700_000_000_000 })).toBe('1700000000000');
    expect(headerKey({ bytesValue: new Uint8Array([0xca, 0xfe]) })).toBe('cafe');
    expect(headerKey({ listValue: { values: [{ stringValue: 'a' }] } })).toBeNull();
    expect(headerKey({ mapValue: { entries: {} } })).toBeNull();
    expect(headerKey({ voidValue: true })).toBeNull();
    expect(headerKey(undefined)).toBeNull();
  });

  it('uses the routing key for $routing_key', () => {
    expect(messageCompactionKey('$routing_key', { routingKey: 'eu.acme' })).toBe('eu.acme');
    expect(messageCompactionKey('symbol', { routingKey: 'eu.acme', headers: { symbol: { stringValue: 'ACME' } } })).toBe('ACME');
  });

  it('puts the key and tombstone flag on an enqueue to a compacting queue, from an object or the encoded bytes', () => {
    const message: pb.Message.$Properties = { body: new Uint8Array([1, 2, 3]), routingKey: 'prices', headers: { symbol: { stringValue: 'ACME' } } };
    expect(withCompactionKey(KEYED, ENQUEUE, message)).toEqual({ ...ENQUEUE, compactionKey: 'ACME' });
    const tombstone = pb.Message.encode({ ...message, tombstone: true }).finish();
    expect(withCompactionKey(KEYED, ENQUEUE, tombstone)).toEqual({ ...ENQUEUE, compactionKey: 'ACME', tombstone: true });
  });

  it('leaves alone: other queues, messages without the header, commands with a key, other commands, undecodable bytes', () => {
    const message: pb.Message.$Properties = { body: new Uint8Array([1]), headers: { symbol: { stringValue: 'ACME' } } };
    expect(withCompactionKey(parseQueueArguments({}), ENQUEUE, message)).toBe(ENQUEUE);
    expect(withCompactionKey(undefined, ENQUEUE, message)).toBe(ENQUEUE);
    expect(withCompactionKey(KEYED, ENQUEUE, { body: new Uint8Array([1]) })).toBe(ENQUEUE);
    const keyed: Command = { ...ENQUEUE, compactionKey: 'given' };
    expect(withCompactionKey(KEYED, keyed, message)).toBe(keyed);
    const ack: Command = { type: 'ack', consumerId: 'c', deliveryTag: 1 };
    expect(withCompactionKey(KEYED, ack, message)).toBe(ack);
    expect(withCompactionKey(KEYED, ENQUEUE, new Uint8Array([0xff, 0xff, 0xff]))).toBe(ENQUEUE);
  });
});

describe('the log format', () => {
  it('writes and reads back an enqueue key and tombstone exactly; an enqueue without them reads without them', () => {
    const keyed: Command = { ...ENQUEUE, compactionKey: 'ACME', tombstone: true };
    expect(decodeQueueCommand(encodeQueueCommand(keyed))).toStrictEqual(keyed);
    expect(decodeQueueCommand(encodeQueueCommand(ENQUEUE))).toStrictEqual(ENQUEUE);
  });
});
