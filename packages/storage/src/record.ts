/**
 * WAL record framing. All integers are little endian.
 *
 *   u32 length    bytes after the crc field (the "body"); validated against RECORD_BYTES_MAX
 *   u32 crc       CRC32C of the body
 *   body:
 *     u8  type    RecordType
 *     u16 groupIdLength, then groupId (UTF-8)
 *     u64 index   entry index; for a hard state its commit (< 2^53)
 *     u64 term
 *     payload     entry data; for a hard state: u64 term | u64 commit | u8 hasVote | u16 voteLength | vote
 *
 * Records are self-delimiting so a scanner can tell a torn tail (a crash while appending)
 * from corruption earlier in the file (bit rot, a lost write, a bug).
 */
import { crc32c } from '@node-rs/crc32';
import type { Entry, HardState } from '@quorumq/raft';
import { assert } from './assert.js';
import { WalRecordTooLargeError } from './errors.js';

/** Values are part of the on-disk format: never renumber. */
export const RecordType = { normalEntry: 1, configEntry: 2, hardState: 3 } as const;
export type RecordType = (typeof RecordType)[keyof typeof RecordType];

/** The length and crc fields: the only bytes the crc does not cover. */
export const RECORD_PREFIX_BYTES = 8;
const BODY_FIXED_BYTES = 1 + 2 + 8 + 8;
/** The smallest possible record (an entry with a zero-length group id and no data). */
export const RECORD_BYTES_MIN = RECORD_PREFIX_BYTES + BODY_FIXED_BYTES;
/** Part of the format: a length field above this is corruption, never a record. */
export const RECORD_BYTES_MAX = 16 * 1024 * 1024;
export const GROUP_ID_BYTES_MAX = 1024;
export const VOTE_BYTES_MAX = 1024;
const HARD_STATE_PAYLOAD_BYTES_MIN = 8 + 8 + 1 + 2;
const U32_RANGE = 2 ** 32;
/** Highest value of the top 32 bits of a u64 that keeps it below 2^53. */
const U64_HIGH_MAX = 2 ** 21 - 1;

export type WalRecord =
  | { readonly kind: 'entry'; readonly groupId: string; readonly entry: Entry }
  | { readonly kind: 'hardState'; readonly groupId: string; readonly hardState: HardState };

/**
 * The WAL records of one persist: its entries, then its hard state. Built by pushing into a
 * literal so the array is always of V8's packed kind: `entries.map` in optimised code returns
 * a holey array for a non-empty input and a packed one for an empty input (a commit-only
 * update, which a follower first meets at one operation in flight), and that second kind
 * deoptimised every function the records pass through (encodeRecords, the WAL's place and
 * flush) on every node.
 */
export function walRecordsOf(groupId: string, entries: readonly Entry[], hardState: HardState | null): WalRecord[] {
  const records: WalRecord[] = [];
  for (let i = 0; i < entries.length; i++) records.push({ kind: 'entry', groupId, entry: entries[i]! });
  if (hardState !== null) records.push({ kind: 'hardState', groupId, hardState });
  return records;
}

export interface ScannedRecord {
  readonly record: WalRecord;
  /** Byte offset of the record in its segment. */
  readonly offset: number;
  /** Encoded size including the length and crc fields. */
  readonly bytes: number;
}

/** Records encoded back to back into one buffer. */
export interface EncodedRecords {
  readonly buf: Buffer;
  /** Encoded size of each record, in order. */
  readonly sizes: readonly number[];
}

/**
 * Encodes records into one buffer from `allocate` (a fresh one by default): two passes
 * (sizes, then bytes) and no per-record allocation beyond the sizes array. Throws before
 * encoding anything if a record is invalid or too large, so a caller never queues half a
 * batch.
 */
export function encodeRecords(records: readonly WalRecord[], allocate: (bytes: number) => Buffer = Buffer.allocUnsafe): EncodedRecords {
  const sizes: number[] = new Array<number>(records.length);
  const groupBytes: number[] = new Array<number>(records.length);
  let total = 0;
  for (let i = 0; i < records.length; i++) {
    const record = records[i]!;
    const groupIdBytes = Buffer.byteLength(record.groupId, 'utf8');
    assert(groupIdBytes > 0 && groupIdBytes <= GROUP_ID_BYTES_MAX, () => `bad group id length ${groupIdBytes}`);
    const size = RECORD_PREFIX_BYTES + BODY_FIXED_BYTES + groupIdBytes + payloadBytes(record);
    if (size > RECORD_BYTES_MAX) {
      throw new WalRecordTooLargeError(`record of ${size} bytes exceeds RECORD_BYTES_MAX (${RECORD_BYTES_MAX})`);
    }
    sizes[i] = size;
    groupBytes[i] = groupIdBytes;
    total += size;
  }
  const buf = allocate(total);
  let offset = 0;
  for (let i = 0; i < records.length; i++) {
    offset = encodeRecordAt(buf, offset, records[i]!, groupBytes[i]!, sizes[i]!);
  }
  assert(offset === total, 'encoded size mismatch');
  return { buf, sizes };
}

