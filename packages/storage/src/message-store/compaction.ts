/**
 * Compaction of one sealed segment: the fix for "one old unacked message pins the file it is
 * in". Its live records are copied, with their record ids, into the segment `put` places in;
 * once the copies are durable the handles point at them, and the old segment (now without a
 * live record) can be deleted by the store.
 *
 * Protocol, and why it is safe:
 * 1. Copy: read the old segment sequentially (read-ahead windows, outside the read cache),
 *    check each live frame (crc and record id) and place a byte-identical copy, a slice of
 *    COMPACTION_SLICE_BYTES per turn of the event loop. Each copy
 *    counts as live in its new segment from now on, so that segment cannot be deleted or
 *    judged mostly dead while the copy is not yet pointed at. Handles still point at the old
 *    copy, which stays readable.
 * 2. `sync()`: the copies are durable. A crash before this leaves the old segment complete;
 *    a crash after it leaves the id in two files, and the open takes the newer one.
 * 3. Repoint each handle whose record is still live and still at its old place. A record
 *    released meanwhile is not revived: its copy is counted dead again.
 * A failure (a frame that does not check, a failed sync) undoes the accounting of the copies
 * (they stay in their segment as dead bytes) and leaves every handle where it was.
 */
import type { HandleTable } from './handles.js';
import { FRAME_OVERHEAD_BYTES, frameMismatch } from './record-format.js';

/**
 * Bytes a compaction copies in one turn of the event loop before it lets other work run.
 * A compaction copies on the node's one thread, and everything else waits for its turn:
 * with a turn per read-ahead window (1 MiB: a read, a checksum and a copy of each frame)
 * publishes at 256 in flight saw confirms of 50-160 ms while a segment was compacted, where
 * the median was 10. A turn now does an eighth of that.
 */
export const COMPACTION_SLICE_BYTES = 128 * 1024;

/** What the store lends a compaction. */
export interface CompactionHost {
  readonly handles: HandleTable;
  readonly readAheadBytes: number;
  /** Up to `length` bytes of a segment file at `offset` (throws on an I/O error). */
  readSegment(segment: number, offset: number, length: number): Uint8Array;
  /** Places a copy of a frame; it counts as live in the segment it went to. */
  placeCopy(frame: Uint8Array): { readonly segment: number; readonly offset: number };
  /** A placed copy that no handle will point at: dead bytes of its segment. */
  dropCopy(segment: number, frameBytes: number): void;
  /** Points a handle at its copy; the record is no longer live in `fromSegment`. */
  moveToCopy(handle: number, fromSegment: number, segment: number, offset: number): void;
  /** Resolves once everything placed so far is durable. */
  sync(): Promise<void>;
  /** Lets the event loop run between batches of copies. */
  yieldTurn(): Promise<void>;
  /** The store is closing: stop at the next batch. */
  stopping(): boolean;
}

export type CompactionOutcome =
  | { readonly kind: 'done'; readonly copiedRecords: number; readonly copiedBytes: number }
  | { readonly kind: 'failed'; readonly reason: string }
  | { readonly kind: 'stopped' };

interface Copies {
  readonly handles: Uint32Array;
  readonly recordIds: Float64Array;
  readonly oldOffsets: Uint32Array;
  readonly segments: Uint32Array;
  readonly offsets: Uint32Array;
  readonly frameBytes: Uint32Array;
  count: number;
}

export async function compactSegment(host: CompactionHost, segment: number): Promise<CompactionOutcome> {
  const live = host.handles.liveIn(segment);
  const copies: Copies = {
    handles: new Uint32Array(live.length),
    recordIds: new Float64Array(live.length),
    oldOffsets: new Uint32Array(live.length),
    segments: new Uint32Array(live.length),
    offsets: new Uint32Array(live.length),
    frameBytes: new Uint32Array(live.length),
    count: 0,
  };
  const copied = await copyLive(host, segment, live, copies);
  if (copied !== null) {
    undo(host, copies);
    return copied;
  }
  try {
    await host.sync();
  } catch (error) {
    undo(host, copies);
    return { kind: 'failed', reason: `the copies could not be made durable: ${String(error)}` };
  }
  return repoint(host, segment, copies);
}

/** Step 1; null when every live record was copied, else why not. */
async function copyLive(host: CompactionHost, segment: number, live: Uint32Array, copies: Copies): Promise<CompactionOutcome | null> {
  const { handles } = host;
  let window: Uint8Array = new Uint8Array(0);
  let windowStart = 0;
  let sinceYield = 0;
  for (const handle of live) {
    // Released (and perhaps reused) while an earlier batch was copied: nothing to copy.
    if (!handles.isLive(handle) || handles.segment(handle) !== segment) continue;
    const recordId = handles.recordId(handle);
    const offset = handles.offset(handle);
    const size = FRAME_OVERHEAD_BYTES + handles.messageBytes(handle);
    if (offset < windowStart || offset + size > windowStart + window.byteLength) {
      try {
        window = host.readSegment(segment, offset, Math.max(host.readAheadBytes, size));
      } catch (error) {
        return { kind: 'failed', reason: `reading it failed: ${String(error)}` };
      }
      windowStart = offset;
    }
    const frame = window.subarray(offset - windowStart, offset - windowStart + size);
    const mismatch = frameMismatch(frame, recordId, handles.messageBytes(handle));
    if (mismatch !== null) return { kind: 'failed', reason: `record ${recordId} at offset ${offset} does not read back (${mismatch})` };
    const placed = host.placeCopy(frame);
    const i = copies.count++;
    copies.handles[i] = handle;
    copies.recordIds[i] = recordId;
    copies.oldOffsets[i] = offset;
    copies.segments[i] = placed.segment;
    copies.offsets[i] = placed.offset;
    copies.frameBytes[i] = size;
    sinceYield += size;
    if (sinceYield >= COMPACTION_SLICE_BYTES) {
      sinceYield = 0;
      await host.yieldTurn();
      if (host.stopping()) return { kind: 'stopped' };
    }
  }
  return null;
}

/** Step 3. */
function repoint(host: CompactionHost, segment: number, copies: Copies): CompactionOutcome {
  const { handles } = host;
  let copiedRecords = 0;
  let copiedBytes = 0;
  for (let i = 0; i < copies.count; i++) {
    const handle = copies.handles[i]!;
    const same =
      handles.isLive(handle) &&
      handles.segment(handle) === segment &&
      handles.offset(handle) === copies.oldOffsets[i] &&
      handles.recordId(handle) === copies.recordIds[i];
    if (same) {
      host.moveToCopy(handle, segment, copies.segments[i]!, copies.offsets[i]!);
      copiedRecords++;
      copiedBytes += copies.frameBytes[i]!;
    } else {
      host.dropCopy(copies.segments[i]!, copies.frameBytes[i]!);
    }
  }
  return { kind: 'done', copiedRecords, copiedBytes };
}

function undo(host: CompactionHost, copies: Copies): void {
  for (let i = 0; i < copies.count; i++) host.dropCopy(copies.segments[i]!, copies.frameBytes[i]!);
}
