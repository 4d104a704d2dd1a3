/**
 * Segments: their file names and the store's bookkeeping of each one.
 *
 * Life of a segment:
 *   open        records are being placed in it, or written to it (at most two are open: the
 *               one `put` places in and, behind it, the one the writer still writes)
 *   sealed      all written, datasynced, its index written; never written again. The
 *               segments found at open are sealed too (an earlier process wrote them).
 *   compacting  its live records are being copied out
 *   deleted     its files are being (or were) removed; no handle points at it
 */
import type { SegmentRecords } from './segment-records.js';

const SEGMENT_NAME_DIGITS = 8;
export const SEGMENT_FILE = /^(\d{8})\.seg$/;
export const INDEX_FILE = /^(\d{8})\.idx$/;
/** Part of the file names: 8 digits. */
export const SEGMENT_NUMBER_MAX = 99_999_999;

export function segmentFileName(segment: number): string {
  return `${String(segment).padStart(SEGMENT_NAME_DIGITS, '0')}.seg`;
}

export function indexFileName(segment: number): string {
  return `${String(segment).padStart(SEGMENT_NAME_DIGITS, '0')}.idx`;
}

export type SegmentState = 'open' | 'sealed' | 'compacting' | 'deleted';

export class Segment {
  state: SegmentState;
  /** Bytes of the file: written so far (open) or all of it (sealed). */
  fileBytes = 0;
  /** Records with a reference, and their frames' bytes (what compaction would copy). */
  liveRecords = 0;
  liveFrameBytes = 0;
  /** Only while open: every record placed in it, for its index. */
  records: SegmentRecords | null;
  /** A compaction of it failed: it is not tried again until a record in it dies. */
  compactionFailed = false;
  /** The store's released bytes when a record of it last died (the store's clock for settling). */
  lastDeathAt = 0;

  constructor(
    readonly number: number,
    state: SegmentState,
    /** Every record id handed out before the segment was created is below it. */
    readonly recordIdFloor: number,
    records: SegmentRecords | null,
  ) {
    this.state = state;
    this.records = records;
  }

  addLive(frameBytes: number): void {
    this.liveRecords++;
    this.liveFrameBytes += frameBytes;
  }

  removeLive(frameBytes: number): void {
    this.liveRecords--;
    this.liveFrameBytes -= frameBytes;
  }
}
