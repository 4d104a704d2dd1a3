/**
 * Open read descriptors of segment files, at most `openMax` (least recently used closed
 * first), opened on the first read of a segment: a store of a terabyte has thousands of
 * segments, and the process its limit on open files.
 */
import { joinPath } from '../wal-fs.js';
import { segmentFileName } from './segments.js';
import type { StoreFs, StoreReadFile } from './store-fs.js';

export class SegmentReaders {
  private readonly files = new Map<number, StoreReadFile>();

  constructor(
    private readonly fs: StoreFs,
    private readonly dir: string,
    private readonly openMax: number,
  ) {}

  /** The reader of a segment (throws when its file cannot be opened). */
  get(segment: number): StoreReadFile {
    const open = this.files.get(segment);
    if (open !== undefined) {
      this.files.delete(segment);
      this.files.set(segment, open);
      return open;
    }
    const file = this.fs.openRead(joinPath(this.dir, segmentFileName(segment)));
    this.files.set(segment, file);
    for (const [oldest, old] of this.files) {
      if (this.files.size <= this.openMax) break;
      this.files.delete(oldest);
      old.close();
    }
    return file;
  }

  close(segment: number): void {
    this.files.get(segment)?.close();
    this.files.delete(segment);
  }

  closeAll(): void {
    for (const file of this.files.values()) file.close();
    this.files.clear();
  }
}