function payloadBytes(record: WalRecord): number {
  if (record.kind === 'entry') return record.entry.data.byteLength;
  const vote = record.hardState.vote;
  const voteBytes = vote === null ? 0 : Buffer.byteLength(vote, 'utf8');
  assert(voteBytes <= VOTE_BYTES_MAX, () => `vote of ${voteBytes} bytes`);
  return HARD_STATE_PAYLOAD_BYTES_MIN + voteBytes;
}

/** Writes one record at `start`; returns the offset just past it. */
function encodeRecordAt(buf: Buffer, start: number, record: WalRecord, groupIdBytes: number, size: number): number {
  const end = start + size;
  let at = start + RECORD_PREFIX_BYTES;
  buf.writeUInt8(recordTypeOf(record), at);
  buf.writeUInt16LE(groupIdBytes, at + 1);
  at += 3;
  at += buf.write(record.groupId, at, groupIdBytes, 'utf8');
  if (record.kind === 'entry') {
    const { entry } = record;
    assert(entry.index >= 1, () => `entry index ${entry.index} < 1`);
    at = writeU64(buf, at, entry.index);
    at = writeU64(buf, at, entry.term);
    buf.set(entry.data, at);
  } else {
    const { hardState } = record;
    at = writeU64(buf, at, hardState.commit);
    at = writeU64(buf, at, hardState.term);
    at = writeU64(buf, at, hardState.term);
    at = writeU64(buf, at, hardState.commit);
    buf.writeUInt8(hardState.vote === null ? 0 : 1, at);
    const voteBytes = end - (at + 3);
    buf.writeUInt16LE(voteBytes, at + 1);
    if (hardState.vote !== null) buf.write(hardState.vote, at + 3, voteBytes, 'utf8');
  }
  buf.writeUInt32LE(size - RECORD_PREFIX_BYTES, start);
  buf.writeUInt32LE(crc32c(buf.subarray(start + RECORD_PREFIX_BYTES, end)), start + 4);
  return end;
}

function recordTypeOf(record: WalRecord): RecordType {
  if (record.kind === 'hardState') return RecordType.hardState;
  return record.entry.type === 'config' ? RecordType.configEntry : RecordType.normalEntry;
}

function writeU64(buf: Buffer, at: number, value: number): number {
  assert(Number.isSafeInteger(value) && value >= 0, () => `u64 field out of range: ${value}`);
  buf.writeUInt32LE(value >>> 0, at);
  buf.writeUInt32LE(Math.floor(value / U32_RANGE), at + 4);
  return at + 8;
}

/** The value, or -1 if it is not below 2^53 (which we never write). */
function readU64(buf: Buffer, at: number): number {
  const high = buf.readUInt32LE(at + 4);
  if (high > U64_HIGH_MAX) return -1;
  return high * U32_RANGE + buf.readUInt32LE(at);
}

// ------------------------------------------------------------------------------ scanning

/**
 * clean: every byte belongs to a valid record.
 * torn: the last segment ends in a partial append (a crash before datasync returned);
 *   `validBytes` is where to truncate.
 * corrupt: a bad record that cannot be explained by a torn append; never skip it.
 */
export type ScanStatus = 'clean' | 'torn' | 'corrupt';

export interface SegmentScan {
  readonly records: ScannedRecord[];
  /** Length of the prefix made of valid records. */
  readonly validBytes: number;
  readonly status: ScanStatus;
  /** Why the scan stopped at `validBytes` (null when clean). */
  readonly reason: string | null;
}

/**
 * Decodes the records of one segment. Only the last segment may have a torn tail: the
 * WAL makes a segment durable before it creates the next one. In the last segment these
 * are a torn tail: fewer bytes left than the smallest record; a length running past the
 * end of file; a zero-filled rest of file; a crc mismatch on a record ending exactly at
 * the end of file. Anything else (any other crc mismatch, a length outside the format's
 * bounds, a well-checksummed record that does not parse) is corruption. One refinement:
 * a length running past the end of file is corruption, not a tear, if a checksummed record
 * starts after it (the length field was damaged; the records after it were acknowledged).
 */
