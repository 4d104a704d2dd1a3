/**
 * Issue 12 item 4: a committed entry never makes apply throw. Each machine fed entries it
 * cannot apply (not decodable, unknown types, missing or mistyped fields, values out of
 * range) answers with an error reply and its state stays exactly as it was.
 */
import { quorumq } from '@quorumq/proto';
import { DEFAULT_ARGUMENTS, stateHash, type Command } from '@quorumq/queue';
import type { Entry } from '@quorumq/raft';
import { afterAll, describe, expect, it } from 'vitest';

import { encodeJson } from '../src/json-codec.js';
import { MetaMachine, type MetaReply } from '../src/meta-machine.js';
import { ENTRY_SPAN, QueueReplica, forwardedEntryProblem, streamDeliveryOf } from '../src/queue-replica.js';
import { ENTRY_CLOCK_BYTES, encodeQueueBatch, encodeQueueEntry, type EntryCommand } from '../src/log-format.js';
import { TestStores } from './test-message-store.js';

import pb = quorumq.v1;

const stores = new TestStores();
const store = await stores.open();
afterAll(() => stores.closeAll());

const entry = (index: number, data: Uint8Array): Entry => ({ index, term: 1, type: 'normal', data });
const text = (value: string): Uint8Array => Buffer.from(value, 'utf8');
const json = (value: unknown): Uint8Array => text(JSON.stringify(value));

const declare = (name: string, members: unknown = ['n1']): Uint8Array =>
  encodeJson({ type: 'declareQueue', name, args: {}, passive: false, members, createdAt: 1000 });

