/**
 * The Raft core's messages on the wire (proto/quorumq/v1/raft.proto), one RaftBatch per
 * peer per event-loop turn.
 */
import { GRPC_FRAME_HEADER_BYTES } from '@quorumq/proto/grpc-frames';
import { bytesFieldBytes, handTags, quorumq, stringFieldBytes, varintBytes, writeStringField, writeVarint } from '@quorumq/proto';
import type { ClusterConfig, Entry, Message, SnapshotMeta } from '@quorumq/raft';

import pb = quorumq.v1;

export interface GroupMessage {
  readonly groupId: string;
  readonly message: Message;
}

const EMPTY = new Uint8Array(0);

function entryToWire(entry: Entry): pb.Entry.$Properties {
  return {
    index: entry.index,
    term: entry.term,
    type: entry.type === 'config' ? pb.EntryType.ENTRY_TYPE_CONFIG : pb.EntryType.ENTRY_TYPE_NORMAL,
    data: entry.data,
  };
}

function entryFromWire(entry: pb.Entry.$Properties): Entry {
  return {
    index: entry.index ?? 0,
    term: entry.term ?? 0,
    type: entry.type === pb.EntryType.ENTRY_TYPE_CONFIG ? 'config' : 'normal',
    data: entry.data ?? EMPTY,
  };
}

function configFromWire(config: pb.ClusterConfig.$Properties | null | undefined): ClusterConfig {
  return { voters: [...(config?.voters ?? [])], learners: [...(config?.learners ?? [])] };
}

function metaFromWire(meta: pb.SnapshotMeta.$Properties | null | undefined): SnapshotMeta {
  return { index: meta?.index ?? 0, term: meta?.term ?? 0, config: configFromWire(meta?.config) };
}

export function messageToWire(groupId: string, message: Message): pb.RaftMessage.$Properties {
  const envelope = { groupId, from: message.from, to: message.to, term: message.term };
  switch (message.type) {
    case 'preVote':
      return { ...envelope, preVote: { lastLogIndex: message.lastLogIndex, lastLogTerm: message.lastLogTerm } };
    case 'preVoteResp':
      return { ...envelope, preVoteResponse: { reject: message.reject } };
    case 'vote':
      return {
        ...envelope,
        vote: { lastLogIndex: message.lastLogIndex, lastLogTerm: message.lastLogTerm, leaderTransfer: message.leaderTransfer },
      };
    case 'voteResp':
      return { ...envelope, voteResponse: { reject: message.reject } };
    case 'append':
      return {
        ...envelope,
        append: {
          prevLogIndex: message.prevLogIndex,
          prevLogTerm: message.prevLogTerm,
          entries: message.entries.map(entryToWire),
          commit: message.commit,
        },
      };
    case 'appendResp':
      return {
        ...envelope,
        appendResponse: { reject: message.reject, index: message.index, hintIndex: message.hintIndex, hintTerm: message.hintTerm },
      };
    case 'heartbeat':
      return { ...envelope, heartbeat: { commit: message.commit, readSeq: message.readSeq, quiesce: message.quiesce } };
    case 'heartbeatResp':
      return { ...envelope, heartbeatResponse: { readSeq: message.readSeq, wake: message.wake } };
    case 'snapshot':
      return {
        ...envelope,
        snapshot: {
          meta: {
            index: message.meta.index,
            term: message.meta.term,
            config: { voters: [...message.meta.config.voters], learners: [...message.meta.config.learners] },
          },
          offset: message.offset,
          totalBytes: message.totalBytes,
          chunk: message.chunk,
          done: message.done,
        },
      };
    case 'snapshotResp':
      return {
        ...envelope,
        snapshotResponse: { snapshotIndex: message.snapshotIndex, nextOffset: message.nextOffset, reject: message.reject },
      };
    case 'timeoutNow':
      return { ...envelope, timeoutNow: {} };
  }
}

/**
 * Decodes one wire message; null for a message of a kind this node does not know, without
 * a sender, or with a term, index, offset or size that is not a safe integer (a uint64 past
 * 2^53 decodes to an inexact number, which the Raft core must never see).
 */
export function messageFromWire(wire: pb.RaftMessage): GroupMessage | null {
  if (!wire.from || !wire.to) return null;
  const decoded = decodeBody(wire);
  return decoded !== null && numbersAreSafe(decoded.message) ? decoded : null;
}

