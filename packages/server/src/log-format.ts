/**
 * The durable log format of a queue group: what its Raft entries and snapshots hold
 * (proto/quorumq/v1/replicated.proto). Every replica reads these bytes, today and after any
 * upgrade, so the format says which version wrote it (`QueueEntry.format`) and every
 * version ever written stays readable:
 *
 * - An entry is an 8-byte leader clock (a float64, little-endian, stamped in place when the
 *   leader proposes it), then a `QueueEntry`: one command, or a batch of commands, each with
 *   its message (an enqueue's) as the bytes the publisher sent.
 * - QUEUE_ENTRY_FORMAT_COMMAND (written now): each command is a `QueueCommand`, the machine's
 *   `Command` with the oneof case as its type. encodeQueueCommand / decodeQueueCommand map
 *   one to the other by field name, through the generated code.
 * - QUEUE_ENTRY_FORMAT_JSON (entries without a format, written before): each command is
 *   JSON. readJsonEntry reads them exactly as the JSON encoder's reader did.
 * - A snapshot is a `QueueSnapshot`: the machine's own snapshot and the live messages,
 *   either as their bytes (portable: sent to followers, and written by releases before the
 *   message store) or as references into this node's message store (local: saved).
 *
 * Entries are written by the generated code and read by hand (one pass, messages left as
 * views into the entry, the commands of the entries this node encoded not decoded again);
 * snapshots are written and read by hand. Each choice is what codec-bench.mjs measured,
 * recorded where it is made. The bytes are the generated code's either way: tests compare.
 */
import { bytesFieldBytes, handTags, quorumq, Reader, varintBytes, writeBytesField, writeVarint, Writer } from '@quorumq/proto';
import { commandTypeProblem, type Command, type CommandType, type DeathRecord, type Deaths, type DeathSummary } from '@quorumq/queue';

import { invalidArgument } from './errors.js';

import pb = quorumq.v1;

/** The leader clock prefix of every queue entry. */
export const ENTRY_CLOCK_BYTES = 8;

/** The format this node writes. */
export const QUEUE_ENTRY_FORMAT: pb.QueueEntryFormat = pb.QueueEntryFormat.QUEUE_ENTRY_FORMAT_COMMAND;

const ENTRY_JSON = handTags.QueueEntry.command;
const ENTRY_MESSAGE = handTags.QueueEntry.message;
const ENTRY_BATCH = handTags.QueueEntry.batch;
const ENTRY_FORMAT = handTags.QueueEntry.format;
const ENTRY_COMMAND = handTags.QueueEntry.queueCommand;
const ENTRY_MESSAGE_KEY = handTags.QueueEntry.messageKey;
const SNAPSHOT_MACHINE = handTags.QueueSnapshot.machine;
const SNAPSHOT_MESSAGES = handTags.QueueSnapshot.messages;
const SNAPSHOT_STORE_ID = handTags.QueueSnapshot.storeId;
const SNAPSHOT_MESSAGE_ID_DELTAS = handTags.QueueSnapshot.messageIdDeltas;
const SNAPSHOT_RECORD_ID_DELTAS = handTags.QueueSnapshot.recordIdDeltas;
const STORED_ID = handTags.StoredMessage.id;
const STORED_MESSAGE = handTags.StoredMessage.message;

const asBuffer = (bytes: Uint8Array): Buffer =>
  Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);

// ------------------------------------------------------------------------------------
// Commands: QueueCommand <-> the machine's Command

/** Whether a string is well-formed UTF-16 (no lone surrogate, which UTF-8 cannot carry). */
const isWellFormed = (text: string): boolean => (text as unknown as { isWellFormed(): boolean }).isWellFormed();

/** Why `value` (a command or a part of one) would not read back as itself, or null. */
function encodingProblem(value: unknown, path: string): string | null {
  switch (typeof value) {
    case 'number':
      // Every safe integer is exact in an int64 field; nothing else is.
      return Number.isSafeInteger(value) ? null : `${path} is ${value}, not a safe integer`;
    case 'string':
      return isWellFormed(value) ? null : `${path} holds a lone surrogate, which UTF-8 cannot carry`;
    case 'object': {
      if (value === null) return null;
      if (Array.isArray(value)) {
        for (let i = 0; i < value.length; i++) {
          const problem = encodingProblem(value[i], `${path}[${i}]`);
          if (problem !== null) return problem;
        }
        return null;
      }
      for (const key in value) {
        const problem = encodingProblem((value as Record<string, unknown>)[key], `${path}.${key}`);
        if (problem !== null) return problem;
      }
      return null;
    }
    default:
      return null;
  }
}

