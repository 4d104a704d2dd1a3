/**
 * Typed errors of the storage layer. Every error has a stable `code` so callers (the
 * node driver, the simulator) can branch on it without parsing messages.
 */

/** Where in the WAL unreadable bytes were found. */
export interface WalCorruption {
  /** Sequence number of the segment file. */
  readonly segment: number;
  readonly file: string;
  /** Byte offset of the first unreadable record in that file. */
  readonly offset: number;
  readonly reason: string;
}

export class StorageError extends Error {
  override readonly name: string = 'StorageError';
  readonly code: string = 'ERR_STORAGE';
}

/** A violated invariant: a bug in the caller or in this package. Never caught and ignored. */
export class StorageInvariantError extends StorageError {
  override readonly name = 'StorageInvariantError';
  override readonly code = 'ERR_STORAGE_INVARIANT';
}

/**
 * The WAL holds bytes that fail their checksum (or cannot be framed) before its tail.
 * We cannot tell which groups those bytes belonged to, so no group may serve its data
 * until it is repaired from its peers.
 */
export class WalCorruptionError extends StorageError {
  override readonly name = 'WalCorruptionError';
  override readonly code = 'ERR_WAL_CORRUPTION';
  readonly corruption: WalCorruption;

  constructor(corruption: WalCorruption, detail?: string) {
    super(
      `WAL corrupt in segment ${corruption.segment} (${corruption.file}) at offset ${corruption.offset}: ` +
        `${corruption.reason}${detail === undefined ? '' : ` (${detail})`}`,
    );
    this.corruption = corruption;
  }
}

/**
 * fsync failed (or the WAL could not restore a known state after a failed write). The
 * kernel may have dropped dirty pages, so nothing written since the last good fsync can be
 * trusted. The node must crash and recover from what is on disk; retrying would pretend
 * data is safe when it may not be.
 */
export class WalFatalError extends StorageError {
  override readonly name = 'WalFatalError';
  override readonly code = 'ERR_WAL_FATAL';
}

/**
 * A write failed and was rolled back: the batch was not acknowledged and nothing
 * acknowledged before it was lost. Appends queued behind the failed batch are rejected too.
 */
export class WalWriteError extends StorageError {
  override readonly name: string = 'WalWriteError';
  override readonly code: string = 'ERR_WAL_WRITE';
}

/** A WalWriteError caused by ENOSPC or EDQUOT. */
export class WalDiskFullError extends WalWriteError {
  override readonly name = 'WalDiskFullError';
  override readonly code = 'ERR_WAL_DISK_FULL';
}

export class WalClosedError extends StorageError {
  override readonly name = 'WalClosedError';
  override readonly code = 'ERR_WAL_CLOSED';
}

/** A record larger than the on-disk format allows (`RECORD_BYTES_MAX`). */
export class WalRecordTooLargeError extends StorageError {
  override readonly name = 'WalRecordTooLargeError';
  override readonly code = 'ERR_WAL_RECORD_TOO_LARGE';
}

/** A local snapshot at or below the group's newest snapshot: nothing to do, nothing done. */
export class StaleSnapshotError extends StorageError {
  override readonly name = 'StaleSnapshotError';
  override readonly code = 'ERR_STALE_SNAPSHOT';
}

/**
 * An earlier persist of this group failed, so the durable log may lag what the Raft core
 * believes. The driver must call `restoreGroup` (restart the group) before persisting again.
 */
export class GroupWriteFailedError extends StorageError {
  override readonly name = 'GroupWriteFailedError';
  override readonly code = 'ERR_GROUP_WRITE_FAILED';
}

/**
 * Records put in the message store could not be written (or a segment could not be
 * started): `sync()` rejects, so the caller must not save a snapshot that references them.
 * The records stay in memory (reads keep working) and a later flush writes them again.
 */
export class MessageStoreWriteError extends StorageError {
  override readonly name: string = 'MessageStoreWriteError';
  override readonly code: string = 'ERR_MESSAGE_STORE_WRITE';
}

/** A MessageStoreWriteError for lack of room (ENOSPC, EDQUOT): free disk space. */
export class MessageStoreDiskFullError extends MessageStoreWriteError {
  override readonly name = 'MessageStoreDiskFullError';
  override readonly code = 'ERR_MESSAGE_STORE_DISK_FULL';
}

/**
 * An fdatasync of the message store failed, or a write failed for another reason than lack
 * of room: what the disk holds of its recent writes is unknown, so the store never reports
 * anything durable again (every `sync()` rejects with this). Reads keep working; the node
 * must restart, and its WAL brings back the records.
 */
export class MessageStoreFatalError extends StorageError {
  override readonly name = 'MessageStoreFatalError';
  override readonly code = 'ERR_MESSAGE_STORE_FATAL';
}

/** The message store's directory cannot be opened as it is (its `store.id` is missing or damaged). */
export class MessageStoreCorruptionError extends StorageError {
  override readonly name = 'MessageStoreCorruptionError';
  override readonly code = 'ERR_MESSAGE_STORE_CORRUPTION';
}

export class MessageStoreClosedError extends StorageError {
  override readonly name = 'MessageStoreClosedError';
  override readonly code = 'ERR_MESSAGE_STORE_CLOSED';
}

/** A message larger than the store's format allows (`STORE_MESSAGE_BYTES_MAX`). */
export class MessageTooLargeError extends StorageError {
  override readonly name = 'MessageTooLargeError';
  override readonly code = 'ERR_MESSAGE_TOO_LARGE';
}

/** The errno-style code of a Node.js system error (ENOSPC, EIO...), if it has one. */
export function errnoCode(error: unknown): string | undefined {
  if (typeof error !== 'object' || error === null || !('code' in error)) return undefined;
  return typeof error.code === 'string' ? error.code : undefined;
}

export function describeError(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

export function asError(error: unknown): Error {
  return error instanceof Error ? error : new Error(String(error));
}