const isSafeCount = (value: number): boolean => Number.isSafeInteger(value) && value >= 0;

function numbersAreSafe(message: Message): boolean {
  // Every number field of every kind (a for..in over own enumerable keys, as Object.values,
  // without the array it builds for each message).
  const fields = message as unknown as Record<string, unknown>;
  for (const key in fields) {
    const value = fields[key];
    if (typeof value === 'number' && !isSafeCount(value)) return false;
  }
  if (message.type === 'append') {
    for (const entry of message.entries) if (!isSafeCount(entry.index) || !isSafeCount(entry.term)) return false;
    return true;
  }
  if (message.type === 'snapshot') return isSafeCount(message.meta.index) && isSafeCount(message.meta.term);
  return true;
}

function decodeBody(wire: pb.RaftMessage): GroupMessage | null {
  // Each kind is built as one literal (from, to, term, type, then its fields): a spread of a
  // shared envelope made the same kind's objects differ in shape, and cost an allocation more.
  const groupId = wire.groupId;
  const from = wire.from;
  const to = wire.to;
  const term = wire.term;
  let message: Message;
  switch (wire.body) {
    case 'preVote':
      message = { from, to, term, type: 'preVote', lastLogIndex: wire.preVote?.lastLogIndex ?? 0, lastLogTerm: wire.preVote?.lastLogTerm ?? 0 };
      break;
    case 'preVoteResponse':
      message = { from, to, term, type: 'preVoteResp', reject: wire.preVoteResponse?.reject ?? false };
      break;
    case 'vote':
      message = {
        from,
        to,
        term,
        type: 'vote',
        lastLogIndex: wire.vote?.lastLogIndex ?? 0,
        lastLogTerm: wire.vote?.lastLogTerm ?? 0,
        leaderTransfer: wire.vote?.leaderTransfer ?? false,
      };
      break;
    case 'voteResponse':
      message = { from, to, term, type: 'voteResp', reject: wire.voteResponse?.reject ?? false };
      break;
    case 'append': {
      const a = wire.append;
      const entries = a?.entries ?? [];
      const converted = new Array<Entry>(entries.length);
      for (let i = 0; i < entries.length; i++) converted[i] = entryFromWire(entries[i]!);
      message = { from, to, term, type: 'append', prevLogIndex: a?.prevLogIndex ?? 0, prevLogTerm: a?.prevLogTerm ?? 0, entries: converted, commit: a?.commit ?? 0 };
      break;
    }
    case 'appendResponse': {
      const r = wire.appendResponse;
      message = { from, to, term, type: 'appendResp', reject: r?.reject ?? false, index: r?.index ?? 0, hintIndex: r?.hintIndex ?? 0, hintTerm: r?.hintTerm ?? 0 };
      break;
    }
    case 'heartbeat':
      message = { from, to, term, type: 'heartbeat', commit: wire.heartbeat?.commit ?? 0, readSeq: wire.heartbeat?.readSeq ?? 0, quiesce: wire.heartbeat?.quiesce === true };
      break;
    case 'heartbeatResponse':
      message = { from, to, term, type: 'heartbeatResp', readSeq: wire.heartbeatResponse?.readSeq ?? 0, wake: wire.heartbeatResponse?.wake === true };
      break;
    case 'snapshot': {
      const c = wire.snapshot;
      message = {
        from,
        to,
        term,
        type: 'snapshot',
        meta: metaFromWire(c?.meta),
        offset: c?.offset ?? 0,
        totalBytes: c?.totalBytes ?? 0,
        chunk: c?.chunk ?? EMPTY,
        done: c?.done ?? false,
      };
      break;
    }
    case 'snapshotResponse': {
      const r = wire.snapshotResponse;
      message = { from, to, term, type: 'snapshotResp', snapshotIndex: r?.snapshotIndex ?? 0, nextOffset: r?.nextOffset ?? 0, reject: r?.reject ?? false };
      break;
    }
    case 'timeoutNow':
      message = { from, to, term, type: 'timeoutNow' };
      break;
    default:
      return null;
  }
  return { groupId, message };
}

// ------------------------------------------------------------------------------------
// RaftBatch, written by hand: appends carry the entries' bytes, copied once into the batch.
// codec-bench.mjs, "raft: encode an append" (µs per entry of 66 KiB, median): 13.5, the
// generated encoder 79.

