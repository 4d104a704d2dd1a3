/**
 * The index file of a sealed segment (message-store/segment-index.ts): written once per
 * segment, read at open instead of scanning the segment.
 */
import { describe, expect, it } from 'vitest';

import { SEGMENT_HEADER_BYTES } from '../src/message-store/record-format.js';
import { decodeSegmentIndex, encodeSegmentIndex } from '../src/message-store/segment-index.js';
import { SegmentRecords } from '../src/message-store/segment-records.js';

describe('segment index', () => {
  it('encodes every record in the documented layout and decodes it back', () => {
    const records = new SegmentRecords();
    let offset = SEGMENT_HEADER_BYTES;
    const count = 50_000;
    for (let i = 0; i < count; i++) {
      const messageBytes = (i * 37) % 3000;
      records.push(2 ** 40 + i * 3, offset, messageBytes);
      offset += 16 + messageBytes + (i % 2);
    }
    const bytes = Buffer.from(encodeSegmentIndex(9, { segmentBytes: offset, records }));

    expect(bytes.length).toBe(24 + count * 16 + 4);
    expect(bytes.readUInt32LE(8)).toBe(9);
    expect(bytes.readUInt32LE(12)).toBe(count);
    expect(bytes.readDoubleLE(16)).toBe(offset);
    for (const i of [0, 1, 777, count - 1]) {
      const at = 24 + i * 16;
      expect([bytes.readDoubleLE(at), bytes.readUInt32LE(at + 8), bytes.readUInt32LE(at + 12)]).toEqual([records.recordId(i), records.offset(i), records.messageBytes(i)]);
    }
    const decoded = decodeSegmentIndex(bytes, 9, offset);
    if (typeof decoded === 'string') throw new Error(decoded);
    expect(decoded.records.count).toBe(count);
    for (let i = 0; i < count; i++) {
      if (decoded.records.recordId(i) !== records.recordId(i) || decoded.records.offset(i) !== records.offset(i) || decoded.records.messageBytes(i) !== records.messageBytes(i)) {
        throw new Error(`record ${i} decoded differently`);
      }
    }
    // One flipped byte in an entry: the checksum refuses the index.
    const flipped = 24 + 5 * 16 + 9;
    bytes.writeUInt8(bytes.readUInt8(flipped) ^ 1, flipped);
    expect(decodeSegmentIndex(bytes, 9, offset)).toBe('index checksum mismatch');
  });
});