/**
 * A command as a QueueCommand: the oneof case named by its type holds the command itself (the
 * generated encoder reads the fields it declares, under the names the command uses). Throws a
 * BrokerError (INVALID_ARGUMENT) for a command that would not read back exactly as itself: an
 * unknown type, a number that is not a safe integer, a string with a lone surrogate. The
 * machine refuses such numbers anyway; the log never holds an approximation of a command.
 *
 * codec-bench.mjs, "log: encode + decode" (µs per command, median): an enqueue 1.46, an ack
 * 0.94, a dead-lettered enqueue 8.4; as JSON (the format before) 2.10, 2.81, 10.5.
 */
export function encodeQueueCommand(command: Command): Uint8Array {
  return pb.QueueCommand.encode(entryOf({ command, message: null }).queueCommand!).finish();
}

/** Why encodeQueueCommand refuses `command`, or null. */
export function queueCommandProblem(command: Command): string | null {
  const typeProblem = commandTypeProblem(command);
  return typeProblem !== null ? typeProblem.message : encodingProblem(command, 'command');
}

// The schema and the machine's Command hold the same commands and fields, by name: a
// difference is a type error here. (A leader applies the command it encoded as it built it,
// its followers the command they decoded: a field only one of the two knew would make the
// replicas apply different commands.)
type CaseName = Exclude<keyof pb.QueueCommand.$Properties, '$unknowns' | 'command'>;
type Fields<T> = Exclude<keyof T, '$unknowns' | 'type'>;
type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
type CaseMismatch = { [K in CommandType]: Same<Fields<NonNullable<pb.QueueCommand.$Properties[K]>>, Fields<Extract<Command, { type: K }>>> extends true ? never : K }[CommandType];
type Assert<T extends true> = T;
/** True, or a type error naming what differs. */
export type QueueCommandMatchesCommand = Assert<
  Same<CaseName, CommandType> extends true
    ? [CaseMismatch] extends [never]
      ? Same<Fields<pb.QueueCommand.Deaths.$Properties>, Fields<Deaths>> extends true
        ? Same<Fields<pb.QueueCommand.DeathRecord.$Properties>, Fields<DeathRecord>> extends true
          ? Same<Fields<pb.QueueCommand.DeathSummary.$Properties>, Fields<DeathSummary>>
          : false
        : false
      : false
    : false
>;

/** toObject's options for a command: plain fields with their defaults, optional ones only when set. */
const TO_COMMAND = { defaults: true } as const;

/**
 * A decoded QueueCommand as the machine's Command: the set case is its type, the case's fields
 * its fields (proto3 defaults for the plain ones; an `optional` one only when it was written).
 * A QueueCommand with no case this node knows (from a newer writer) becomes a command without
 * a type, which the machine refuses (INVALID_ARGUMENT), as it refuses JSON without one.
 */
function commandOf(message: pb.QueueCommand): Command {
  const type = message.command;
  if (type === undefined) return {} as Command;
  const command = (pb.QueueCommand.toObject(message, TO_COMMAND) as Record<string, Record<string, unknown>>)[type]!;
  command['type'] = type;
  if (type === 'enqueue' && command['deaths'] !== undefined) command['deaths'] = deathsOf(command['deaths'] as DecodedDeaths);
  return command as unknown as Command;
}

type DecodedDeaths = { records: Array<Omit<DeathRecord, 'originalExpirationMs'> & { originalExpirationMs?: number }> } & Omit<Deaths, 'records'>;

/**
 * Death records as the machine builds them (deaths.ts, recordDeath): originalExpirationMs null
 * when unset, and the fields in the machine's order, which is the order of their numbers in
 * the schema. The machine keeps a message's records as they came, and its snapshot (so a
 * replica's state hash) holds them as JSON: records read from JSON and from QueueCommand must
 * be the same JSON.
 */
function deathsOf(deaths: DecodedDeaths): Deaths {
  const records = deaths.records.map((r): DeathRecord => ({
    queue: r.queue,
    reason: r.reason,
    count: r.count,
    exchange: r.exchange,
    routingKeys: r.routingKeys,
    firstTime: r.firstTime,
    lastTime: r.lastTime,
    originalExpirationMs: r.originalExpirationMs ?? null,
  }));
  return { records, first: deaths.first, last: deaths.last };
}

/** Decodes an encoded QueueCommand (encodeQueueCommand's bytes). Throws on malformed bytes. */
export function decodeQueueCommand(bytes: Uint8Array): Command {
  return commandOf(pb.QueueCommand.decode(bytes));
}