const BATCH_MESSAGE = handTags.RaftBatch.messages;
const MESSAGE_GROUP = handTags.RaftMessage.groupId;
const MESSAGE_FROM = handTags.RaftMessage.from;
const MESSAGE_TO = handTags.RaftMessage.to;
const MESSAGE_TERM = handTags.RaftMessage.term;
const MESSAGE_APPEND = handTags.RaftMessage.append;
const APPEND_PREV_INDEX = handTags.Append.prevLogIndex;
const APPEND_PREV_TERM = handTags.Append.prevLogTerm;
const APPEND_ENTRY = handTags.Append.entries;
const APPEND_COMMIT = handTags.Append.commit;
const MESSAGE_APPEND_RESPONSE = handTags.RaftMessage.appendResponse;
const RESPONSE_REJECT = handTags.AppendResponse.reject;
const RESPONSE_INDEX = handTags.AppendResponse.index;
const RESPONSE_HINT_INDEX = handTags.AppendResponse.hintIndex;
const RESPONSE_HINT_TERM = handTags.AppendResponse.hintTerm;
const ENTRY_INDEX = handTags.Entry.index;
const ENTRY_TERM = handTags.Entry.term;
const ENTRY_TYPE = handTags.Entry.type;
const ENTRY_DATA = handTags.Entry.data;

function entryBytes(entry: Entry): number {
  const data = entry.data.byteLength === 0 ? 0 : bytesFieldBytes(entry.data.byteLength);
  return 1 + varintBytes(entry.index) + 1 + varintBytes(entry.term) + (entry.type === 'config' ? 2 : 0) + data;
}

type Append = Extract<Message, { type: 'append' }>;
type AppendResp = Extract<Message, { type: 'appendResp' }>;

/** A varint field's bytes when it is written (not zero, as the generated encoder omits zeros). */
const optionalVarintBytes = (value: number): number => (value === 0 ? 0 : 1 + varintBytes(value));

/** An AppendResponse's bytes, as the generated encoder writes it (defaults omitted). */
function appendRespBodyBytes(message: AppendResp): number {
  return (message.reject ? 2 : 0) + optionalVarintBytes(message.index) + optionalVarintBytes(message.hintIndex) + optionalVarintBytes(message.hintTerm);
}

/**
 * Encodes everything queued for one peer as a RaftBatch. An append is sized and written
 * field by field into the one output buffer; other messages go through the generated code.
 */
export function encodeRaftBatch(messages: readonly GroupMessage[], framed = false): Buffer {
  const parts: Array<Uint8Array | null> = new Array(messages.length);
  const sizes: number[] = new Array(messages.length);
  const appendSizes: number[] = new Array(messages.length);
  let total = 0;
  for (let i = 0; i < messages.length; i++) {
    const { groupId, message } = messages[i]!;
    let size: number;
    if (message.type === 'append') {
      let append = 1 + varintBytes(message.prevLogIndex) + 1 + varintBytes(message.prevLogTerm) + 1 + varintBytes(message.commit);
      for (const entry of message.entries) append += bytesFieldBytes(entryBytes(entry));
      appendSizes[i] = append;
      size =
        stringFieldBytes(groupId) +
        stringFieldBytes(message.from) +
        stringFieldBytes(message.to) +
        1 +
        varintBytes(message.term) +
        bytesFieldBytes(append);
      parts[i] = null;
    } else if (message.type === 'appendResp') {
      // A follower's answer to every append: written by hand too, byte for byte the
      // generated encoder's (raft-codec.test.ts), without its objects.
      const body = appendRespBodyBytes(message);
      appendSizes[i] = body;
      size =
        stringFieldBytes(groupId) +
        stringFieldBytes(message.from) +
        stringFieldBytes(message.to) +
        optionalVarintBytes(message.term) +
        bytesFieldBytes(body);
      parts[i] = null;
    } else {
      const bytes = pb.RaftMessage.encode(messageToWire(groupId, message)).finish();
      parts[i] = bytes;
      size = bytes.byteLength;
    }
    sizes[i] = size;
    total += bytesFieldBytes(size);
  }
  const head = framed ? GRPC_FRAME_HEADER_BYTES : 0;
  const out = Buffer.allocUnsafe(head + total);
  let at = head;
  if (framed) {
    out[0] = 0;
    out.writeUInt32BE(total, 1);
  }
  for (let i = 0; i < messages.length; i++) {
    out[at++] = BATCH_MESSAGE;
    at = writeVarint(out, at, sizes[i]!);
    const part = parts[i];
    if (part !== null && part !== undefined) {
      out.set(part, at);
      at += part.byteLength;
      continue;
    }
    const { groupId, message } = messages[i]!;
    at =
      message.type === 'appendResp'
        ? writeAppendResp(out, at, groupId, message, appendSizes[i]!)
        : writeAppend(out, at, groupId, message as Append, appendSizes[i]!);
  }
  if (at !== head + total) throw new Error(`raft batch encoded to ${at - head} bytes, sized ${total}`);
  return out;
}

