/**
 * The file API the WAL needs, and nothing more, so that a deterministic simulator can run
 * the same WAL and NodeStorage logic over an in-memory disk with crash semantics.
 *
 * Durability contract (what survives a crash, power loss or kernel panic). An
 * implementation, real or simulated, must provide exactly this, and the WAL relies on
 * nothing more:
 *
 * - Bytes given to `write`/`writev` are NOT durable when the call resolves. After a crash
 *   any suffix of them may be missing, torn, or (for the unwritten part of a file that
 *   grew) read back as zero bytes.
 * - `WalFile.datasync()` makes every byte written through that file before the call, and
 *   the file's length (including a `truncate`), durable when it resolves. If it rejects,
 *   the state of those bytes is unknown, now and forever: the WAL treats that as fatal.
 * - `WalFile.appendDurable()` is `writev` then `datasync` in one step: when it resolves,
 *   its bytes and every byte written before them are durable. When it rejects, the state
 *   of its bytes is unknown; an error that refuses the write itself (ENOSPC, EDQUOT, EFBIG)
 *   leaves everything before them as durable as it was.
 * - The existence of a file created by `openAppend`, or the absence of one removed by
 *   `unlink`, is durable only once a later `syncDir(dir)` of its directory resolves.
 * - `mkdirp(dir)` resolves once `dir` exists durably.
 *
 * Paths are plain strings joined with '/'. Data is Uint8Array so that no Node types leak.
 */
export interface WalFs {
  /** Creates `dir` and missing parents; resolves once they exist durably. */
  mkdirp(dir: string): Promise<void>;
  /** Names (not paths) of the entries of `dir`, in no particular order. */
  list(dir: string): Promise<string[]>;
  /** The whole content of a file (what a reader sees now, durable or not). */
  readFile(path: string): Promise<Uint8Array>;
  /**
   * Opens `path` for appending, creating it empty if missing. Writes always go to the end
   * (the end of what was written: see `OpenOptions.preallocate`).
   */
  openAppend(path: string, options?: OpenOptions): Promise<WalFile>;
  unlink(path: string): Promise<void>;
  /** Makes the creation and removal of entries in `dir` durable. */
  syncDir(dir: string): Promise<void>;
}

export interface OpenOptions {
  /**
   * The file may hold zero-filled space beyond its last write, up to this many bytes in all
   * (what it is expected to grow to), so that small durable writes overwrite blocks the file
   * system already has (no change of the file's length to record per write). After a crash
   * that space reads back as a zero-filled tail, which a reader must take as the end. `seal`
   * gives it back. An implementation may ignore this.
   */
  readonly preallocate?: number;
}

export interface WalFile {
  /** Appends all of `data` or rejects. Not durable until `datasync`. */
  write(data: Uint8Array): Promise<void>;
  /** Appends the buffers in order, all of them or rejects. Not durable until `datasync`. */
  writev(data: readonly Uint8Array[]): Promise<void>;
  /** Makes all writes and truncations made through this file durable (fdatasync). */
  datasync(): Promise<void>;
  /**
   * Appends the buffers in order and makes them durable before resolving, as `writev`
   * then `datasync` would, but in one request to the disk (the WAL's hot path).
   */
  appendDurable(data: readonly Uint8Array[]): Promise<void>;
  /**
   * `appendDurable` on the calling thread: the buffers are written and durable when it
   * returns true, with no trip through a thread pool. False (nothing written) when the file
   * cannot take this write now; the caller then uses `appendDurable`. Throws where
   * `appendDurable` would reject. Absent where a file has no synchronous write.
   */
  appendDurableNow?(data: readonly Uint8Array[]): boolean;
  /** Cuts the file to `length` bytes; later writes append after that. Durable after `datasync`. */
  truncate(length: number): Promise<void>;
  /**
   * Gives back any space held beyond the last write (`OpenOptions.preallocate`), durably,
   * and holds none after: the file then ends where its data ends, even after a crash.
   * Absent where a file never holds such space.
   */
  seal?(): Promise<void>;
  close(): Promise<void>;
}

/** Joins a directory and a file name with '/'. */
export function joinPath(dir: string, name: string): string {
  return dir.endsWith('/') ? `${dir}${name}` : `${dir}/${name}`;
}