// ------------------------------------------------------------------------------------
// Queue entries

/** Commands of the entries this node encoded: applying its own proposals decodes no command. */
const encodedCommands = new WeakMap<Uint8Array, Command | readonly Command[]>();

/** One command of an entry, with its message (encoded, or to encode). */
export interface EntryCommand {
  readonly command: Command;
  readonly message: pb.Message.$Properties | Uint8Array | null;
  /** The fan-out key of a message routed to several queues (QueueEntry.message_key). */
  readonly key?: string | undefined;
}

/** A command as an element of an entry (or as the entry): its message, its QueueCommand. */
function entryOf({ command, message, key }: EntryCommand): pb.QueueEntry.$Properties {
  const problem = queueCommandProblem(command);
  if (problem !== null) throw invalidArgument(`cannot write the queue command to the log: ${problem}`, 'MALFORMED_COMMAND');
  const queueCommand = { [command.type]: command } as pb.QueueCommand.$Properties;
  if (message === null) return { queueCommand };
  const encoded = message instanceof Uint8Array ? message : pb.Message.encode(message).finish();
  return key === undefined ? { message: encoded, queueCommand } : { message: encoded, queueCommand, messageKey: key };
}

/**
 * The writer entries are encoded in, reused (encoding is synchronous). A new writer starts at
 * 128 bytes and doubles as it fills, so a 256 KiB batch entry allocated about 1 MiB of
 * buffers before its final copy; outside V8's heap, those count towards the external
 * memory that starts a full garbage collection. Reused, an entry costs one buffer of its size.
 */
let entryWriter: InstanceType<typeof Writer> | undefined;
/** A larger writer is let go after use (an entry of several MiB is rare). */
const ENTRY_WRITER_KEPT_MAX = 8 * 1024 * 1024;

/** The entry writer, emptied, with the clock prefix written (see finishEntry). */
function startEntry(now: number): InstanceType<typeof Writer> {
  // Taken while in use: an encoding that throws leaves its half-written writer behind.
  const writer = entryWriter ?? Writer.create();
  entryWriter = undefined;
  writer.pos = 0;
  writer.states = null;
  writer.double(now);
  return writer;
}

/** The entry's bytes; the writer is kept for the next entry. */
function finishEntry(writer: InstanceType<typeof Writer>): Uint8Array {
  const out = writer.finish();
  if (writer.buf.length <= ENTRY_WRITER_KEPT_MAX) entryWriter = writer;
  return out;
}

/**
 * Encodes a queue entry: the clock prefix, then `QueueEntry { message, format, queue_command }`.
 * `message` is either an encoded Message (carried as is) or one to encode. Throws a
 * BrokerError for a command encodeQueueCommand refuses.
 *
 * Written field by field (the command's case by its generated encoder), the bytes the
 * generated QueueEntry encoder writes (queue-entry-log-format.test.ts): one entry per
 * operation at one in flight, where building the entry as an object (a computed key for the
 * case, a spread for the format) went through V8's runtime on every call. codec-bench.mjs,
 * "log: encode a single entry" (µs, two runs): an enqueue of 1 KiB 0.92 and 0.97 against 2.61
 * and 2.17, an ack 0.58 and 0.59 against 1.76 and 1.80; the first 2,000 calls of a new
 * process 6.75 and 7.66 against 11.47 and 9.74 (enqueue), 5.50 and 4.80 against 8.37 and 5.85.
 */
export function encodeQueueEntry(command: Command, message: pb.Message.$Properties | Uint8Array | null, now = 0, key?: string): Uint8Array {
  const problem = queueCommandProblem(command);
  if (problem !== null) throw invalidArgument(`cannot write the queue command to the log: ${problem}`, 'MALFORMED_COMMAND');
  const encoded = message === null || message instanceof Uint8Array ? message : pb.Message.encode(message).finish();
  const writer = startEntry(now);
  // QueueEntry's fields in the generated encoder's order (by number): message, format,
  // queue_command (its case: the command's fields), message_key.
  if (encoded !== null) writer.uint32(ENTRY_MESSAGE).bytes(encoded);
  writer.uint32(ENTRY_FORMAT).int32(QUEUE_ENTRY_FORMAT);
  const encodeCase = CASE_ENCODERS[command.type];
  encodeCase(command as never, writer.uint32(ENTRY_COMMAND).fork().uint32(handTags.QueueCommand[command.type]).fork()).ldelim().ldelim();
  if (key !== undefined && key !== '') writer.uint32(ENTRY_MESSAGE_KEY).string(key);
  const out = finishEntry(writer);
  encodedCommands.set(out, command);
  return out;
}

