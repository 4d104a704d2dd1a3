/**
 * The message store's segment files (`NNNNNNNN.seg`). All integers little endian.
 *
 *   header (SEGMENT_HEADER_BYTES = 24):
 *     u32 magic "QQMS" | u16 format version (1) | u16 zero | u32 segment number |
 *     f64 recordIdFloor | u32 crc32c(the 20 bytes before it)
 *   then frames, back to back:
 *     u32 length    bytes after the crc field (8 + message bytes)
 *     u32 crc       crc32c of the body
 *     body:
 *       f64 recordId  an integer in [1, 2^53)
 *       message bytes
 *
 * `recordIdFloor`: every record id handed out before the segment was created is below it.
 * The newest segment file always exists (the store never deletes the one it writes), so at
 * open `max(floor of every segment, largest record id found + 1)` is above every id ever
 * handed out, even ids whose records were released and whose files were deleted: a record
 * id is never reused, so a stale snapshot can never adopt somebody else's message.
 *
 * A frame is self-describing (its record id and crc), so a scan can skip a damaged frame and
 * keep the ones after it: unlike the WAL, the records of a message store do not depend on
 * each other, and every one saved is a message not lost.
 */
import { crc32c } from '@node-rs/crc32';
import { assert } from '../assert.js';
import { SegmentRecords } from './segment-records.js';

export const SEGMENT_HEADER_BYTES = 24;
/** The length and crc fields. */
export const FRAME_PREFIX_BYTES = 8;
/** What a frame adds to its message: the length and crc fields and the record id. */
export const FRAME_OVERHEAD_BYTES = FRAME_PREFIX_BYTES + 8;
/** Part of the format: a longer message is refused by `put`, and a longer length field is damage. */
export const STORE_MESSAGE_BYTES_MAX = 128 * 1024 * 1024;
/** Record ids are integers below 2^53 stored as f64; 0 is never an id. */
export const RECORD_ID_MAX = Number.MAX_SAFE_INTEGER;

const SEGMENT_MAGIC = 0x534d5151; // "QQMS" read as a little-endian u32
const SEGMENT_FORMAT_VERSION = 1;
const HEADER_CRC_OFFSET = 20;

export interface SegmentHeader {
  readonly segment: number;
  readonly recordIdFloor: number;
}

export function encodeSegmentHeader(header: SegmentHeader): Uint8Array {
  assert(Number.isSafeInteger(header.recordIdFloor) && header.recordIdFloor >= 1, () => `bad record id floor ${header.recordIdFloor}`);
  const buf = Buffer.alloc(SEGMENT_HEADER_BYTES);
  buf.writeUInt32LE(SEGMENT_MAGIC, 0);
  buf.writeUInt16LE(SEGMENT_FORMAT_VERSION, 4);
  buf.writeUInt32LE(header.segment, 8);
  buf.writeDoubleLE(header.recordIdFloor, 12);
  buf.writeUInt32LE(crc32c(buf.subarray(0, HEADER_CRC_OFFSET)), HEADER_CRC_OFFSET);
  return buf;
}

/** The header, or why the first bytes of a segment file are not one. */
export function decodeSegmentHeader(bytes: Uint8Array, segment: number): SegmentHeader | string {
  if (bytes.byteLength < SEGMENT_HEADER_BYTES) return `${bytes.byteLength} bytes, shorter than a segment header`;
  const buf = asBuffer(bytes);
  if (buf.readUInt32LE(HEADER_CRC_OFFSET) !== crc32c(buf.subarray(0, HEADER_CRC_OFFSET))) return 'segment header checksum mismatch';
  if (buf.readUInt32LE(0) !== SEGMENT_MAGIC) return 'not a message store segment (bad magic)';
  const version = buf.readUInt16LE(4);
  if (version !== SEGMENT_FORMAT_VERSION) return `segment format version ${version}, expected ${SEGMENT_FORMAT_VERSION}`;
  const inFile = buf.readUInt32LE(8);
  if (inFile !== segment) return `header names segment ${inFile}`;
  const recordIdFloor = buf.readDoubleLE(12);
  if (!isRecordId(recordIdFloor)) return `bad record id floor ${recordIdFloor}`;
  return { segment, recordIdFloor };
}

/** Writes the frame of one message into `target`, which is exactly the frame's size. */
export function encodeFrameInto(target: Uint8Array, recordId: number, message: Uint8Array): void {
  assert(target.byteLength === FRAME_OVERHEAD_BYTES + message.byteLength, 'frame buffer of the wrong size');
  assert(isRecordId(recordId), () => `bad record id ${recordId}`);
  const buf = asBuffer(target);
  buf.writeUInt32LE(8 + message.byteLength, 0);
  buf.writeDoubleLE(recordId, FRAME_PREFIX_BYTES);
  buf.set(message, FRAME_OVERHEAD_BYTES);
  buf.writeUInt32LE(crc32c(buf.subarray(FRAME_PREFIX_BYTES)), 4);
}

/**
 * Why `frame` (read back from where record `recordId` of `messageBytes` bytes was written)
 * is not that record, or null when it is.
 */
export function frameMismatch(frame: Uint8Array, recordId: number, messageBytes: number): string | null {
  if (frame.byteLength !== FRAME_OVERHEAD_BYTES + messageBytes) return `read ${frame.byteLength} bytes of a ${FRAME_OVERHEAD_BYTES + messageBytes}-byte frame`;
  const buf = asBuffer(frame);
  const length = buf.readUInt32LE(0);
  if (length !== 8 + messageBytes) return `length field ${length}, expected ${8 + messageBytes}`;
  if (buf.readUInt32LE(4) !== crc32c(buf.subarray(FRAME_PREFIX_BYTES))) return 'checksum mismatch';
  const found = buf.readDoubleLE(FRAME_PREFIX_BYTES);
  if (found !== recordId) return `frame holds record ${found}`;
  return null;
}

