/**
 * PendingWrites (message-store/pending-writes.ts): frames put and not yet written, packed in
 * 1 MiB chunks. A chunk written to the end gives its buffer to a later chunk (at most
 * SPARE_CHUNKS_MAX kept), so a steady stream of puts does not make a new 1 MiB buffer per
 * chunk; an idle store drops the spares.
 */
import { describe, expect, it } from 'vitest';

import { CHUNK_BYTES, PendingWrites, SPARE_CHUNKS_MAX } from '../src/message-store/pending-writes.js';

const FRAME = 64 * 1024;
const PER_CHUNK = CHUNK_BYTES / FRAME;

/** Puts `count` frames of FRAME bytes at the end of segment 1, each filled with its number. */
function put(writes: PendingWrites, first: number, count: number): Uint8Array[] {
  const views: Uint8Array[] = [];
  for (let i = first; i < first + count; i++) {
    const view = writes.reserve(1, i * FRAME, FRAME);
    view.fill(i % 251);
    views.push(view);
  }
  return views;
}

/** Writes everything pending, one batch at a time. */
function writeAll(writes: PendingWrites): number {
  let bytes = 0;
  for (let batch = writes.take(); batch !== null; batch = writes.take()) {
    bytes += batch.bytes;
    writes.written();
  }
  return bytes;
}

describe('PendingWrites', () => {
  it('gives a written chunk\'s buffer to a later chunk, and serves only unwritten frames', () => {
    const writes = new PendingWrites();
    const first = put(writes, 0, PER_CHUNK * 2 + 1);
    const buffers = new Set(first.map((view) => view.buffer));
    expect(buffers.size).toBe(3);
    expect(writeAll(writes)).toBe((PER_CHUNK * 2 + 1) * FRAME);
    // The two full chunks are done; the third still takes frames.
    expect(writes.spareBytes).toBe(2 * CHUNK_BYTES);

    // Fill the third chunk, then the next chunk reuses a spare buffer.
    put(writes, PER_CHUNK * 2 + 1, PER_CHUNK - 1);
    const [next] = put(writes, PER_CHUNK * 3, 1);
    expect(buffers.has(next!.buffer)).toBe(true);
    expect(writes.spareBytes).toBe(CHUNK_BYTES);

    // The reused buffer holds the new frame; frames written before are no longer served here.
    expect(writes.find(1, PER_CHUNK * 3 * FRAME, FRAME)).toEqual(Buffer.alloc(FRAME, (PER_CHUNK * 3) % 251));
    expect(writes.find(1, 0, FRAME)).toBeUndefined();
    expect(writes.bytes).toBe(PER_CHUNK * FRAME);
  });

  it('keeps at most SPARE_CHUNKS_MAX spares, and no buffer of a frame larger than a chunk', () => {
    const writes = new PendingWrites();
    put(writes, 0, PER_CHUNK * (SPARE_CHUNKS_MAX + 3));
    writeAll(writes);
    // Every chunk is written and full, so done: four are kept.
    expect(writes.spareBytes).toBe(SPARE_CHUNKS_MAX * CHUNK_BYTES);

    const other = new PendingWrites();
    const big = other.reserve(2, 0, CHUNK_BYTES + 1);
    expect(big.buffer.byteLength).toBe(CHUNK_BYTES + 1);
    other.reserve(2, CHUNK_BYTES + 1, FRAME);
    writeAll(other);
    expect(other.spareBytes).toBe(0);
  });

  it('does not reuse a chunk whose write failed until it is written', () => {
    const writes = new PendingWrites();
    const views = put(writes, 0, PER_CHUNK + 1);
    const batch = writes.take();
    expect(batch?.bytes).toBe((PER_CHUNK + 1) * FRAME);
    writes.failed();
    expect(writes.spareBytes).toBe(0);
    // The failed bytes are offered again first, intact.
    const again = writes.take();
    expect(again?.bytes).toBe((PER_CHUNK + 1) * FRAME);
    expect(Buffer.concat(again!.bufs).subarray(0, FRAME)).toEqual(Buffer.alloc(FRAME, 0));
    writes.written();
    expect(writes.spareBytes).toBe(CHUNK_BYTES);
    expect(views[0]!.buffer).not.toBe(views[PER_CHUNK]!.buffer);
  });

  it('drops its spares when nothing was put since the previous idle check', () => {
    const writes = new PendingWrites();
    put(writes, 0, PER_CHUNK * 3);
    writeAll(writes);
    expect(writes.spareBytes).toBe(3 * CHUNK_BYTES);
    // Put since the last check (there was none): kept.
    expect(writes.dropSpareIfIdle()).toBe(0);
    expect(writes.spareBytes).toBe(3 * CHUNK_BYTES);
    // Nothing put since: dropped.
    expect(writes.dropSpareIfIdle()).toBe(3 * CHUNK_BYTES);
    expect(writes.spareBytes).toBe(0);
    // Puts go on with new buffers.
    const [view] = put(writes, PER_CHUNK * 3, 1);
    expect(view!.byteLength).toBe(FRAME);
  });
});