type CaseEncoder = (command: never, writer: InstanceType<typeof Writer>) => InstanceType<typeof Writer>;
const C = pb.QueueCommand;
/**
 * Each command type's case of QueueCommand: the generated encoder of its message (which reads
 * the command's fields by name and ignores `type`); its tag is in `handTags.QueueCommand`. The
 * Record names every CommandType, and QueueCommandMatchesCommand checks they are the schema's cases.
 */
const CASE_ENCODERS: Record<CommandType, CaseEncoder> = {
  enqueue: C.Enqueue.encode,
  subscribe: C.Subscribe.encode,
  credit: C.Credit.encode,
  cancel: C.Cancel.encode,
  consumerDown: C.ConsumerDown.encode,
  ack: C.Ack.encode,
  return: C.Return.encode,
  discard: C.Discard.encode,
  get: C.Get.encode,
  purge: C.Purge.encode,
  tick: C.Tick.encode,
  deadLetterConfirmed: C.DeadLetterConfirmed.encode,
  declare: C.Declare.encode,
  delete: C.Delete.encode,
  sessionEnded: C.SessionEnded.encode,
  moveStart: C.MoveStart.encode,
  moveConfirmed: C.MoveConfirmed.encode,
  moveFailed: C.MoveFailed.encode,
  moveCancel: C.MoveCancel.encode,
};

/**
 * Encodes several commands as one entry: the clock prefix, then `QueueEntry { batch: [...],
 * format }`. Throws a BrokerError for a command encodeQueueCommand refuses.
 *
 * Written by the generated code: codec-bench.mjs, "log: encode a batch entry" (µs per
 * command, median; 64 enqueues of 16 B, 64 of 1 KiB, 16 of 16 KiB): generated 0.71, 3.47,
 * 24.1; the hand-written writer it replaced (sized first, one buffer) 1.57, 1.80, 22.0. In
 * another run 0.80, 2.68, 13.8 against 1.02, 1.17, 18.1: no gain the runs agree on.
 */
export function encodeQueueBatch(commands: readonly EntryCommand[], now = 0): Uint8Array {
  const out = finishEntry(pb.QueueEntry.encode({ batch: commands.map(entryOf), format: QUEUE_ENTRY_FORMAT }, startEntry(now)));
  encodedCommands.set(
    out,
    commands.map((c) => c.command),
  );
  return out;
}

/** Stamps the leader's clock into an encoded entry, in place. */
export function stampEntry(data: Uint8Array, now: number): void {
  asBuffer(data).writeDoubleLE(now, 0);
}

export interface DecodedCommand {
  readonly command: Command;
  /** The encoded Message (a view into the entry), or null. */
  readonly message: Uint8Array | null;
  /** The fan-out key (QueueEntry.message_key), or null. */
  readonly key: string | null;
}

export interface DecodedQueueEntry {
  readonly now: number;
  /** The entry's commands in order: one, or a batch's. */
  readonly commands: readonly DecodedCommand[];
  /** Whether the entry is a batch (its commands' replies go back as a list). */
  readonly batch: boolean;
}

/** The end of the length-delimited field whose length is next; it must lie within `end`. */
function fieldEnd(reader: Reader, end: number): number {
  const length = reader.uint32();
  const fieldEnds = reader.pos + length;
  if (fieldEnds > end) throw new Error('queue entry field past its end');
  return fieldEnds;
}

/**
 * The format of an entry (a scan of its top-level fields): JSON when it has none, and when
 * its fields cannot be read (the JSON reader then says why, as it always did).
 */
function formatOf(reader: Reader): number {
  let format: number = pb.QueueEntryFormat.QUEUE_ENTRY_FORMAT_JSON;
  try {
    while (reader.pos < reader.len) {
      const t = reader.uint32();
      if (t === ENTRY_FORMAT) format = reader.int32();
      else reader.skipType(t & 7);
    }
  } catch {
    format = pb.QueueEntryFormat.QUEUE_ENTRY_FORMAT_JSON;
  }
  reader.pos = 0;
  return format;
}

/**
 * Decodes an entry; messages stay encoded (views into `data`). Throws on malformed bytes.
 *
 * Read by hand: codec-bench.mjs, "log: decode a batch entry" (µs per command, median; 64
 * enqueues of 16 B, 64 of 1 KiB, 16 of 16 KiB). On the leader, which applies the entries it
 * encoded and knows their commands: 0.25, 0.23, 0.14, where the generated decoder takes
 * 1.50, 1.85, 0.94. On a follower, even: 0.70, 1.43, 1.68 against 1.62, 1.16, 0.83.
 */