function writeOptionalVarint(out: Buffer, at: number, tag: number, value: number): number {
  if (value === 0) return at;
  out[at++] = tag;
  return writeVarint(out, at, value);
}

function writeAppendResp(out: Buffer, at: number, groupId: string, message: AppendResp, bodySize: number): number {
  at = writeStringField(out, at, MESSAGE_GROUP, groupId);
  at = writeStringField(out, at, MESSAGE_FROM, message.from);
  at = writeStringField(out, at, MESSAGE_TO, message.to);
  at = writeOptionalVarint(out, at, MESSAGE_TERM, message.term);
  out[at++] = MESSAGE_APPEND_RESPONSE;
  at = writeVarint(out, at, bodySize);
  if (message.reject) {
    out[at++] = RESPONSE_REJECT;
    out[at++] = 1;
  }
  at = writeOptionalVarint(out, at, RESPONSE_INDEX, message.index);
  at = writeOptionalVarint(out, at, RESPONSE_HINT_INDEX, message.hintIndex);
  return writeOptionalVarint(out, at, RESPONSE_HINT_TERM, message.hintTerm);
}

function writeAppend(out: Buffer, at: number, groupId: string, message: Append, appendSize: number): number {
  at = writeStringField(out, at, MESSAGE_GROUP, groupId);
  at = writeStringField(out, at, MESSAGE_FROM, message.from);
  at = writeStringField(out, at, MESSAGE_TO, message.to);
  out[at++] = MESSAGE_TERM;
  at = writeVarint(out, at, message.term);
  out[at++] = MESSAGE_APPEND;
  at = writeVarint(out, at, appendSize);
  out[at++] = APPEND_PREV_INDEX;
  at = writeVarint(out, at, message.prevLogIndex);
  out[at++] = APPEND_PREV_TERM;
  at = writeVarint(out, at, message.prevLogTerm);
  for (const entry of message.entries) {
    out[at++] = APPEND_ENTRY;
    at = writeVarint(out, at, entryBytes(entry));
    out[at++] = ENTRY_INDEX;
    at = writeVarint(out, at, entry.index);
    out[at++] = ENTRY_TERM;
    at = writeVarint(out, at, entry.term);
    if (entry.type === 'config') {
      out[at++] = ENTRY_TYPE;
      out[at++] = pb.EntryType.ENTRY_TYPE_CONFIG;
    }
    if (entry.data.byteLength > 0) {
      out[at++] = ENTRY_DATA;
      at = writeVarint(out, at, entry.data.byteLength);
      out.set(entry.data, at);
      at += entry.data.byteLength;
    }
  }
  out[at++] = APPEND_COMMIT;
  return writeVarint(out, at, message.commit);
}

/**
 * A RaftBatch stays well under gRPC's message limit (64 MiB on both ends, transport.ts and
 * server.ts): a leader catching a follower up emits up to 64 appends of 4 MiB in one turn,
 * and one batch of them all was refused by gRPC, which closed the stream and dropped the
 * batch, again at each retry.
 */
/** The largest Raft stream message a node reads (grpc-js's receive limit on the peer listener before). */
export const RAFT_STREAM_BYTES_MAX = 64 * 1024 * 1024;

/** gRPC's length prefix of a message on the wire: a compressed flag and a 4-byte big-endian length. */
export { GRPC_FRAME_HEADER_BYTES };

export const RAFT_BATCH_BYTES_MAX = 16 * 1024 * 1024;

/** A message's bytes on the wire, about (its payload plus a fixed allowance for the rest). */
function approximateBytes(message: Message): number {
  let bytes = 128 + message.from.length + message.to.length;
  if (message.type === 'append') for (const entry of message.entries) bytes += entry.data.byteLength + 32;
  else if (message.type === 'snapshot') bytes += message.chunk.byteLength + 64;
  return bytes;
}

