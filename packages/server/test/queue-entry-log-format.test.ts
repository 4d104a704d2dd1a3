/**
 * The log format (log-format.ts): queue commands as QueueCommand messages, entries of one
 * command or a batch in QUEUE_ENTRY_FORMAT_COMMAND, entries of the format before
 * (QUEUE_ENTRY_FORMAT_JSON) still read, and snapshots.
 */
import { descriptorSetPath, quorumq } from '@quorumq/proto';
import { descriptorTags } from '@quorumq/proto/tag-check';
import { commandTypeProblem, recordDeath, type Command } from '@quorumq/queue';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';

import { BrokerError, Status } from '../src/errors.js';
import {
  ENTRY_CLOCK_BYTES,
  decodeQueueCommand,
  decodeQueueEntry,
  decodeQueueSnapshot,
  encodeQueueBatch,
  encodeQueueCommand,
  encodeQueueEntry,
  encodeQueueSnapshot,
  encodeQueueSnapshotRefs,
  stampEntry,
  type SnapshotRefs,
  type DecodedCommand,
  type EntryCommand,
} from '../src/log-format.js';

import pb = quorumq.v1;

const FORMAT_COMMAND = pb.QueueEntryFormat.QUEUE_ENTRY_FORMAT_COMMAND;

const message: pb.Message.$Properties = {
  body: Buffer.from('hello, queue'),
  routingKey: 'orders.eu',
  properties: { contentType: 'text/plain', priority: 3, expirationMs: 60_000 },
  headers: { tenant: { stringValue: 'acme' }, attempt: { intValue: 2 } },
};
const encodedMessage = Buffer.from(pb.Message.encode(message).finish());
const enqueue: Command = { type: 'enqueue', sizeBytes: 12, exchange: 'orders', routingKeys: ['orders.eu'], priority: 3 };

const deaths = {
  records: [
    { queue: 'src', reason: 'rejected', count: 2, exchange: 'ex', routingKeys: ['src', 'ключ'], firstTime: 1_700_000_000_000, lastTime: 1_700_000_000_500, originalExpirationMs: 9000 },
    { queue: 'other', reason: 'expired', count: 1, exchange: '', routingKeys: [], firstTime: 5, lastTime: 5, originalExpirationMs: null },
  ],
  first: { reason: 'rejected', queue: 'src', exchange: 'ex' },
  last: { reason: 'expired', queue: 'other', exchange: '' },
} as const;

/** Every command type, with every optional field set, and without them. */
const COMMANDS: readonly Command[] = [
  { type: 'enqueue', sizeBytes: 0, exchange: '', routingKeys: [] },
  {
    type: 'enqueue',
    sizeBytes: 2 ** 53 - 1,
    exchange: 'обмен',
    routingKeys: ['a', '', 'ü'],
    priority: 0,
    expirationMs: 60_000,
    delayMs: 0,
    notBefore: -5,
    producerId: '',
    sequence: 1_700_000_000_000_000,
    deaths,
  },
  { type: 'subscribe', consumerId: 'n1/c', prefetch: 0 },
  { type: 'subscribe', consumerId: '', prefetch: 10, priority: -3, sessionId: 's' },
  { type: 'credit', consumerId: 'n1/c', prefetch: 7 },
  { type: 'cancel', consumerId: 'n1/c' },
  { type: 'consumerDown', consumerId: 'n1/c' },
  { type: 'ack', consumerId: 'n1/c', deliveryTag: 0 },
  { type: 'ack', consumerId: 'n1/c', deliveryTag: 2 ** 40, multiple: false },
  { type: 'return', consumerId: 'n1/c', deliveryTag: 3 },
  { type: 'return', consumerId: 'n1/c', deliveryTag: 3, multiple: true, delayMs: 250 },
  { type: 'discard', consumerId: 'n1/c', deliveryTag: 4, multiple: true },
  { type: 'get', ackMode: 'auto' },
  { type: 'get', ackMode: 'manual', consumerId: 'n1/g', sessionId: 's' },
  { type: 'purge' },
  { type: 'purge', sessionId: 's' },
  { type: 'tick' },
  { type: 'deadLetterConfirmed', messageIds: [] },
  { type: 'deadLetterConfirmed', messageIds: [0, 4096, 2 ** 50] },
  { type: 'declare' },
  { type: 'declare', sessionId: 's' },
  { type: 'delete' },
  { type: 'delete', ifUnused: false, ifEmpty: true, sessionId: 's' },
  { type: 'sessionEnded' },
  { type: 'sessionEnded', sessionId: 's' },
  { type: 'moveStart', moveId: 'n1/m', exchange: '' },
  { type: 'moveStart', moveId: 'n1/m', exchange: 'x', routingKey: '', limit: 0, window: 8 },
  { type: 'moveConfirmed', moveId: 'n1/m', messageIds: [1, 2] },
  { type: 'moveFailed', moveId: 'n1/m', messageIds: [] },
  { type: 'moveCancel', moveId: 'n1/m' },
];