export function decodeQueueEntry(data: Uint8Array): DecodedQueueEntry {
  if (data.byteLength < ENTRY_CLOCK_BYTES) throw new Error('queue entry too short');
  const buf = asBuffer(data);
  const now = buf.readDoubleLE(0);
  const reader = Reader.create(buf.subarray(ENTRY_CLOCK_BYTES));
  const format = formatOf(reader);
  if (format === pb.QueueEntryFormat.QUEUE_ENTRY_FORMAT_JSON) return readJsonEntry(reader, now);
  if (format !== pb.QueueEntryFormat.QUEUE_ENTRY_FORMAT_COMMAND) {
    throw new Error(`queue entry format ${format} is not one this node reads (QUEUE_ENTRY_FORMAT_JSON, QUEUE_ENTRY_FORMAT_COMMAND)`);
  }
  return readCommandEntry(reader, now, encodedCommands.get(data));
}

/**
 * Reads a QUEUE_ENTRY_FORMAT_COMMAND entry: a batch (only `batch` and `format` fields) or one
 * command. Fields this version does not know are skipped; a known field out of place (a
 * command beside a batch, a batch in a batch, JSON) makes the entry malformed.
 */
function readCommandEntry(reader: Reader, now: number, known: Command | readonly Command[] | undefined): DecodedQueueEntry {
  const knownBatch = Array.isArray(known) ? (known as readonly Command[]) : undefined;
  const commands: DecodedCommand[] = [];
  let single: { start: number; end: number } | null = null;
  let message: Uint8Array | null = null;
  let key: string | null = null;
  let batch = false;
  while (reader.pos < reader.len) {
    const t = reader.uint32();
    if (t === ENTRY_BATCH) {
      batch = true;
      const end = fieldEnd(reader, reader.len);
      commands.push(readElement(reader, end, knownBatch?.[commands.length]));
    } else if (t === ENTRY_COMMAND) {
      const end = fieldEnd(reader, reader.len);
      single = { start: reader.pos, end };
      reader.pos = end;
    } else if (t === ENTRY_MESSAGE) {
      message = reader.bytes();
    } else if (t === ENTRY_MESSAGE_KEY) {
      key = reader.string();
    } else if (t === ENTRY_JSON) {
      throw new Error('a JSON command in an entry of format QUEUE_ENTRY_FORMAT_COMMAND');
    } else {
      reader.skipType(t & 7);
    }
  }
  if (batch) {
    if (single !== null || message !== null || key !== null) throw new Error('a batch entry with a field other than its batch');
    return { now, commands, batch: true };
  }
  if (single === null) throw new Error('queue entry without a command');
  const command = known !== undefined && !Array.isArray(known) ? (known as Command) : readQueueCommand(reader, single.start, single.end);
  return { now, commands: [{ command, message, key }], batch: false };
}

/** Reads one element of a batch up to `end`; `known` skips decoding its command. */
function readElement(reader: Reader, end: number, known: Command | undefined): DecodedCommand {
  let command: Command | undefined = known;
  let found = false;
  let message: Uint8Array | null = null;
  let key: string | null = null;
  while (reader.pos < end) {
    const t = reader.uint32();
    if (t === ENTRY_COMMAND) {
      const commandEnd = fieldEnd(reader, end);
      found = true;
      if (known === undefined) command = readQueueCommand(reader, reader.pos, commandEnd);
      reader.pos = commandEnd;
    } else if (t === ENTRY_MESSAGE) {
      const messageEnd = fieldEnd(reader, end);
      message = reader.buf.subarray(reader.pos, messageEnd);
      reader.pos = messageEnd;
    } else if (t === ENTRY_MESSAGE_KEY) {
      const keyEnd = fieldEnd(reader, end);
      key = asBuffer(reader.buf).toString('utf8', reader.pos, keyEnd);
      reader.pos = keyEnd;
    } else if (t === ENTRY_BATCH) {
      throw new Error('a batched queue entry holds a batch');
    } else if (t === ENTRY_JSON || t === ENTRY_FORMAT) {
      throw new Error('a batched queue entry with a field of the entry holding it');
    } else {
      reader.skipType(t & 7);
    }
  }
  if (reader.pos !== end) throw new Error('queue entry field past its end');
  if (!found || command === undefined) throw new Error('queue entry without a command');
  return { command, message, key };
}