export function isRecordId(value: number): boolean {
  return Number.isSafeInteger(value) && value >= 1;
}

// ------------------------------------------------------------------------------ scanning

/** Bytes of a segment a scan could not read as frames. */
export interface UnreadableRange {
  readonly offset: number;
  readonly bytes: number;
  readonly reason: string;
}

export interface StoreSegmentScan {
  /** Null when the header is missing or damaged (the reason is in `headerProblem`). */
  readonly header: SegmentHeader | null;
  readonly headerProblem: string | null;
  readonly records: SegmentRecords;
  /**
   * Damaged bytes between valid frames, skipped. Never written by the store: bit rot or a
   * lost write. The records in them are lost (their adopt returns null).
   */
  readonly skipped: readonly UnreadableRange[];
  /**
   * Bytes after the last valid frame that are not one: the torn tail of a write that a crash
   * interrupted (any segment but a sealed one can have one, since a store never appends to
   * a file of an earlier process). Ignored, never appended to.
   */
  readonly tail: UnreadableRange | null;
}

/**
 * Reads every valid frame of a segment file. A damaged header does not stop the scan: the
 * frames are checked on their own. At a bad frame the scan looks for the next valid one:
 * first where the bad frame's length field says it ends (a damaged body), then byte by byte.
 */
export function scanStoreSegment(bytes: Uint8Array, segment: number): StoreSegmentScan {
  const buf = asBuffer(bytes);
  const decoded = decodeSegmentHeader(buf, segment);
  const header = typeof decoded === 'string' ? null : decoded;
  const records = new SegmentRecords(Math.floor(buf.length / 1024));
  const skipped: UnreadableRange[] = [];
  let tail: UnreadableRange | null = null;
  // A header a crash tore (a file shorter than one, or zeros) holds no records; any other
  // damage is scanned past.
  let offset = buf.length >= SEGMENT_HEADER_BYTES && !isZero(buf, 0, SEGMENT_HEADER_BYTES) ? SEGMENT_HEADER_BYTES : buf.length;
  if (header === null && offset === buf.length && buf.length > 0) tail = { offset: 0, bytes: buf.length, reason: 'torn segment header' };
  while (offset < buf.length) {
    const problem = frameProblemAt(buf, offset);
    if (problem === null) {
      const length = buf.readUInt32LE(offset);
      records.push(buf.readDoubleLE(offset + FRAME_PREFIX_BYTES), offset, length - 8);
      offset += FRAME_PREFIX_BYTES + length;
      continue;
    }
    const next = nextFrameAfter(buf, offset);
    if (next < 0) {
      tail = { offset, bytes: buf.length - offset, reason: problem };
      break;
    }
    skipped.push({ offset, bytes: next - offset, reason: problem });
    offset = next;
  }
  return { header, headerProblem: typeof decoded === 'string' ? decoded : null, records, skipped, tail };
}

/** Why the bytes at `offset` are not a valid frame, or null. */
function frameProblemAt(buf: Buffer, offset: number): string | null {
  const remaining = buf.length - offset;
  if (remaining < FRAME_OVERHEAD_BYTES) return `${remaining} trailing bytes, less than a frame`;
  const length = buf.readUInt32LE(offset);
  if (length === 0 && isZero(buf, offset, buf.length)) return `zero-filled tail of ${remaining} bytes`;
  if (length < 8 || length > 8 + STORE_MESSAGE_BYTES_MAX) return `bad frame length ${length}`;
  const end = offset + FRAME_PREFIX_BYTES + length;
  if (end > buf.length) return `frame of ${FRAME_PREFIX_BYTES + length} bytes runs past the end of the file`;
  if (!isRecordId(buf.readDoubleLE(offset + FRAME_PREFIX_BYTES))) return 'bad record id';
  if (buf.readUInt32LE(offset + 4) !== crc32c(buf.subarray(offset + FRAME_PREFIX_BYTES, end))) return 'checksum mismatch';
  return null;
}

/** Offset of the next valid frame after the bad one at `offset`, or -1. */
function nextFrameAfter(buf: Buffer, offset: number): number {
  if (offset + FRAME_OVERHEAD_BYTES > buf.length) return -1;
  const length = buf.readUInt32LE(offset);
  const claimedEnd = offset + FRAME_PREFIX_BYTES + length;
  // A damaged body with an intact length field: the next frame is where it says.
  if (length >= 8 && claimedEnd < buf.length && frameProblemAt(buf, claimedEnd) === null) return claimedEnd;
  for (let at = offset + 1; at + FRAME_OVERHEAD_BYTES <= buf.length; at++) {
    // The cheap checks first: most offsets fail on the length or the record id.
    const candidate = buf.readUInt32LE(at);
    if (candidate < 8 || at + FRAME_PREFIX_BYTES + candidate > buf.length) continue;
    if (!isRecordId(buf.readDoubleLE(at + FRAME_PREFIX_BYTES))) continue;
    if (frameProblemAt(buf, at) === null) return at;
  }
  return -1;
}

function isZero(buf: Buffer, from: number, to: number): boolean {
  for (let i = from; i < to; i++) if (buf[i] !== 0) return false;
  return true;
}

export function asBuffer(bytes: Uint8Array): Buffer {
  return Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}