/** Metadata entries no version of the broker could apply. */
const BAD_META: ReadonlyArray<[string, Uint8Array]> = [
  ['empty bytes', new Uint8Array(0)],
  ['not JSON', text('{"type": "declareQueue",')],
  ['binary', Uint8Array.from([0xff, 0x00, 0x13, 0x37])],
  ['null', json(null)],
  ['a number', json(42)],
  ['an array', json([{ type: 'barrier' }])],
  ['no type', json({ name: 'q' })],
  ['an unknown type', json({ type: 'wipeEverything', name: 'q' })],
  ['a numeric type', json({ type: 7 })],
  ['a broken bigint tag', text('{"type":"barrier","x":{"$bigint":"not a number"}}')],
  ['a broken map tag', text('{"type":"topology","command":{"type":"bind","arguments":{"$map":[1,2]}}}')],
  ['a type holding a bigint', text('{"type":{"x":{"$bigint":"1"}}}')],
  ['declareQueue with args holding a bigint', text('{"type":"declareQueue","name":"q","args":[{"$bigint":"1"}],"passive":false,"members":["n1"]}')],
  ['declareQueue with a bigint member', text('{"type":"declareQueue","name":"q","args":{},"passive":false,"members":[{"$bigint":"1"}]}')],
  ['topology with a bigint command', text('{"type":"topology","command":{"$bigint":"7"}}')],
  ['topology with a bigint command type', text('{"type":"topology","command":{"type":{"$bigint":"7"}}}')],
  ['topology with a bigint exchange type', text('{"type":"topology","command":{"type":"declareExchange","name":"x","exchangeType":{"$bigint":"7"}}}')],
  [
    'topology binding to a bigint destination kind',
    text('{"type":"topology","command":{"type":"bind","source":"amq.direct","destination":{"kind":{"$bigint":"1"},"name":"kept"},"bindingKey":"k"}}'),
  ],
  [
    'topology binding with a header argument of a bigint type',
    text('{"type":"topology","command":{"type":"bind","source":"amq.headers","destination":{"kind":"queue","name":"kept"},"bindingKey":"","arguments":{"$map":[["h",{"type":{"$bigint":"1"},"value":1}]]}}}'),
  ],
  ['topology without a command', json({ type: 'topology' })],
  ['topology with a null command', json({ type: 'topology', command: null })],
  ['topology with a string command', json({ type: 'topology', command: 'declareExchange' })],
  ['topology with an unknown command', json({ type: 'topology', command: { type: 'dropAll' } })],
  ['topology declaring a queue', json({ type: 'topology', command: { type: 'declareQueue', name: 'q' } })],
  ['declareQueue without fields', json({ type: 'declareQueue' })],
  ['declareQueue with a numeric name', json({ type: 'declareQueue', name: 5, args: {}, passive: false, members: ['n1'] })],
  ['declareQueue with null args', json({ type: 'declareQueue', name: 'q', args: null, passive: false, members: ['n1'] })],
  ['declareQueue with string args', json({ type: 'declareQueue', name: 'q', args: 'x', passive: false, members: ['n1'] })],
  ['declareQueue with map args', text('{"type":"declareQueue","name":"q","args":{"$map":[["maxLength",1]]},"passive":false,"members":["n1"]}')],
  ['declareQueue with bad args', json({ type: 'declareQueue', name: 'q', args: { maxLength: -1 }, passive: false, members: ['n1'] })],
  ['declareQueue without passive', json({ type: 'declareQueue', name: 'q', args: {}, members: ['n1'] })],
  ['declareQueue with members as a string', declare('q', 'n1,n2')],
  ['declareQueue with numeric members', declare('q', [1, 2])],
  ['declareQueue with a member twice', declare('q', ['n1', 'n1'])],
  ['declareQueue with an invalid member id', declare('q', ['n1', 'n 2'])],
  ['declareQueue with too many members', declare('q', Array.from({ length: 65 }, (_, i) => `n${i}`))],
  ['declareQueue without members', declare('q', [])],
  ['declareQueue with a string createdAt', json({ type: 'declareQueue', name: 'q', args: {}, passive: false, members: ['n1'], createdAt: 'now' })],
  ['declareQueue with a negative createdAt', json({ type: 'declareQueue', name: 'q', args: {}, passive: false, members: ['n1'], createdAt: -5 })],
  ['declareQueue with a reserved name', declare('amq.q')],
  ['deleteQueue without a name', json({ type: 'deleteQueue', reason: 'delete' })],
  ['deleteQueue without a reason', json({ type: 'deleteQueue', name: 'kept' })],
  ['a batch without commands', json({ type: 'batch' })],
  ['an empty batch', json({ type: 'batch', commands: [] })],
  ['a batch of too many commands', json({ type: 'batch', commands: Array.from({ length: 1025 }, () => ({ type: 'barrier' })) })],
  ['a batch whose commands are an object', json({ type: 'batch', commands: { type: 'barrier' } })],
  ['deleteQueue with a string createdIndex', json({ type: 'deleteQueue', name: 'kept', reason: 'x', createdIndex: 'one' })],
];

describe('the metadata machine applying entries it cannot apply', () => {
  it('answers each with INVALID_ARGUMENT and changes nothing', () => {
    const machine = new MetaMachine(() => {});
    expect((machine.apply(entry(1, declare('kept', ['n1', 'n2']))) as MetaReply).ok).toBe(true);
    // The state, without the applied index (which every entry advances, applied or refused).
    const stateOf = (m: MetaMachine): string => {
      const snapshot = JSON.parse(Buffer.from(m.snapshot()).toString('utf8')) as Record<string, unknown>;
      delete snapshot.appliedIndex;
      return JSON.stringify(snapshot);
    };
    const before = stateOf(machine);
    let index = 2;
    for (const [what, data] of BAD_META) {
      let reply: MetaReply | undefined;
      expect(() => (reply = machine.apply(entry(index, data))), what).not.toThrow();
      expect(reply, what).toMatchObject({ ok: false, code: 'INVALID_ARGUMENT', index });
      expect(stateOf(machine), what).toBe(before);
      expect(machine.appliedIndex).toBe(index);
      index += 1;
    }
    expect([...machine.queues.keys()]).toEqual(['kept']);
    // And the machine still applies good commands afterwards.
    expect(machine.apply(entry(index, declare('next')))).toMatchObject({ ok: true, changed: true });
  });

  it('gives every replica the same replies and state for the same log', () => {
    const log = [declare('kept'), ...BAD_META.map(([, data]) => data), declare('next')].map((data, i) => entry(i + 1, data));
    const a = new MetaMachine(() => {});
    const b = new MetaMachine(() => {});
    const repliesA = log.map((e) => a.apply(e));
    const repliesB = log.map((e) => b.apply({ ...e, data: Buffer.from(e.data) }));
    expect(repliesB).toEqual(repliesA);
    expect(Buffer.from(b.snapshot())).toEqual(Buffer.from(a.snapshot()));
  });
});

