/**
 * The records of one segment file, in file order: what a segment's index file holds, what a
 * scan of the segment finds, and what the store keeps for the segment it is writing until it
 * seals it (16 bytes per record, no object each).
 *
 * The records are kept in the index file's entry layout (segment-index.ts: f64 record id,
 * u32 frame offset, u32 message bytes, little endian), one 16-byte entry each, read and
 * written through two typed-array views of one buffer. On a little-endian host (every one
 * Node.js ships for but s390x) `indexEntries` is then the index's body as it is, and sealing
 * a segment copies it instead of encoding each record: encoding a 64 MiB segment of 1 KiB
 * messages record by record, once per segment in code that never gets hot, held the node's
 * thread for 25-45 ms.
 */
import { endianness } from 'node:os';

import { assert } from '../assert.js';

const CAPACITY_MIN = 64;
const ENTRY_BYTES = 16;
const LITTLE_ENDIAN = endianness() === 'LE';

export class SegmentRecords {
  /** Entry i: f64 at [2i] (record id); u32 at [4i + 2] (offset) and [4i + 3] (message bytes). */
  private f64: Float64Array;
  private u32: Uint32Array;
  /** Invariant: count <= capacity. */
  private used = 0;

  constructor(capacity = CAPACITY_MIN) {
    const size = Math.max(CAPACITY_MIN, capacity);
    const buffer = new ArrayBuffer(size * ENTRY_BYTES);
    this.f64 = new Float64Array(buffer);
    this.u32 = new Uint32Array(buffer);
  }

  get count(): number {
    return this.used;
  }

  /** Record id of the i-th record. */
  recordId(i: number): number {
    return this.f64[2 * i]!;
  }

  /** Offset of the i-th record's frame in the segment file. */
  offset(i: number): number {
    return this.u32[4 * i + 2]!;
  }

  /** Byte length of the i-th record's message (not of its frame). */
  messageBytes(i: number): number {
    return this.u32[4 * i + 3]!;
  }

  push(recordId: number, offset: number, messageBytes: number): void {
    assert(this.used === 0 || offset > this.offset(this.used - 1), () => `record at ${offset} is not after the previous one`);
    if (this.used * ENTRY_BYTES === this.f64.byteLength) this.grow();
    const i = this.used;
    this.f64[2 * i] = recordId;
    this.u32[4 * i + 2] = offset;
    this.u32[4 * i + 3] = messageBytes;
    this.used++;
  }

  /**
   * The records as index entries (segment-index.ts), a view of this table (valid until the
   * next push); null on a big-endian host, where they are encoded one by one.
   */
  indexEntries(): Uint8Array | null {
    return LITTLE_ENDIAN ? new Uint8Array(this.f64.buffer, 0, this.used * ENTRY_BYTES) : null;
  }

  private grow(): void {
    const buffer = new ArrayBuffer(this.f64.byteLength * 2);
    new Uint8Array(buffer).set(new Uint8Array(this.f64.buffer));
    this.f64 = new Float64Array(buffer);
    this.u32 = new Uint32Array(buffer);
  }
}
