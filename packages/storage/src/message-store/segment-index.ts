/**
 * The index file of a sealed segment (`NNNNNNNN.idx`): where each of its records is, so that
 * opening the store reads 16 bytes per record instead of the whole segment. Written once,
 * when the segment is sealed, and datasynced; all integers little endian:
 *
 *   u32 magic "QQMI" | u16 format version (1) | u16 zero | u32 segment number |
 *   u32 record count | f64 segmentBytes (the sealed segment's length) |
 *   count x (f64 recordId | u32 frame offset | u32 message bytes) |
 *   u32 crc32c(every byte before it)
 *
 * Checked as a whole: an index that is missing, torn, fails its crc or disagrees with its
 * segment file (shorter than `segmentBytes`, records overlapping or outside it) is not used,
 * and the segment is scanned instead.
 */
import { crc32c } from '@node-rs/crc32';
import { FRAME_OVERHEAD_BYTES, isRecordId, SEGMENT_HEADER_BYTES, STORE_MESSAGE_BYTES_MAX, asBuffer } from './record-format.js';
import { SegmentRecords } from './segment-records.js';

const INDEX_MAGIC = 0x494d5151; // "QQMI" read as a little-endian u32
const INDEX_FORMAT_VERSION = 1;
const INDEX_HEADER_BYTES = 24;
const INDEX_ENTRY_BYTES = 16;
const INDEX_CRC_BYTES = 4;

export interface SegmentIndex {
  readonly segmentBytes: number;
  readonly records: SegmentRecords;
}

export function encodeSegmentIndex(segment: number, index: SegmentIndex): Uint8Array {
  const { records } = index;
  const buf = Buffer.alloc(INDEX_HEADER_BYTES + records.count * INDEX_ENTRY_BYTES + INDEX_CRC_BYTES);
  buf.writeUInt32LE(INDEX_MAGIC, 0);
  buf.writeUInt16LE(INDEX_FORMAT_VERSION, 4);
  buf.writeUInt32LE(segment, 8);
  buf.writeUInt32LE(records.count, 12);
  buf.writeDoubleLE(index.segmentBytes, 16);
  const at = INDEX_HEADER_BYTES + records.count * INDEX_ENTRY_BYTES;
  // The records are kept in this layout (segment-records.ts): one copy on a little-endian host.
  const entries = records.indexEntries();
  if (entries !== null) buf.set(entries, INDEX_HEADER_BYTES);
  else {
    for (let i = 0, entry = INDEX_HEADER_BYTES; i < records.count; i++, entry += INDEX_ENTRY_BYTES) {
      buf.writeDoubleLE(records.recordId(i), entry);
      buf.writeUInt32LE(records.offset(i), entry + 8);
      buf.writeUInt32LE(records.messageBytes(i), entry + 12);
    }
  }
  buf.writeUInt32LE(crc32c(buf.subarray(0, at)), at);
  return buf;
}

/** The index, or why it cannot be trusted for a segment file of `fileBytes` bytes. */
export function decodeSegmentIndex(bytes: Uint8Array, segment: number, fileBytes: number): SegmentIndex | string {
  const buf = asBuffer(bytes);
  if (buf.length < INDEX_HEADER_BYTES + INDEX_CRC_BYTES) return `${buf.length} bytes, shorter than an index`;
  const count = buf.readUInt32LE(12);
  const crcAt = INDEX_HEADER_BYTES + count * INDEX_ENTRY_BYTES;
  if (crcAt + INDEX_CRC_BYTES !== buf.length) return `${buf.length} bytes for ${count} records`;
  if (buf.readUInt32LE(crcAt) !== crc32c(buf.subarray(0, crcAt))) return 'index checksum mismatch';
  if (buf.readUInt32LE(0) !== INDEX_MAGIC) return 'not a message store index (bad magic)';
  if (buf.readUInt16LE(4) !== INDEX_FORMAT_VERSION) return `index format version ${buf.readUInt16LE(4)}`;
  if (buf.readUInt32LE(8) !== segment) return `index names segment ${buf.readUInt32LE(8)}`;
  const segmentBytes = buf.readDoubleLE(16);
  if (!Number.isSafeInteger(segmentBytes) || segmentBytes < SEGMENT_HEADER_BYTES) return `bad segment length ${segmentBytes}`;
  if (segmentBytes > fileBytes) return `index covers ${segmentBytes} bytes, the segment file has ${fileBytes}`;
  const records = new SegmentRecords(count);
  let end = SEGMENT_HEADER_BYTES;
  for (let i = 0, at = INDEX_HEADER_BYTES; i < count; i++, at += INDEX_ENTRY_BYTES) {
    const recordId = buf.readDoubleLE(at);
    const offset = buf.readUInt32LE(at + 8);
    const messageBytes = buf.readUInt32LE(at + 12);
    if (!isRecordId(recordId)) return `entry ${i}: bad record id ${recordId}`;
    if (messageBytes > STORE_MESSAGE_BYTES_MAX) return `entry ${i}: message of ${messageBytes} bytes`;
    if (offset < end) return `entry ${i}: frame at ${offset} overlaps the one before`;
    end = offset + FRAME_OVERHEAD_BYTES + messageBytes;
    if (end > segmentBytes) return `entry ${i}: frame runs past the sealed length ${segmentBytes}`;
    records.push(recordId, offset, messageBytes);
  }
  return { segmentBytes, records };
}