describe('queue commands as QueueCommand messages', () => {
  it('read back exactly as written, for every command type, with and without optional fields', () => {
    for (const command of COMMANDS) expect(decodeQueueCommand(encodeQueueCommand(command)), command.type).toStrictEqual(command);
  });

  it("read back as the whole QueueCommand's generated toObject gives its case, key for key and in order", () => {
    for (const command of COMMANDS) {
      const bytes = encodeQueueCommand(command);
      const message = pb.QueueCommand.decode(bytes);
      const reference = (pb.QueueCommand.toObject(message, { defaults: true }) as Record<string, Record<string, unknown>>)[message.command!]!;
      reference['type'] = message.command;
      const decoded = decodeQueueCommand(bytes) as unknown as Record<string, unknown>;
      expect(Object.keys(decoded), command.type).toEqual(Object.keys(reference));
      // Death records are rebuilt in the machine's field order (the next test).
      if ('deaths' in reference) {
        expect(decoded['deaths'], command.type).toStrictEqual((command as { deaths?: unknown }).deaths);
        delete reference['deaths'];
        delete decoded['deaths'];
      }
      expect(decoded, command.type).toStrictEqual(reference);
    }
  });

  it('cover every type the machine knows, and QueueCommand has no other', () => {
    const tags = descriptorTags(readFileSync(descriptorSetPath));
    const cases = [...tags.keys()].filter((name) => /^QueueCommand\.[a-z][A-Za-z]*$/.test(name)).map((name) => name.slice('QueueCommand.'.length));
    expect(new Set(cases)).toEqual(new Set(COMMANDS.map((c) => c.type)));
    for (const type of cases) expect(commandTypeProblem({ type }), type).toBeNull();
  });

  it('death records read back as the machine builds them, fields in its order (its snapshots hold them as JSON)', () => {
    const once = recordDeath(null, { queue: 'a', reason: 'expired', exchange: '', routingKeys: ['a'], time: 10, originalExpirationMs: 500 });
    const deaths = recordDeath(once, { queue: 'b', reason: 'rejected', exchange: 'x', routingKeys: [], time: 20, originalExpirationMs: null });
    const decoded = decodeQueueCommand(encodeQueueCommand({ type: 'enqueue', sizeBytes: 1, exchange: '', routingKeys: ['q'], deaths }));
    expect(decoded.type === 'enqueue' && JSON.stringify(decoded.deaths)).toBe(JSON.stringify(deaths));
  });

  it('a null routing key of a move is written as none (the machine reads both as null)', () => {
    expect(decodeQueueCommand(encodeQueueCommand({ type: 'moveStart', moveId: 'm', exchange: '', routingKey: null }))).toStrictEqual({
      type: 'moveStart',
      moveId: 'm',
      exchange: '',
    });
  });

  it('refuse commands that would not read back as themselves', () => {
    const refused = (command: unknown): string => {
      try {
        encodeQueueCommand(command as Command);
      } catch (error) {
        expect(error).toBeInstanceOf(BrokerError);
        expect((error as BrokerError).code).toBe(Status.INVALID_ARGUMENT);
        return (error as BrokerError).message;
      }
      throw new Error(`${JSON.stringify(command)} was written`);
    };
    expect(refused({ type: 'wipe' })).toMatch(/command type must be one of/);
    expect(refused({ type: 'ack', consumerId: 'c', deliveryTag: 1.5 })).toMatch(/command.deliveryTag is 1.5, not a safe integer/);
    expect(refused({ type: 'ack', consumerId: 'c', deliveryTag: 2 ** 53 })).toMatch(/not a safe integer/);
    expect(refused({ type: 'credit', consumerId: 'c', prefetch: Number.NaN })).toMatch(/not a safe integer/);
    expect(refused({ type: 'deadLetterConfirmed', messageIds: [1, -(2 ** 60)] })).toMatch(/command.messageIds\[1\]/);
    expect(refused({ type: 'enqueue', sizeBytes: 1, exchange: '', routingKeys: [], deaths: { ...deaths, records: [{ ...deaths.records[0], count: 0.5 }] } })).toMatch(
      /command.deaths.records\[0\].count/,
    );
    expect(refused({ type: 'cancel', consumerId: 'n1/\uD800' })).toMatch(/lone surrogate/);
  });

  it('one of a type this node does not know (a newer writer) reads as a command the machine refuses', () => {
    // Field 30 of QueueCommand, an empty message.
    const command = decodeQueueCommand(Uint8Array.from([0xf2, 0x01, 0x00]));
    expect(commandTypeProblem(command)).not.toBeNull();
    expect(() => decodeQueueCommand(Uint8Array.from([0x0a, 0x05, 0x08]))).toThrow();
  });
});