const enqueue = (n: number): EntryCommand => ({
  command: { type: 'enqueue', sizeBytes: 3, exchange: '', routingKeys: ['q'] },
  message: Buffer.from(pb.Message.encode({ body: Buffer.from(`m-${n}`), routingKey: 'q' }).finish()),
});

/** The clock prefix then `body` as the QueueEntry. */
function rawEntry(body: Uint8Array, now = 1000): Uint8Array {
  const out = Buffer.alloc(ENTRY_CLOCK_BYTES + body.byteLength);
  out.writeDoubleLE(now, 0);
  out.set(body, ENTRY_CLOCK_BYTES);
  return out;
}

/** QueueEntry.command (field 2) holding `command` as text, as a peer could send it. */
function commandField(command: string): Uint8Array {
  const bytes = Buffer.from(command, 'utf8');
  return Buffer.concat([Buffer.from([0x12, bytes.byteLength]), bytes]);
}

function withClock(data: Uint8Array, now: number): Uint8Array {
  const copy = Buffer.from(data);
  copy.writeDoubleLE(now, 0);
  return copy;
}

/** A QUEUE_ENTRY_FORMAT_COMMAND entry holding `queueCommand` (encoded QueueCommand bytes) as its command. */
function commandEntry(queueCommand: Uint8Array, format = pb.QueueEntryFormat.QUEUE_ENTRY_FORMAT_COMMAND): Uint8Array {
  return rawEntry(Buffer.concat([pb.QueueEntry.encode({ format }).finish(), Buffer.from([0x32, queueCommand.byteLength]), queueCommand]));
}

/** QueueCommand { ack { consumer_id: "c", delivery_tag: 2^63 - 1 } }: a tag no safe integer holds. */
const HUGE_ACK = Uint8Array.from([0x32, 0x0e, 0x0a, 0x01, 0x63, 0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f]);

/** A message field whose length runs past the end: these bytes do not decode as a Message. */
const UNDECODABLE_MESSAGE = Uint8Array.from([0x0a, 0x7f, 0x01]);