/** One peer's messages of a turn as consecutive batches of at most about `bytesMax` (a larger message alone), in order. */
export function raftBatchChunks(messages: readonly GroupMessage[], bytesMax = RAFT_BATCH_BYTES_MAX): GroupMessage[][] {
  const chunks: GroupMessage[][] = [];
  let current: GroupMessage[] = [];
  let bytes = 0;
  for (const item of messages) {
    const size = approximateBytes(item.message) + item.groupId.length;
    if (current.length > 0 && bytes + size > bytesMax) {
      chunks.push(current);
      current = [];
      bytes = 0;
    }
    current.push(item);
    bytes += size;
  }
  if (current.length > 0) chunks.push(current);
  return chunks;
}

// ------------------------------------------------------------------------------------
// RaftBatch, read by hand: the peer stream's requests. Appends and append responses, the
// messages of every operation, are read straight into the Raft core's messages when they are
// laid out as this node's writer lays them out (every field once, in field order, names in
// ASCII, numbers exact); anything else, and every other kind, goes through the generated
// decoder, which reads whatever protobuf allows. Both give the same messages (tests).

/** One message of a RaftBatch as read: the sender and addressee it names ('' when none), and the message (null: refused, see messageFromWire). */
export interface WireMessage {
  readonly from: string;
  readonly to: string;
  readonly decoded: GroupMessage | null;
}

const RESPONSE_FIELDS = [RESPONSE_REJECT, RESPONSE_INDEX, RESPONSE_HINT_INDEX, RESPONSE_HINT_TERM] as const;

/** Where the hand reader is in the bytes; -1 in `at` once the layout is not one it reads. */
class HandReader {
  at: number;
  value = 0;
  constructor(
    readonly buf: Buffer,
    start: number,
  ) {
    this.at = start;
  }

  /** Reads a varint of at most 8 bytes and at most 2^53 - 1 into `value`; false if longer, larger or past `end`. */
  varint(end: number): boolean {
    const buf = this.buf;
    let at = this.at;
    let value = 0;
    let scale = 1;
    for (let i = 0; i < 8; i++) {
      if (at >= end) return false;
      const b = buf[at++]!;
      value += (b & 127) * scale;
      if (b < 128) {
        if (value > Number.MAX_SAFE_INTEGER) return false;
        this.at = at;
        this.value = value;
        return true;
      }
      scale *= 128;
    }
    return false;
  }

  /** Reads the varint field `tag` if it comes next (`value` 0 if it does not); false if it is there but unreadable. */
  optionalVarint(tag: number, end: number): boolean {
    if (this.at >= end || this.buf[this.at] !== tag) {
      this.value = 0;
      return true;
    }
    this.at += 1;
    return this.varint(end);
  }

  /** The ASCII string field `tag` if it comes next ('' if it does not); null if it is there but not ASCII or runs past `end`. */
  optionalAscii(tag: number, end: number): string | null {
    if (this.at >= end || this.buf[this.at] !== tag) return '';
    this.at += 1;
    return this.ascii(end);
  }

  /** An ASCII string field's text (after its tag); null when it is not ASCII or runs past `end`. */
  ascii(end: number): string | null {
    if (!this.varint(end)) return null;
    const start = this.at;
    const stop = start + this.value;
    if (stop > end) return null;
    const buf = this.buf;
    for (let i = start; i < stop; i++) if (buf[i]! >= 128) return null;
    this.at = stop;
    return buf.toString('latin1', start, stop);
  }
}

/** Reads a RaftBatch (the peer stream's request). Throws, as the generated decoder does, for bytes that are no RaftBatch. */
export function decodeRaftBatch(bytes: Buffer): WireMessage[] {
  const out: WireMessage[] = [];
  const len = bytes.byteLength;
  const reader = new HandReader(bytes, 0);
  while (reader.at < len) {
    if (bytes[reader.at] !== BATCH_MESSAGE) return generatedBatch(bytes);
    reader.at += 1;
    if (!reader.varint(len)) return generatedBatch(bytes);
    const start = reader.at;
    const end = start + reader.value;
    if (end > len) return generatedBatch(bytes);
    out.push(readHandMessage(bytes, start, end) ?? generatedMessage(bytes.subarray(start, end)));
    reader.at = end;
  }
  return out;
}