/** The clock prefix, then `entry` as the generated code writes it. */
function generatedEntry(now: number, entry: pb.QueueEntry.$Properties): Buffer {
  const clock = Buffer.alloc(ENTRY_CLOCK_BYTES);
  clock.writeDoubleLE(now, 0);
  return Buffer.concat([clock, pb.QueueEntry.encode(entry).finish()]);
}

const queueCommand = (command: Command): pb.QueueCommand.$Properties => ({ [command.type]: command }) as pb.QueueCommand.$Properties;

/** The only command of a plain entry. */
function single(data: Uint8Array): DecodedCommand & { now: number } {
  const decoded = decodeQueueEntry(data);
  expect(decoded.batch).toBe(false);
  expect(decoded.commands).toHaveLength(1);
  return { ...decoded.commands[0]!, now: decoded.now };
}

describe('queue entries', () => {
  it('carry an encoded message byte for byte, and decode to the same command and clock', () => {
    const data = encodeQueueEntry(enqueue, encodedMessage, 1_700_000_000_123);
    for (const copy of [data, Buffer.from(data)]) {
      const decoded = single(copy);
      expect(decoded.now).toBe(1_700_000_000_123);
      expect(decoded.command).toStrictEqual(enqueue);
      expect(Buffer.from(decoded.message ?? [])).toEqual(encodedMessage);
    }
  });

  it('are what the generated QueueEntry code writes, both ways, with their format', () => {
    const ours = encodeQueueEntry(enqueue, message, 42);
    expect(Buffer.from(ours)).toEqual(generatedEntry(42, { message: encodedMessage, format: FORMAT_COMMAND, queueCommand: queueCommand(enqueue) }));
    const theirs = pb.QueueEntry.decode(ours.subarray(ENTRY_CLOCK_BYTES));
    expect(theirs.format).toBe(FORMAT_COMMAND);
    expect(theirs.command).toBe('');
    expect(pb.Message.decode(theirs.message ?? new Uint8Array(0)).headers?.['tenant']?.stringValue).toBe('acme');
    expect(theirs.queueCommand?.command).toBe('enqueue');
    // Fields in another order (as another writer may put them) read the same.
    const reordered = Buffer.concat([
      Buffer.alloc(ENTRY_CLOCK_BYTES),
      pb.QueueEntry.encode({ format: FORMAT_COMMAND }).finish(),
      pb.QueueEntry.encode({ queueCommand: queueCommand(enqueue) }).finish(),
      pb.QueueEntry.encode({ message: encodedMessage }).finish(),
    ]);
    expect(single(reordered).command).toStrictEqual(enqueue);
    expect(Buffer.from(single(reordered).message ?? [])).toEqual(encodedMessage);
  });

  it('are byte for byte what the generated QueueEntry code writes, for every command type, with and without a message and a key', () => {
    for (const command of COMMANDS) {
      for (const [m, bytes] of [[null, undefined], [encodedMessage, encodedMessage], [message, encodedMessage], [new Uint8Array(0), new Uint8Array(0)]] as const) {
        for (const key of [undefined, '', 'n1/ключ']) {
          const ours = encodeQueueEntry(command, m, 7, key);
          const fields: pb.QueueEntry.$Properties = { format: FORMAT_COMMAND, queueCommand: queueCommand(command) };
          if (bytes !== undefined) fields.message = bytes;
          if (key !== undefined) fields.messageKey = key;
          expect(Buffer.from(ours), `${command.type}, message ${m === null ? 'none' : m.constructor.name}, key ${key}`).toEqual(generatedEntry(7, fields));
          const decoded = single(Buffer.from(ours));
          expect(decoded.command, command.type).toStrictEqual(command);
          expect(decoded.key, command.type).toBe(key === undefined || key === '' ? null : key);
        }
      }
    }
  });

  it('without a message, with a multi-byte length and non-ASCII fields', () => {
    const settle: Command = { type: 'ack', consumerId: `n1/ü-${'c'.repeat(200)}`, deliveryTag: 2 ** 40, multiple: true };
    const decoded = single(Buffer.from(encodeQueueEntry(settle, null, 5)));
    expect(decoded.command).toStrictEqual(settle);
    expect(decoded.message).toBeNull();
    // A message that encodes to no bytes is still a message (the field is written, empty).
    expect(single(Buffer.from(encodeQueueEntry(enqueue, new Uint8Array(0), 1))).message).toEqual(Buffer.alloc(0));
    const big = Buffer.alloc(300_000, 7);
    const withBig = single(Buffer.from(encodeQueueEntry(enqueue, pb.Message.encode({ body: big }).finish(), 0)));
    expect(Buffer.from(pb.Message.decode(withBig.message ?? new Uint8Array(0)).body ?? [])).toEqual(big);
  });

  it('stampEntry rewrites the clock in place', () => {
    const data = encodeQueueEntry(enqueue, encodedMessage, 0);
    stampEntry(data, 99.5);
    expect(single(data).now).toBe(99.5);
    expect(single(Buffer.from(data)).command).toStrictEqual(enqueue);
  });

  it('refuse a command the log cannot hold exactly (the proposal fails, nothing is logged)', () => {
    expect(() => encodeQueueEntry({ type: 'ack', consumerId: 'c', deliveryTag: 0.5 }, null)).toThrow(BrokerError);
    expect(() => encodeQueueBatch([{ command: enqueue, message: null }, { command: { type: 'nope' } as unknown as Command, message: null }])).toThrow(BrokerError);
  });
});