/** Decodes the QueueCommand at [start, end) of the reader's buffer. */
function readQueueCommand(reader: Reader, start: number, end: number): Command {
  reader.pos = start;
  const message = pb.QueueCommand.decode(reader as unknown as Uint8Array, end - start);
  if (reader.pos !== end) throw new Error('queue command past its end');
  return commandOf(message);
}

// QUEUE_ENTRY_FORMAT_JSON, as the JSON encoder's reader read it (its error messages included).

/** Reads one QueueEntry's JSON command and message up to `end`. */
function readJsonCommand(reader: Reader, end: number): DecodedCommand {
  let command: string | null = null;
  let message: Uint8Array | null = null;
  while (reader.pos < end) {
    const t = reader.uint32();
    if (t === ENTRY_JSON) command = reader.string();
    else if (t === ENTRY_MESSAGE) message = reader.bytes();
    else if (t === ENTRY_BATCH) throw new Error('a batched queue entry holds a batch');
    else reader.skipType(t & 7);
  }
  if (reader.pos !== end) throw new Error('queue entry field past its end');
  if (command === null) throw new Error('queue entry without a command');
  return { command: JSON.parse(command) as Command, message, key: null };
}

/** Reads a QUEUE_ENTRY_FORMAT_JSON entry (one without a format field). */
function readJsonEntry(reader: Reader, now: number): DecodedQueueEntry {
  // A batch's elements come first: a batch entry has no top-level command.
  if (reader.len > 0 && reader.buf[0] === ENTRY_BATCH) {
    const commands: DecodedCommand[] = [];
    while (reader.pos < reader.len) {
      const t = reader.uint32();
      if (t !== ENTRY_BATCH) throw new Error('a batch entry with a field other than its batch');
      const end = reader.uint32() + reader.pos;
      if (end > reader.len) throw new Error('queue batch element past the end');
      commands.push(readJsonCommand(reader, end));
    }
    return { now, commands, batch: true };
  }
  return { now, commands: [readJsonCommand(reader, reader.len)], batch: false };
}

// ------------------------------------------------------------------------------------
// Queue snapshots

export interface DecodedQueueSnapshot {
  readonly machine: Uint8Array;
  /** Portable form: message id -> encoded Message (copies: they do not hold the snapshot's buffer). */
  readonly messages: Map<number, Uint8Array>;
  /** Local form: the live messages' ids and, at the same positions, their record ids in `storeId`. */
  readonly refs: SnapshotRefs | null;
}

/** A local snapshot's references into a node's message store. */
export interface SnapshotRefs {
  readonly storeId: string;
  readonly messageIds: readonly number[];
  readonly recordIds: readonly number[];
}

/**
 * `QueueSnapshot { machine, messages: [StoredMessage { id, message }] }`, sized first and
 * written into one buffer (a snapshot holds every live message).
 *
 * Written by hand: codec-bench.mjs, "log: encode a snapshot" (µs per message, median,
 * 1,024 messages of 1 KiB): 0.67, the generated encoder 0.68 in the recorded run, but 0.73
 * against 3.37 and 0.99 against 4.53 in two others (the generated writer copies a growing
 * buffer, and a snapshot holds every live message).
 */
export function encodeQueueSnapshot(machine: Uint8Array, messages: ReadonlyArray<readonly [number, Uint8Array]>): Uint8Array {
  let size = bytesFieldBytes(machine.byteLength);
  const storedSizes = new Array<number>(messages.length);
  for (let i = 0; i < messages.length; i++) {
    const [id, message] = messages[i]!;
    const stored = 1 + varintBytes(id) + bytesFieldBytes(message.byteLength);
    storedSizes[i] = stored;
    size += bytesFieldBytes(stored);
  }
  const out = Buffer.allocUnsafe(size);
  let at = writeBytesField(out, 0, SNAPSHOT_MACHINE, machine);
  for (let i = 0; i < messages.length; i++) {
    const [id, message] = messages[i]!;
    out[at++] = SNAPSHOT_MESSAGES;
    at = writeVarint(out, at, storedSizes[i]!);
    out[at++] = STORED_ID;
    at = writeVarint(out, at, id);
    at = writeBytesField(out, at, STORED_MESSAGE, message);
  }
  if (at !== size) throw new Error(`queue snapshot encoded to ${at} bytes, sized ${size}`);
  return out;
}

/**
 * Decodes a snapshot. Read by the generated code: codec-bench.mjs, "log: decode a snapshot"
 * (µs per message, median, 1,024 messages of 1 KiB): 0.65, the hand-written reader it
 * replaced 0.60 (even, and a node decodes a snapshot once per restore).
 */