export function scanSegment(bytes: Uint8Array, isLastSegment: boolean): SegmentScan {
  const buf = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const records: ScannedRecord[] = [];
  const stop = (offset: number, torn: boolean, reason: string): SegmentScan => ({
    records,
    validBytes: offset,
    status: torn && isLastSegment ? 'torn' : 'corrupt',
    reason,
  });
  let offset = 0;
  while (offset < buf.length) {
    const remaining = buf.length - offset;
    if (remaining < RECORD_BYTES_MIN) return stop(offset, true, `${remaining} trailing bytes, less than a record`);
    const length = buf.readUInt32LE(offset);
    if (length === 0 && isZero(buf, offset)) return stop(offset, true, `zero-filled tail of ${remaining} bytes`);
    const size = RECORD_PREFIX_BYTES + length;
    if (size < RECORD_BYTES_MIN || size > RECORD_BYTES_MAX) return stop(offset, false, `bad record length ${length}`);
    if (size > remaining) {
      // A torn append, unless the length field itself is damaged: then a valid record
      // (acknowledged data) follows, and cutting the tail would silently lose it.
      const next = findRecordAfter(buf, offset + 1);
      if (next < 0) return stop(offset, true, `record of ${size} bytes runs past end of file`);
      return stop(offset, false, `record length ${length} runs past end of file but a valid record starts at ${next}`);
    }
    const end = offset + size;
    if (buf.readUInt32LE(offset + 4) !== crc32c(buf.subarray(offset + RECORD_PREFIX_BYTES, end))) {
      return stop(offset, end === buf.length, 'checksum mismatch');
    }
    const record = decodeBody(buf, offset + RECORD_PREFIX_BYTES, end);
    if (typeof record === 'string') return stop(offset, false, `checksummed record does not parse: ${record}`);
    records.push({ record, offset, bytes: size });
    offset = end;
  }
  return { records, validBytes: offset, status: 'clean', reason: null };
}

/** Offset of the first checksummed record starting at or after `from`, or -1. */
function findRecordAfter(buf: Buffer, from: number): number {
  for (let offset = from; offset + RECORD_BYTES_MIN <= buf.length; offset++) {
    const size = RECORD_PREFIX_BYTES + buf.readUInt32LE(offset);
    if (size < RECORD_BYTES_MIN || size > RECORD_BYTES_MAX || offset + size > buf.length) continue;
    if (buf.readUInt32LE(offset + 4) === crc32c(buf.subarray(offset + RECORD_PREFIX_BYTES, offset + size))) return offset;
  }
  return -1;
}

function isZero(buf: Buffer, from: number): boolean {
  for (let i = from; i < buf.length; i++) if (buf[i] !== 0) return false;
  return true;
}

/** The record in buf[start, end), or why it does not parse. */
function decodeBody(buf: Buffer, start: number, end: number): WalRecord | string {
  const type = buf.readUInt8(start);
  const groupIdBytes = buf.readUInt16LE(start + 1);
  if (groupIdBytes === 0 || groupIdBytes > GROUP_ID_BYTES_MAX) return `group id length ${groupIdBytes}`;
  const groupEnd = start + 3 + groupIdBytes;
  if (groupEnd + 16 > end) return 'group id runs past the record';
  const groupId = buf.toString('utf8', start + 3, groupEnd);
  const index = readU64(buf, groupEnd);
  const term = readU64(buf, groupEnd + 8);
  if (index < 0 || term < 0) return 'index or term >= 2^53';
  const payloadStart = groupEnd + 16;
  const payload = new Uint8Array(buf.buffer, buf.byteOffset + payloadStart, end - payloadStart);
  switch (type) {
    case RecordType.normalEntry:
    case RecordType.configEntry: {
      if (index < 1) return 'entry index 0';
      const entryType = type === RecordType.configEntry ? 'config' : 'normal';
      return { kind: 'entry', groupId, entry: { index, term, type: entryType, data: payload } };
    }
    case RecordType.hardState: {
      const hardState = decodeHardState(buf, payloadStart, end);
      if (typeof hardState === 'string') return hardState;
      if (hardState.term !== term || hardState.commit !== index) return 'hard state header disagrees with payload';
      return { kind: 'hardState', groupId, hardState };
    }
    default:
      return `unknown record type ${type}`;
  }
}

function decodeHardState(buf: Buffer, start: number, end: number): HardState | string {
  if (end - start < HARD_STATE_PAYLOAD_BYTES_MIN) return 'hard state payload too short';
  const term = readU64(buf, start);
  const commit = readU64(buf, start + 8);
  if (term < 0 || commit < 0) return 'hard state term or commit >= 2^53';
  const hasVote = buf.readUInt8(start + 16);
  const voteBytes = buf.readUInt16LE(start + 17);
  if (hasVote > 1 || (hasVote === 0 && voteBytes !== 0)) return 'bad vote flag';
  if (start + HARD_STATE_PAYLOAD_BYTES_MIN + voteBytes !== end) return 'vote length disagrees with record length';
  const vote = hasVote === 1 ? buf.toString('utf8', start + HARD_STATE_PAYLOAD_BYTES_MIN, end) : null;
  return { term, vote, commit };
}