describe('batch entries', () => {
  const settle: Command = { type: 'ack', consumerId: 'n1/c-1', deliveryTag: 3, multiple: false };
  const other = Buffer.from(pb.Message.encode({ body: Buffer.alloc(2000, 9), routingKey: 'q' }).finish());
  const commands: EntryCommand[] = [
    { command: enqueue, message: encodedMessage },
    { command: settle, message: null },
    { command: { ...enqueue, routingKeys: ['ü'] }, message: other },
    { command: enqueue, message },
  ];

  it('hold every command in order, with its message byte for byte, under one clock', () => {
    // The buffer this node encoded (its leader applying it) decodes no command; a copy (a
    // follower's) decodes each.
    for (const data of [encodeQueueBatch(commands, 77), Buffer.from(encodeQueueBatch(commands, 77))]) {
      const decoded = decodeQueueEntry(data);
      expect(decoded.batch).toBe(true);
      expect(decoded.now).toBe(77);
      expect(decoded.commands.map((c) => c.command)).toStrictEqual([enqueue, settle, { ...enqueue, routingKeys: ['ü'] }, enqueue]);
      expect(Buffer.from(decoded.commands[0]!.message ?? [])).toEqual(encodedMessage);
      expect(decoded.commands[1]!.message).toBeNull();
      expect(Buffer.from(decoded.commands[2]!.message ?? [])).toEqual(other);
      expect(Buffer.from(decoded.commands[3]!.message ?? [])).toEqual(encodedMessage);
    }
  });

  it('are what the generated code writes for QueueEntry { batch, format }, both ways', () => {
    const batch = commands.map((c) => ({
      queueCommand: queueCommand(c.command),
      ...(c.message === null ? {} : { message: c.message instanceof Uint8Array ? c.message : pb.Message.encode(c.message).finish() }),
    }));
    const generated = generatedEntry(0, { batch, format: FORMAT_COMMAND });
    expect(Buffer.from(encodeQueueBatch(commands, 0))).toEqual(generated);
    expect(decodeQueueEntry(generated).commands.map((c) => c.command.type)).toEqual(['enqueue', 'ack', 'enqueue', 'enqueue']);
  });

  it('refuse what no writer of the format writes', () => {
    const element = (entry: pb.QueueEntry.$Properties): pb.QueueEntry.$Properties => entry;
    const tick = element({ queueCommand: { tick: {} } });
    const malformed: ReadonlyArray<[string, pb.QueueEntry.$Properties, RegExp]> = [
      ['a batch inside a batch', { format: FORMAT_COMMAND, batch: [{ batch: [tick] }] }, /holds a batch/],
      ['a command beside the batch', { format: FORMAT_COMMAND, batch: [tick], queueCommand: { tick: {} } }, /other than its batch/],
      ['a message beside the batch', { format: FORMAT_COMMAND, batch: [tick], message: encodedMessage }, /other than its batch/],
      ['an element without a command', { format: FORMAT_COMMAND, batch: [tick, { message: encodedMessage }] }, /without a command/],
      ['an element with JSON', { format: FORMAT_COMMAND, batch: [{ ...tick, command: '{"type":"tick"}' }] }, /field of the entry holding it/],
      ['JSON in a command entry', { format: FORMAT_COMMAND, command: '{"type":"tick"}', queueCommand: { tick: {} } }, /JSON command/],
      ['no command', { format: FORMAT_COMMAND, message: encodedMessage }, /without a command/],
      ['a format this node does not know', { format: 7 as pb.QueueEntryFormat, queueCommand: { tick: {} } }, /format 7 is not one this node reads/],
    ];
    for (const [what, entry, reason] of malformed) expect(() => decodeQueueEntry(generatedEntry(0, entry)), what).toThrow(reason);
    const whole = Buffer.from(encodeQueueBatch(commands, 0));
    expect(() => decodeQueueEntry(whole.subarray(0, whole.length - 10))).toThrow();
    expect(() => decodeQueueEntry(new Uint8Array(3))).toThrow(/too short/);
  });
});