/** Queue entries the replica cannot apply. */
const BAD_QUEUE: ReadonlyArray<[string, Uint8Array]> = [
  ['empty bytes', new Uint8Array(0)],
  ['shorter than the clock', Uint8Array.from([1, 2, 3])],
  ['only a clock', rawEntry(new Uint8Array(0))],
  ['a field past the end', rawEntry(Uint8Array.from([0x12, 0x40, 0x7b]))],
  ['not protobuf', rawEntry(Uint8Array.from([0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]))],
  ['JSON that does not parse', rawEntry(commandField('{"type":'))],
  ['a null command', rawEntry(commandField('null'))],
  ['an array command', rawEntry(commandField('[]'))],
  ['an unknown command type', rawEntry(commandField('{"type":"wipe"}'))],
  ['an enqueue without fields', rawEntry(commandField('{"type":"enqueue"}'))],
  ['an enqueue of negative size', rawEntry(commandField('{"type":"enqueue","sizeBytes":-1,"exchange":"","routingKeys":[]}'))],
  ['an ack of a huge tag', rawEntry(commandField('{"type":"ack","consumerId":"c","deliveryTag":1e300}'))],
  ['a nested batch', rawEntry(Buffer.concat([Buffer.from([0x22, 0x04, 0x22, 0x02]), commandField('{}').subarray(0, 2)]))],
  ['a batch with another field', rawEntry(Buffer.concat([Buffer.from([0x22, 0x00]), commandField('{"type":"tick"}')]))],
  ['an oversized batch', encodeQueueBatch(Array.from({ length: ENTRY_SPAN + 1 }, () => ({ command: { type: 'tick' } as Command, message: null })), 1000)],
  ['a clock that is not a number', withClock(encodeQueueEntry(enqueue(9).command, enqueue(9).message, 0), Number.NaN)],
  ['an infinite clock', withClock(encodeQueueEntry(enqueue(9).command, enqueue(9).message, 0), Number.POSITIVE_INFINITY)],
  ['a negative clock', withClock(encodeQueueEntry(enqueue(9).command, enqueue(9).message, 0), -1)],
  ['a clock far in the future', withClock(encodeQueueEntry(enqueue(9).command, enqueue(9).message, 0), 1e300)],
  // Today's format (QueueCommand messages).
  ['a format this node does not know', commandEntry(pb.QueueCommand.encode({ tick: {} }).finish(), 9 as pb.QueueEntryFormat)],
  ['a JSON command in an entry of the QueueCommand format', rawEntry(Buffer.concat([pb.QueueEntry.encode({ format: pb.QueueEntryFormat.QUEUE_ENTRY_FORMAT_COMMAND }).finish(), commandField('{"type":"tick"}')]))],
  ['a QueueCommand that does not decode', commandEntry(Uint8Array.from([0x0a, 0x09, 0x08]))],
  ['a QueueCommand of a type this node does not know', commandEntry(Uint8Array.from([0xf2, 0x01, 0x00]))],
  ['a QueueCommand with invalid UTF-8', commandEntry(Uint8Array.from([0x22, 0x03, 0x0a, 0x01, 0xff]))],
  ['a QueueCommand enqueue of negative size', encodeQueueEntry({ type: 'enqueue', sizeBytes: -1, exchange: '', routingKeys: [] }, null, 1000)],
  ['a QueueCommand ack of a huge tag', commandEntry(HUGE_ACK)],
  [
    'a batch of QueueCommands holding one of an unknown type',
    rawEntry(Buffer.concat([pb.QueueEntry.encode({ format: pb.QueueEntryFormat.QUEUE_ENTRY_FORMAT_COMMAND }).finish(), Uint8Array.from([0x22, 0x05, 0x32, 0x03, 0xf2, 0x01, 0x00])])),
  ],
  [
    'a batch of QueueCommands holding a bad one',
    rawEntry(pb.QueueEntry.encode({ format: pb.QueueEntryFormat.QUEUE_ENTRY_FORMAT_COMMAND, batch: [{ queueCommand: { moveCancel: { moveId: '' } } }] }).finish()),
  ],
];

