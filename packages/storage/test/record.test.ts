import { crc32c } from '@node-rs/crc32';
import { describe, expect, it } from 'vitest';
import { WalRecordTooLargeError } from '../src/errors.js';
import {
  encodeRecords,
  RECORD_BYTES_MAX,
  RECORD_BYTES_MIN,
  RECORD_PREFIX_BYTES,
  scanSegment,
  type WalRecord,
} from '../src/record.js';
import { bytesOf, entryRecord, hardStateRecord, plain } from './helpers.js';

const sample: WalRecord[] = [
  entryRecord('orders', 1, 1, 'hello'),
  { kind: 'entry', groupId: 'orders', entry: { index: 2, term: 1, type: 'config', data: bytesOf('{"voters":["a"]}') } },
  { kind: 'entry', groupId: 'ordres-é-漢字', entry: { index: 3, term: 2, type: 'normal', data: new Uint8Array(0) } },
  hardStateRecord('orders', { term: 2, vote: null, commit: 1 }),
  hardStateRecord('orders', { term: 7, vote: 'node-ü', commit: 3 }),
  entryRecord('big-index', Number.MAX_SAFE_INTEGER, Number.MAX_SAFE_INTEGER - 1, 'x'),
];

function encodeAll(records: readonly WalRecord[]): Buffer {
  return encodeRecords(records).buf;
}

/** Offsets at which each record of `buf` starts. */
function offsetsOf(buf: Buffer): number[] {
  return scanSegment(buf, true).records.map((r) => r.offset);
}

describe('record framing', () => {
  it('round-trips every record type', () => {
    const { buf, sizes } = encodeRecords(sample);
    const scan = scanSegment(buf, false);
    expect(scan.status).toBe('clean');
    expect(scan.validBytes).toBe(buf.length);
    expect(scan.records.map((r) => plain(r.record))).toEqual(sample.map(plain));
    expect(scan.records.map((r) => r.bytes)).toEqual(sizes);
    expect(sizes.reduce((a, b) => a + b, 0)).toBe(buf.length);
  });

  it('writes the documented header: length of the body, crc32c of the body', () => {
    const buf = encodeAll([entryRecord('g', 5, 3, 'abc')]);
    const length = buf.readUInt32LE(0);
    expect(length).toBe(buf.length - RECORD_PREFIX_BYTES);
    expect(buf.readUInt32LE(4)).toBe(crc32c(buf.subarray(RECORD_PREFIX_BYTES)));
    expect(buf.readUInt8(8)).toBe(1); // normal entry
    expect(buf.readUInt16LE(9)).toBe(1);
    expect(buf.toString('utf8', 11, 12)).toBe('g');
    expect(buf.readUInt32LE(12)).toBe(5); // index
    expect(buf.readUInt32LE(20)).toBe(3); // term
    expect(buf.toString('utf8', 28)).toBe('abc');
    expect(buf.length).toBe(RECORD_BYTES_MIN + 1 + 3);
  });

  it('rejects a record above RECORD_BYTES_MAX before encoding anything', () => {
    const huge: WalRecord = {
      kind: 'entry',
      groupId: 'g',
      entry: { index: 1, term: 1, type: 'normal', data: new Uint8Array(RECORD_BYTES_MAX) },
    };
    expect(() => encodeRecords([entryRecord('g', 1), huge])).toThrow(WalRecordTooLargeError);
  });

  it('rejects an empty group id and an index above 2^53', () => {
    expect(() => encodeRecords([entryRecord('', 1)])).toThrow(/group id/);
    expect(() => encodeRecords([entryRecord('g', 2 ** 53)])).toThrow(/out of range/);
  });
});