describe('entries of the format before (commands as JSON)', () => {
  // As the JSON encoder wrote them (queue-entry-old-logs.test.ts replays real ones).
  const json = (now: number, entry: pb.QueueEntry.$Properties): Buffer => generatedEntry(now, entry);

  it('still decode, one command or a batch', () => {
    const one = single(json(7, { command: JSON.stringify(enqueue), message: encodedMessage }));
    expect(one.now).toBe(7);
    expect(one.command).toStrictEqual(enqueue);
    expect(Buffer.from(one.message ?? [])).toEqual(encodedMessage);
    const batch = decodeQueueEntry(json(8, { batch: [{ command: JSON.stringify(enqueue), message: encodedMessage }, { command: '{"type":"tick"}' }] }));
    expect(batch.batch).toBe(true);
    expect(batch.commands.map((c) => c.command)).toStrictEqual([enqueue, { type: 'tick' }]);
  });

  it('malformed ones are refused with the reasons they always had', () => {
    expect(() => decodeQueueEntry(Buffer.alloc(ENTRY_CLOCK_BYTES))).toThrow(/without a command/);
    expect(() => decodeQueueEntry(Buffer.concat([Buffer.alloc(8), Buffer.from([0x1a, 0x05, 1])]))).toThrow();
    const inner = pb.QueueEntry.encode({ command: '{}' }).finish();
    const nested = Buffer.concat([Buffer.alloc(8), Buffer.from([0x22, inner.length + 2, 0x22, inner.length]), inner]);
    expect(() => decodeQueueEntry(nested)).toThrow(/holds a batch/);
    const stray = Buffer.concat([json(0, { batch: [{ command: '{"type":"tick"}' }] }), Buffer.from([0x12, 0x02, 0x7b, 0x7d])]);
    expect(() => decodeQueueEntry(stray)).toThrow(/other than its batch/);
    expect(() => decodeQueueEntry(json(0, { command: '{"type":' }))).toThrow(SyntaxError);
  });
});