describe('a queue replica applying entries it cannot apply', () => {
  it('answers each with an error reply and changes nothing', () => {
    const replica = new QueueReplica('q', 'q/1/q', DEFAULT_ARGUMENTS, { onEffects: () => {} }, store);
    replica.apply(entry(1, encodeQueueBatch([enqueue(1), enqueue(2)], 500)), true);
    const before = stateHash(replica.state);
    const bodies = [...replica.bodies.keys()];
    let index = 2;
    for (const [what, data] of BAD_QUEUE) {
      let result: ReturnType<QueueReplica['apply']> | undefined;
      expect(() => (result = replica.apply(entry(index, data), true)), what).not.toThrow();
      const replies = result?.batch === undefined ? [result?.reply] : result.batch.map((r) => r.reply);
      expect(replies.every((reply) => reply?.type === 'error'), what).toBe(true);
      expect(stateHash(replica.state), what).toBe(before);
      expect([...replica.bodies.keys()], what).toEqual(bodies);
      index += 1;
    }
    expect(replica.apply(entry(index, encodeQueueEntry(enqueue(3).command, enqueue(3).message, 2000)), true).reply).toEqual({
      type: 'enqueued',
      messageId: index * ENTRY_SPAN,
    });
  });

  it('streams a dead-lettered message whose bytes do not decode as an empty one', () => {
    const deaths = {
      records: [{ queue: 'src', reason: 'rejected', count: 1, exchange: '', routingKeys: ['src'], firstTime: 1, lastTime: 1, originalExpirationMs: null }],
      first: { reason: 'rejected', queue: 'src', exchange: '' },
      last: { reason: 'rejected', queue: 'src', exchange: '' },
    } as const;
    const delivered = { messageId: 1, deliveryTag: 1, deliveryCount: 1, redelivered: false, sizeBytes: 3, exchange: '', routingKeys: ['q'], deaths };
    let delivery: ReturnType<typeof streamDeliveryOf> | undefined;
    expect(() => (delivery = streamDeliveryOf('q', 'c', delivered, UNDECODABLE_MESSAGE))).not.toThrow();
    expect(delivery).toMatchObject({ queue: 'q', message: { body: new Uint8Array(0) } });
  });

  it('hands out a stored message whose bytes do not decode as an empty one instead of failing the apply', () => {
    const replica = new QueueReplica('q', 'q/1/q', DEFAULT_ARGUMENTS, { onEffects: () => {} }, store);
    const command: Command = { type: 'enqueue', sizeBytes: 3, exchange: '', routingKeys: ['q'] };
    expect(replica.apply(entry(1, encodeQueueEntry(command, UNDECODABLE_MESSAGE, 100)), true).reply.type).toBe('enqueued');
    let result: ReturnType<QueueReplica['apply']> | undefined;
    expect(() => (result = replica.apply(entry(2, encodeQueueEntry({ type: 'get', ackMode: 'auto' }, null, 200)), true))).not.toThrow();
    expect(result?.reply.type).toBe('message');
    expect(result?.stored).toBeUndefined();
  });

  it('forwardedEntryProblem refuses entries apply cannot decode, unknown commands, and messages that do not decode', () => {
    // A command's own fields are the machine's to refuse, one command at a time.
    const fieldsOnly = new Set([
      'an enqueue without fields',
      'an enqueue of negative size',
      'an ack of a huge tag',
      'a QueueCommand enqueue of negative size',
      'a QueueCommand ack of a huge tag',
      'a batch of QueueCommands holding a bad one',
    ]);
    for (const [what, data] of BAD_QUEUE.filter(([what]) => !fieldsOnly.has(what))) {
      expect(forwardedEntryProblem(data), what).not.toBeNull();
    }
    const undecodable = encodeQueueEntry({ type: 'enqueue', sizeBytes: 3, exchange: '', routingKeys: ['q'] }, UNDECODABLE_MESSAGE, 1);
    expect(forwardedEntryProblem(undecodable)).toMatch(/does not decode/);
    expect(forwardedEntryProblem(encodeQueueBatch([enqueue(1), { command: { type: 'tick' }, message: null }], 5))).toBeNull();
    // One client's bad publish in a batch does not fail the other commands: the machine answers it.
    const badPriority: EntryCommand = { command: { type: 'enqueue', sizeBytes: 3, exchange: '', routingKeys: ['q'], priority: 1000 }, message: enqueue(2).message };
    const batch = encodeQueueBatch([enqueue(1), badPriority, enqueue(3)], 5);
    expect(forwardedEntryProblem(batch)).toBeNull();
    const replica = new QueueReplica('q', 'q/1/q', DEFAULT_ARGUMENTS, { onEffects: () => {} }, store);
    expect(replica.apply(entry(1, batch), true).batch?.map((r) => r.reply.type)).toEqual(['enqueued', 'error', 'enqueued']);
  });
});