describe('scanSegment', () => {
  const records = [entryRecord('a', 1), entryRecord('b', 1), entryRecord('a', 2, 1, 'x'.repeat(40))];
  const full = encodeAll(records);
  const lastStart = offsetsOf(full)[2]!;

  it('treats a cut at every byte offset of the last record as a torn tail', () => {
    for (let cut = lastStart + 1; cut < full.length; cut++) {
      const scan = scanSegment(full.subarray(0, cut), true);
      expect(scan.status, `cut at ${cut}`).toBe('torn');
      expect(scan.validBytes).toBe(lastStart);
      expect(scan.records.map((r) => plain(r.record))).toEqual(records.slice(0, 2).map(plain));
    }
    expect(scanSegment(full.subarray(0, lastStart), true).status).toBe('clean');
  });

  it('calls the same cut corruption when the segment is not the last one', () => {
    for (let cut = lastStart + 1; cut < full.length; cut++) {
      const scan = scanSegment(full.subarray(0, cut), false);
      expect(scan.status, `cut at ${cut}`).toBe('corrupt');
      expect(scan.validBytes).toBe(lastStart);
    }
  });

  it('treats a zero-filled rest of file as torn (last segment only)', () => {
    const padded = Buffer.concat([full, Buffer.alloc(4096)]);
    expect(scanSegment(padded, true)).toMatchObject({ status: 'torn', validBytes: full.length });
    expect(scanSegment(padded, false)).toMatchObject({ status: 'corrupt', validBytes: full.length });
    expect(scanSegment(Buffer.alloc(100), true)).toMatchObject({ status: 'torn', validBytes: 0, records: [] });
  });

  it('treats a checksum mismatch on the record ending at EOF as torn', () => {
    const damaged = Buffer.from(full);
    damaged[damaged.length - 5]! ^= 0x01;
    expect(scanSegment(damaged, true)).toMatchObject({ status: 'torn', validBytes: lastStart });
    expect(scanSegment(damaged, false)).toMatchObject({ status: 'corrupt', validBytes: lastStart });
  });

  it('reports a flipped byte in the middle as corruption at that record, never skipping it', () => {
    const middle = offsetsOf(full)[1]!;
    for (let at = middle; at < lastStart; at++) {
      const damaged = Buffer.from(full);
      damaged[at]! ^= 0x40;
      const scan = scanSegment(damaged, true);
      expect(scan.status, `flip at ${at}`).toBe('corrupt');
      expect(scan.validBytes).toBe(middle);
      expect(scan.records).toHaveLength(1);
    }
  });

  it('reports a length outside the format bounds as corruption, even at the tail', () => {
    const tooLong = Buffer.from(full);
    tooLong.writeUInt32LE(RECORD_BYTES_MAX, lastStart);
    expect(scanSegment(tooLong, true)).toMatchObject({ status: 'corrupt', validBytes: lastStart });
    const tooShort = Buffer.from(full);
    tooShort.writeUInt32LE(3, lastStart);
    expect(scanSegment(tooShort, true)).toMatchObject({ status: 'corrupt', validBytes: lastStart });
  });

  it('reports a well-checksummed record that does not parse as corruption', () => {
    const buf = encodeAll([entryRecord('g', 1)]);
    buf.writeUInt32LE(2 ** 21, 12 + 4); // index >= 2^53
    buf.writeUInt32LE(crc32c(buf.subarray(RECORD_PREFIX_BYTES)), 4);
    expect(scanSegment(buf, true)).toMatchObject({ status: 'corrupt', validBytes: 0 });
    const badType = encodeAll([entryRecord('g', 1)]);
    badType.writeUInt8(9, 8);
    badType.writeUInt32LE(crc32c(badType.subarray(RECORD_PREFIX_BYTES)), 4);
    expect(scanSegment(badType, true).reason).toMatch(/unknown record type 9/);
  });

  it('calls trailing bytes shorter than any record torn', () => {
    const tail = Buffer.concat([full, Buffer.from([1, 2, 3])]);
    expect(scanSegment(tail, true)).toMatchObject({ status: 'torn', validBytes: full.length });
  });
});