describe('queue snapshots', () => {
  it('round-trip ids and message bytes, and are what the generated QueueSnapshot code writes', () => {
    const machine = Buffer.from([1, 2, 3, 4]);
    const other = Buffer.from(pb.Message.encode({ body: Buffer.from('second') }).finish());
    const live: Array<[number, Uint8Array]> = [
      [17, encodedMessage],
      [2 ** 40, other],
    ];
    const data = encodeQueueSnapshot(machine, live);
    expect(Buffer.from(data)).toEqual(Buffer.from(pb.QueueSnapshot.encode({ machine, messages: live.map(([id, m]) => ({ id, message: m })) }).finish()));
    const ours = decodeQueueSnapshot(data);
    expect(Buffer.from(ours.machine)).toEqual(machine);
    expect([...ours.messages.keys()]).toEqual([17, 2 ** 40]);
    expect(Buffer.from(ours.messages.get(17) ?? [])).toEqual(encodedMessage);
    const generated = pb.QueueSnapshot.encode({ machine, messages: [{ id: 3, message: encodedMessage }] }).finish();
    expect(pb.Message.decode(decodeQueueSnapshot(generated).messages.get(3) ?? new Uint8Array(0)).routingKey).toBe('orders.eu');
  });

  it('keep an empty stored message (an enqueue of a message with no fields)', () => {
    const restored = decodeQueueSnapshot(encodeQueueSnapshot(new Uint8Array(0), [[5, new Uint8Array(0)]]));
    expect([...restored.messages]).toEqual([[5, Buffer.alloc(0)]]);
  });

  it('restored messages do not share the snapshot buffer', () => {
    const data = Buffer.from(encodeQueueSnapshot(new Uint8Array(0), [[1, encodedMessage]]));
    const restored = decodeQueueSnapshot(data);
    data.fill(0);
    expect(Buffer.from(restored.messages.get(1) ?? [])).toEqual(encodedMessage);
  });
});

/** A decoded sint64 as a number (the generated code may hand a Long). */
const asNumber = (value: number | { toNumber(): number }): number => (typeof value === 'number' ? value : value.toNumber());

/** Running sums of deltas: the ids a snapshot's delta fields stand for. */
const sums = (deltas: ReadonlyArray<number | { toNumber(): number }>): number[] => {
  let value = 0;
  return deltas.map((delta) => (value += asNumber(delta)));
};

/** Consecutive differences (the first from 0): what QueueSnapshot's delta fields hold. */
const deltasOf = (values: readonly number[]): number[] => values.map((value, i) => value - (i === 0 ? 0 : values[i - 1]!));

describe('local queue snapshots (references into the message store)', () => {
  const storeId = '0123456789abcdef0123456789abcdef';
  const machine = Buffer.from([9, 8, 7, 6, 5]);
  const cases: ReadonlyArray<[string, SnapshotRefs]> = [
    ['no messages', { storeId, messageIds: [], recordIds: [] }],
    ['one message', { storeId, messageIds: [4096], recordIds: [1] }],
    ['ids near 2^50', { storeId, messageIds: [2 ** 50 - 4096, 2 ** 50, 2 ** 50 + 4097], recordIds: [2 ** 50 - 1, 2 ** 50, 2 ** 50 + 1] }],
    // Compaction keeps record ids, but a fan-out shares records put by another queue: not in id order.
    ['record ids out of order', { storeId, messageIds: [4096, 4097, 8192, 8193, 12288], recordIds: [500, 3, 2 ** 40, 7, 0] }],
    ['many', { storeId, messageIds: Array.from({ length: 5000 }, (_, i) => 4096 + i * 3), recordIds: Array.from({ length: 5000 }, (_, i) => (i * 7919) % 5003) }],
  ];

  it.each(cases)('round-trip: %s', (_what, refs) => {
    const data = encodeQueueSnapshotRefs(machine, refs);
    const ours = decodeQueueSnapshot(data);
    expect(Buffer.from(ours.machine)).toEqual(machine);
    expect(ours.messages.size).toBe(0);
    expect(ours.refs).toEqual(refs);
    // What the generated code reads in it.
    const theirs = pb.QueueSnapshot.decode(data);
    expect(Buffer.from(theirs.machine)).toEqual(machine);
    expect(theirs.storeId).toBe(storeId);
    expect(theirs.messages).toEqual([]);
    expect(sums(theirs.messageIdDeltas)).toEqual(refs.messageIds);
    expect(sums(theirs.recordIdDeltas)).toEqual(refs.recordIds);
    // And what it writes for the same fields: the same bytes, read the same.
    const generated = pb.QueueSnapshot.encode({ machine, storeId, messageIdDeltas: deltasOf(refs.messageIds), recordIdDeltas: deltasOf(refs.recordIds) }).finish();
    expect(Buffer.from(data)).toEqual(Buffer.from(generated));
    expect(decodeQueueSnapshot(generated).refs).toEqual(refs);
  });

  it('take a few bytes a message when ids grow with the log', () => {
    const refs = cases[4]![1];
    const data = encodeQueueSnapshotRefs(machine, refs);
    expect(data.byteLength).toBeLessThan(machine.byteLength + 64 + 4 * refs.messageIds.length);
  });

  it('are told apart from the portable form, whose snapshots have no store id', () => {
    const portable = decodeQueueSnapshot(encodeQueueSnapshot(machine, [[4096, encodedMessage]]));
    expect(portable.refs).toBeNull();
    expect([...portable.messages.keys()]).toEqual([4096]);
  });

  it('refuse lists of different lengths, and ids that sum to no safe non-negative integer', () => {
    expect(() => encodeQueueSnapshotRefs(machine, { storeId, messageIds: [1, 2], recordIds: [1] })).toThrow(/2 message ids but 1 record ids/);
    const uneven = pb.QueueSnapshot.encode({ machine, storeId, messageIdDeltas: [1, 1], recordIdDeltas: [5] }).finish();
    expect(() => decodeQueueSnapshot(uneven)).toThrow(/2 message ids but 1 record ids/);
    const negative = pb.QueueSnapshot.encode({ machine, storeId, messageIdDeltas: [4, -5], recordIdDeltas: [1, 1] }).finish();
    expect(() => decodeQueueSnapshot(negative)).toThrow(/message id -1 at position 1/);
  });
});