function generatedBatch(bytes: Buffer): WireMessage[] {
  return pb.RaftBatch.decode(bytes).messages.map((wire) => wireMessage(wire as pb.RaftMessage));
}

function generatedMessage(bytes: Buffer): WireMessage {
  return wireMessage(pb.RaftMessage.decode(bytes));
}

function wireMessage(wire: pb.RaftMessage): WireMessage {
  return { from: wire.from ?? '', to: wire.to ?? '', decoded: messageFromWire(wire) };
}

/** An append or an append response laid out as encodeRaftBatch writes it; undefined for anything else. */
function readHandMessage(buf: Buffer, start: number, end: number): WireMessage | undefined {
  const r = new HandReader(buf, start);
  const groupId = r.optionalAscii(MESSAGE_GROUP, end);
  const from = r.optionalAscii(MESSAGE_FROM, end);
  const to = r.optionalAscii(MESSAGE_TO, end);
  // No group, sender or addressee: the generated decoder's way (a field left out, not '').
  if (groupId === null || from === null || to === null || groupId === '' || from === '' || to === '') return undefined;
  if (!r.optionalVarint(MESSAGE_TERM, end) || r.at >= end) return undefined;
  const term = r.value;
  const body = buf[r.at++];
  if (body !== MESSAGE_APPEND && body !== MESSAGE_APPEND_RESPONSE) return undefined;
  if (!r.varint(end)) return undefined;
  const bodyEnd = r.at + r.value;
  if (bodyEnd !== end) return undefined;
  let message: Message | undefined;
  if (body === MESSAGE_APPEND_RESPONSE) {
    const values = [0, 0, 0, 0];
    let field = 0;
    while (r.at < end) {
      const tag = buf[r.at++]!;
      while (field < 4 && RESPONSE_FIELDS[field] !== tag) field += 1;
      if (field === 4 || !r.varint(end)) return undefined;
      values[field++] = r.value;
    }
    message = { from, to, term, type: 'appendResp', reject: values[0] !== 0, index: values[1]!, hintIndex: values[2]!, hintTerm: values[3]! };
  } else {
    message = readHandAppend(r, end, from, to, term);
    if (message === undefined) return undefined;
  }
  return { from, to, decoded: { groupId, message } };
}

function readHandAppend(r: HandReader, end: number, from: string, to: string, term: number): Message | undefined {
  const buf = r.buf;
  if (!r.optionalVarint(APPEND_PREV_INDEX, end)) return undefined;
  const prevLogIndex = r.value;
  if (!r.optionalVarint(APPEND_PREV_TERM, end)) return undefined;
  const prevLogTerm = r.value;
  const entries: Entry[] = [];
  while (r.at < end && buf[r.at] === APPEND_ENTRY) {
    r.at += 1;
    if (!r.varint(end)) return undefined;
    const entryEnd = r.at + r.value;
    if (entryEnd > end) return undefined;
    const entry = readHandEntry(r, entryEnd);
    if (entry === undefined) return undefined;
    entries.push(entry);
  }
  if (!r.optionalVarint(APPEND_COMMIT, end) || r.at !== end) return undefined;
  return { from, to, term, type: 'append', prevLogIndex, prevLogTerm, entries, commit: r.value };
}

function readHandEntry(r: HandReader, end: number): Entry | undefined {
  const buf = r.buf;
  if (!r.optionalVarint(ENTRY_INDEX, end)) return undefined;
  const index = r.value;
  if (!r.optionalVarint(ENTRY_TERM, end)) return undefined;
  const term = r.value;
  if (!r.optionalVarint(ENTRY_TYPE, end)) return undefined;
  const type: Entry['type'] = r.value === pb.EntryType.ENTRY_TYPE_CONFIG ? 'config' : 'normal';
  let data: Uint8Array = EMPTY;
  if (r.at < end && buf[r.at] === ENTRY_DATA) {
    r.at += 1;
    if (!r.varint(end)) return undefined;
    const stop = r.at + r.value;
    if (stop > end) return undefined;
    // A view of the batch, as the generated decoder's bytes are.
    if (stop > r.at) data = buf.subarray(r.at, stop);
    r.at = stop;
  }
  if (r.at !== end) return undefined;
  return { index, term, type, data };
}