export function decodeQueueSnapshot(data: Uint8Array): DecodedQueueSnapshot {
  const local = readLocalSnapshot(data);
  if (local !== null) return local;
  const snapshot = pb.QueueSnapshot.decode(data);
  const messages = new Map<number, Uint8Array>();
  for (const stored of snapshot.messages) if (stored.message != null) messages.set(stored.id ?? 0, Buffer.from(stored.message));
  if (snapshot.storeId === '') return { machine: snapshot.machine, messages, refs: null };
  const messageIds = sums(snapshot.messageIdDeltas, 'message');
  const recordIds = sums(snapshot.recordIdDeltas, 'record');
  if (messageIds.length !== recordIds.length) throw new Error(`queue snapshot: ${messageIds.length} message ids but ${recordIds.length} record ids`);
  return { machine: snapshot.machine, messages, refs: { storeId: snapshot.storeId, messageIds, recordIds } };
}

/**
 * Reads a local snapshot as encodeQueueSnapshotRefs writes it (the machine, the store id, the
 * two packed delta lists), by hand: the generated decoder took ~0.8 µs a message, in a
 * node's restart with a large backlog. Returns null for anything else (a portable snapshot,
 * fields in another layout): the generated decoder reads those.
 */
function readLocalSnapshot(data: Uint8Array): DecodedQueueSnapshot | null {
  const buf = asBuffer(data);
  const cursor = { at: 0 };
  let machine: Uint8Array | null = null;
  let storeId: string | null = null;
  let messageIds: number[] | null = null;
  let recordIds: number[] | null = null;
  while (cursor.at < buf.length) {
    const tag = buf[cursor.at++]!;
    if (tag !== SNAPSHOT_MACHINE && tag !== SNAPSHOT_STORE_ID && tag !== SNAPSHOT_MESSAGE_ID_DELTAS && tag !== SNAPSHOT_RECORD_ID_DELTAS) return null;
    const length = readVarintAt(buf, cursor);
    const end = cursor.at + length;
    if (end > buf.length) throw new Error('queue snapshot: a field past the end');
    if (tag === SNAPSHOT_MACHINE) machine = buf.subarray(cursor.at, end);
    else if (tag === SNAPSHOT_STORE_ID) storeId = buf.toString('utf8', cursor.at, end);
    else {
      const sums = readDeltaSums(buf, cursor.at, end, tag === SNAPSHOT_MESSAGE_ID_DELTAS ? 'message' : 'record');
      if (tag === SNAPSHOT_MESSAGE_ID_DELTAS) messageIds = sums;
      else recordIds = sums;
    }
    cursor.at = end;
  }
  if (machine === null || storeId === null || storeId === '') return null;
  messageIds ??= [];
  recordIds ??= [];
  if (messageIds.length !== recordIds.length) throw new Error(`queue snapshot: ${messageIds.length} message ids but ${recordIds.length} record ids`);
  return { machine, messages: new Map(), refs: { storeId, messageIds, recordIds } };
}

/**
 * The running sums of the packed zigzag varint deltas in buf[from, end), each a safe
 * non-negative integer or the snapshot is corrupt. One tight loop (a restart reads a million
 * of these per queue): 1M ids in 60-90 ms, where a varint reader called per value took 210-230.
 */
function readDeltaSums(buf: Buffer, from: number, end: number, what: string): number[] {
  // A varint ends at each byte below 0x80: that many values.
  let count = 0;
  for (let at = from; at < end; at++) if (buf[at]! < 0x80) count++;
  const sums = new Array<number>(count);
  let value = 0;
  let at = from;
  for (let i = 0; i < count; i++) {
    let byte = buf[at++]!;
    let zigzagged = byte & 0x7f;
    let scale = 128;
    let bytes = 1;
    while (byte >= 0x80) {
      if (++bytes > 8) throw new Error('queue snapshot: a varint beyond 2^53');
      byte = buf[at++]!;
      zigzagged += (byte & 0x7f) * scale;
      scale *= 128;
    }
    value += zigzagged % 2 === 0 ? zigzagged / 2 : -(zigzagged + 1) / 2;
    if (!Number.isSafeInteger(value) || value < 0) throw new Error(`queue snapshot: ${what} id ${value} at position ${i}`);
    sums[i] = value;
  }
  // The last byte of the field continues a varint past its end.
  if (at !== end) throw new Error('queue snapshot: packed ids past their end');
  return sums;
}