describe('the fan-out key of a message (QueueEntry.message_key)', () => {
  const key = 'n1/6f1c2a4e-0b7d-4c55-9a3e-2f6d8c1b0e9a';

  it('round-trips in a single entry, and is absent when not given', () => {
    const data = encodeQueueEntry(enqueue, encodedMessage, 12, key);
    for (const copy of [data, Buffer.from(data)]) {
      const decoded = single(copy);
      expect(decoded.key).toBe(key);
      expect(decoded.command).toStrictEqual(enqueue);
      expect(Buffer.from(decoded.message ?? [])).toEqual(encodedMessage);
    }
    expect(pb.QueueEntry.decode(data.subarray(ENTRY_CLOCK_BYTES)).messageKey).toBe(key);
    expect(Buffer.from(data)).toEqual(generatedEntry(12, { message: encodedMessage, format: FORMAT_COMMAND, queueCommand: queueCommand(enqueue), messageKey: key }));
    const without = encodeQueueEntry(enqueue, encodedMessage, 12);
    expect(single(Buffer.from(without)).key).toBeNull();
    expect(pb.QueueEntry.decode(without.subarray(ENTRY_CLOCK_BYTES)).messageKey).toBe('');
  });

  it('round-trips per element of a batch, with and without a key', () => {
    const other = 'n2/ключ-🔑';
    const commands: EntryCommand[] = [
      { command: enqueue, message: encodedMessage, key },
      { command: { type: 'tick' }, message: null },
      { command: enqueue, message: encodedMessage },
      { command: enqueue, message: encodedMessage, key: other },
    ];
    const data = encodeQueueBatch(commands, 5);
    for (const copy of [data, Buffer.from(data)]) {
      const decoded = decodeQueueEntry(copy);
      expect(decoded.batch).toBe(true);
      expect(decoded.commands.map((c) => c.key)).toEqual([key, null, null, other]);
      expect(decoded.commands.map((c) => c.command.type)).toEqual(['enqueue', 'tick', 'enqueue', 'enqueue']);
    }
    expect(pb.QueueEntry.decode(data.subarray(ENTRY_CLOCK_BYTES)).batch.map((e) => e.messageKey)).toEqual([key, '', '', other]);
  });

  it('is refused beside a batch, as every other field is', () => {
    const stray = generatedEntry(0, { format: FORMAT_COMMAND, batch: [{ queueCommand: { tick: {} } }], messageKey: key });
    expect(() => decodeQueueEntry(stray)).toThrow(/other than its batch/);
  });
});
