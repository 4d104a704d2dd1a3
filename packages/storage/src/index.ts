export { assert } from './assert.js';
export {
  asError,
  errnoCode,
  GroupWriteFailedError,
  MessageStoreClosedError,
  MessageStoreCorruptionError,
  MessageStoreDiskFullError,
  MessageStoreFatalError,
  MessageStoreWriteError,
  MessageTooLargeError,
  StaleSnapshotError,
  StorageError,
  StorageInvariantError,
  WalClosedError,
  WalCorruptionError,
  WalDiskFullError,
  WalFatalError,
  WalRecordTooLargeError,
  WalWriteError,
  type WalCorruption,
} from './errors.js';
export type { KvOp, KvStore } from './kv.js';
export { KV_PREFIX, kvKey, type Checkpoint } from './kv-layout.js';
export { LevelKvStore } from './level-kv.js';
export { MemoryKvStore } from './memory-kv.js';
export {
  NodeStorage,
  SNAPSHOT_INTERVAL_DEFAULT,
  type NodeStorageOptions,
  type PersistUpdate,
  type StorageLogger,
} from './node-storage.js';
export type { BodyHandle, MessageStoreApi, MessageStoreStats } from './message-store/api.js';
export { HANDLE_SLOT_BYTES } from './message-store/handles.js';
export { STORE_MESSAGE_BYTES_MAX } from './message-store/record-format.js';
export type { StoreFs, StoreReadFile } from './message-store/store-fs.js';
export { MessageStore } from './message-store/store.js';
export { MESSAGE_STORE_DEFAULTS, type MessageStoreOptions } from './message-store/store-options.js';
export { NodeWalFs } from './node-wal-fs.js';
export { SnapshotFileError, SnapshotFiles, type SnapshotFileRef } from './snapshot-files.js';
export { LEGACY_TERM_MARGIN, TERM_BOUND_STEP, type DamageKind, type StorageRepair } from './repair.js';
export {
  encodeRecords,
  GROUP_ID_BYTES_MAX,
  RECORD_BYTES_MAX,
  RECORD_BYTES_MIN,
  RECORD_PREFIX_BYTES,
  RecordType,
  scanSegment,
  VOTE_BYTES_MAX,
  type EncodedRecords,
  type ScannedRecord,
  type ScanStatus,
  type SegmentScan,
  type WalRecord,
} from './record.js';
export {
  comparePositions,
  SEGMENT_BYTES_MAX_DEFAULT,
  segmentFileName,
  Wal,
  type Enqueued,
  type FlushStats,
  type ReplayVisitor,
  type SegmentSummary,
  type TornTail,
  type WalOptions,
  type WalPosition,
  type WalRecovery,
  type WalUsage,
  type WalWriteMode,
} from './wal.js';
export { joinPath, type OpenOptions, type WalFile, type WalFs } from './wal-fs.js';
