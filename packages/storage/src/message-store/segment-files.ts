/**
 * File I/O on segment and index files, through `StoreFs`: what is in a segment at open
 * (from its index, or from a scan), starting a segment file, writing an index.
 */
import { errnoCode } from '../errors.js';
import type { StorageLogger } from '../node-storage.js';
import { joinPath, type WalFile } from '../wal-fs.js';
import { decodeSegmentHeader, scanStoreSegment, SEGMENT_HEADER_BYTES, encodeSegmentHeader } from './record-format.js';
import { decodeSegmentIndex, encodeSegmentIndex, type SegmentIndex } from './segment-index.js';
import type { SegmentRecords } from './segment-records.js';
import { indexFileName, segmentFileName } from './segments.js';
import type { StoreFs } from './store-fs.js';

/** A segment file found at open. */
export interface LoadedSegment {
  readonly number: number;
  readonly fileBytes: number;
  /** From its header; 0 when the header is damaged. */
  readonly recordIdFloor: number;
  readonly records: SegmentRecords;
  /** Where its last valid frame ends (what a repaired index covers). */
  readonly validBytes: number;
  /** It was scanned (no usable index): an index should be written for the next open. */
  readonly scanned: boolean;
}

/** Reads a segment's records from its index file when that is sound, else by scanning it. */
export async function loadSegment(fs: StoreFs, dir: string, number: number, hasIndex: boolean, logger: StorageLogger): Promise<LoadedSegment> {
  const path = joinPath(dir, segmentFileName(number));
  const { fileBytes, head } = readHead(fs, path);
  if (hasIndex) {
    const index = await readIndex(fs, dir, number, fileBytes, logger);
    if (index !== null) {
      const header = decodeSegmentHeader(head, number);
      if (typeof header === 'string') logger.warn(`message store: ${path}: ${header}; its index is sound, the records are used`);
      const recordIdFloor = typeof header === 'string' ? 0 : header.recordIdFloor;
      return { number, fileBytes, recordIdFloor, records: index.records, validBytes: index.segmentBytes, scanned: false };
    }
  }
  const scan = scanStoreSegment(await fs.readFile(path), number);
  const tornHeader = scan.header === null && scan.records.count === 0 && (scan.tail === null || scan.tail.offset === 0);
  if (tornHeader) {
    logger.warn(`message store: ${path} holds no records: its header was never completely written (a crash right after it was created)`);
  } else if (scan.headerProblem !== null) {
    logger.warn(`message store: ${path}: ${scan.headerProblem}; its frames are checked one by one`);
  }
  for (const range of scan.skipped) {
    logger.warn(`message store: ${path}: ${range.bytes} damaged bytes at offset ${range.offset} skipped (${range.reason}); the records in them are lost`);
  }
  const validBytes = scan.tail === null ? fileBytes : scan.tail.offset;
  if (scan.tail !== null && scan.tail.offset > 0) {
    logger.warn(`message store: ${path}: the last ${scan.tail.bytes} bytes, from offset ${scan.tail.offset}, are a torn write (${scan.tail.reason}); ignored`);
  }
  return {
    number,
    fileBytes,
    recordIdFloor: scan.header?.recordIdFloor ?? 0,
    records: scan.records,
    validBytes: Math.max(validBytes, SEGMENT_HEADER_BYTES),
    scanned: true,
  };
}

function readHead(fs: StoreFs, path: string): { fileBytes: number; head: Uint8Array } {
  const file = fs.openRead(path);
  try {
    return { fileBytes: file.size(), head: file.readSync(0, SEGMENT_HEADER_BYTES) };
  } finally {
    file.close();
  }
}

async function readIndex(fs: StoreFs, dir: string, number: number, fileBytes: number, logger: StorageLogger): Promise<SegmentIndex | null> {
  const path = joinPath(dir, indexFileName(number));
  let bytes: Uint8Array;
  try {
    bytes = await fs.readFile(path);
  } catch (error) {
    if (errnoCode(error) !== 'ENOENT') logger.warn(`message store: cannot read ${path} (${String(error)}); scanning its segment instead`);
    return null;
  }
  const index = decodeSegmentIndex(bytes, number, fileBytes);
  if (typeof index === 'string') {
    logger.warn(`message store: ${path} is not usable (${index}); scanning its segment instead`);
    return null;
  }
  return index;
}

/**
 * Creates segment `number` with its header and makes it durable (file and directory entry),
 * so a crash can never leave records after a torn header. Safe to retry after a failure.
 */
export async function createSegmentFile(fs: StoreFs, dir: string, number: number, recordIdFloor: number): Promise<WalFile> {
  const file = await fs.openAppend(joinPath(dir, segmentFileName(number)));
  try {
    await file.truncate(0);
    await file.write(encodeSegmentHeader({ segment: number, recordIdFloor }));
    await file.datasync();
    await fs.syncDir(dir);
  } catch (error) {
    await closeQuietly(file);
    throw error;
  }
  return file;
}

/** Writes and datasyncs a segment's index; its directory entry is durable at the next `syncDir`. */
export async function writeIndexFile(fs: StoreFs, dir: string, number: number, index: SegmentIndex): Promise<void> {
  const file = await fs.openAppend(joinPath(dir, indexFileName(number)));
  try {
    await file.truncate(0);
    await file.write(encodeSegmentIndex(number, index));
    await file.datasync();
  } finally {
    await closeQuietly(file);
  }
}

/** Removes a segment's file and then its index (an index without a segment is removed at the next open). */
export async function unlinkSegmentFiles(fs: StoreFs, dir: string, number: number): Promise<void> {
  await unlinkIfPresent(fs, joinPath(dir, segmentFileName(number)));
  await unlinkIfPresent(fs, joinPath(dir, indexFileName(number)));
}

export async function unlinkIfPresent(fs: StoreFs, path: string): Promise<void> {
  try {
    await fs.unlink(path);
  } catch (error) {
    if (errnoCode(error) !== 'ENOENT') throw error;
  }
}

export async function closeQuietly(file: WalFile): Promise<void> {
  try {
    await file.close();
  } catch {
    // Only on paths that already report a more important error, or after a datasync.
  }
}
