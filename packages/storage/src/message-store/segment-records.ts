/**
 * The records of one segment file, in file order, as three typed-array columns: what a
 * segment's index file holds, what a scan of the segment finds, and what the store keeps
 * for the segment it is writing until it seals it (16 bytes per record, no object each).
 */
import { assert } from '../assert.js';

const CAPACITY_MIN = 64;

export class SegmentRecords {
  private recordIdColumn: Float64Array;
  private offsetColumn: Uint32Array;
  private lengthColumn: Uint32Array;
  /** Invariant: count <= capacity of every column. */
  private used = 0;

  constructor(capacity = CAPACITY_MIN) {
    const size = Math.max(CAPACITY_MIN, capacity);
    this.recordIdColumn = new Float64Array(size);
    this.offsetColumn = new Uint32Array(size);
    this.lengthColumn = new Uint32Array(size);
  }

  get count(): number {
    return this.used;
  }

  /** Record id of the i-th record. */
  recordId(i: number): number {
    return this.recordIdColumn[i]!;
  }

  /** Offset of the i-th record's frame in the segment file. */
  offset(i: number): number {
    return this.offsetColumn[i]!;
  }

  /** Byte length of the i-th record's message (not of its frame). */
  messageBytes(i: number): number {
    return this.lengthColumn[i]!;
  }

  push(recordId: number, offset: number, messageBytes: number): void {
    assert(this.used === 0 || offset > this.offsetColumn[this.used - 1]!, () => `record at ${offset} is not after the previous one`);
    if (this.used === this.recordIdColumn.length) this.grow();
    this.recordIdColumn[this.used] = recordId;
    this.offsetColumn[this.used] = offset;
    this.lengthColumn[this.used] = messageBytes;
    this.used++;
  }

  private grow(): void {
    const size = this.recordIdColumn.length * 2;
    const ids = new Float64Array(size);
    const offsets = new Uint32Array(size);
    const lengths = new Uint32Array(size);
    ids.set(this.recordIdColumn);
    offsets.set(this.offsetColumn);
    lengths.set(this.lengthColumn);
    this.recordIdColumn = ids;
    this.offsetColumn = offsets;
    this.lengthColumn = lengths;
  }
}