/** A varint of up to 2^53 at `cursor.at` (moved past it). */
function readVarintAt(buf: Buffer, cursor: { at: number }): number {
  let value = 0;
  let scale = 1;
  for (let i = 0; i < 8; i++) {
    if (cursor.at >= buf.length) throw new Error('queue snapshot: a varint past the end');
    const byte = buf[cursor.at++]!;
    value += (byte & 0x7f) * scale;
    if (byte < 0x80) return value;
    scale *= 128;
  }
  throw new Error('queue snapshot: a varint beyond 2^53');
}

/** Running sums of decoded deltas, each a safe non-negative integer or the snapshot is corrupt. */
function sums(deltas: ReadonlyArray<number | { toNumber(): number }>, what: string): number[] {
  const out = new Array<number>(deltas.length);
  let value = 0;
  for (let i = 0; i < deltas.length; i++) {
    const delta = deltas[i]!;
    value += typeof delta === 'number' ? delta : delta.toNumber();
    if (!Number.isSafeInteger(value) || value < 0) throw new Error(`queue snapshot: ${what} id ${value} at position ${i}`);
    out[i] = value;
  }
  return out;
}

/**
 * The local form: `QueueSnapshot { machine, store_id, message_id_deltas, record_id_deltas }`.
 * Its size grows by a few bytes per live message, not with their bytes.
 */
export function encodeQueueSnapshotRefs(machine: Uint8Array, refs: SnapshotRefs): Uint8Array {
  const { storeId, messageIds, recordIds } = refs;
  if (messageIds.length !== recordIds.length) throw new Error(`${messageIds.length} message ids but ${recordIds.length} record ids`);
  const messageDeltas = new PackedDeltas(messageIds.length);
  const recordDeltas = new PackedDeltas(recordIds.length);
  for (let i = 0; i < messageIds.length; i++) {
    messageDeltas.push(messageIds[i]!);
    recordDeltas.push(recordIds[i]!);
  }
  return assembleQueueSnapshotRefs(machine, storeId, messageDeltas, recordDeltas);
}

/**
 * A packed `repeated sint64` of the differences between consecutive values (the first from
 * 0), written as the values come (a snapshot lists a long queue's messages a step at a time).
 */
export class PackedDeltas {
  private buf: Buffer;
  private length = 0;
  private previous = 0;
  count = 0;

  /** `expected`: about how many values come (room for them at 3 bytes each is made at once). */
  constructor(expected = 0) {
    this.buf = Buffer.allocUnsafe(Math.max(64, expected * 3));
  }

  /** Empties it, keeping its buffer (for the next snapshot). */
  reset(): void {
    this.length = 0;
    this.previous = 0;
    this.count = 0;
  }

  push(value: number): void {
    if (this.length + 10 > this.buf.length) {
      const bigger = Buffer.allocUnsafe(this.buf.length * 2);
      this.buf.copy(bigger, 0, 0, this.length);
      this.buf = bigger;
    }
    this.length = writeVarint(this.buf, this.length, zigzag(value - this.previous));
    this.previous = value;
    this.count++;
  }

  /** The packed payload (without tag and length). */
  get bytes(): Buffer {
    return this.buf.subarray(0, this.length);
  }
}

/** The local snapshot from its parts (see encodeQueueSnapshotRefs): block copies only. */
export function assembleQueueSnapshotRefs(machine: Uint8Array, storeId: string, messageIds: PackedDeltas, recordIds: PackedDeltas): Uint8Array {
  if (messageIds.count !== recordIds.count) throw new Error(`${messageIds.count} message ids but ${recordIds.count} record ids`);
  const storeIdBytes = Buffer.byteLength(storeId, 'utf8');
  const packed = (deltas: PackedDeltas): number => (deltas.count === 0 ? 0 : bytesFieldBytes(deltas.bytes.length));
  const out = Buffer.allocUnsafe(bytesFieldBytes(machine.byteLength) + bytesFieldBytes(storeIdBytes) + packed(messageIds) + packed(recordIds));
  let at = writeBytesField(out, 0, SNAPSHOT_MACHINE, machine);
  out[at++] = SNAPSHOT_STORE_ID;
  at = writeVarint(out, at, storeIdBytes);
  at += out.write(storeId, at, storeIdBytes, 'utf8');
  if (messageIds.count > 0) at = writeBytesField(out, at, SNAPSHOT_MESSAGE_ID_DELTAS, messageIds.bytes);
  if (recordIds.count > 0) at = writeBytesField(out, at, SNAPSHOT_RECORD_ID_DELTAS, recordIds.bytes);
  if (at !== out.length) throw new Error('queue snapshot size miscomputed');
  return out;
}

/** sint64's zigzag of a safe integer, without 32-bit shifts. */
function zigzag(value: number): number {
  return value >= 0 ? 2 * value : -2 * value - 1;
}
