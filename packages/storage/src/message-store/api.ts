/**
 * The contract of a node's message store: the bytes of queued messages, on disk, shared by
 * every queue replica of the node. A replica keeps only a handle per message; the bytes are
 * read back when the message is delivered, got, dead-lettered or moved.
 *
 * Layout: append-only segment files of CRC-framed records, each with a record id that is
 * unique in this store and never reused; a record id is what a replica's snapshot keeps, so
 * a snapshot stays valid while compaction moves records between files. See
 * docs/architecture.md ("The message store") for the trade-offs.
 *
 * Durability: `put` is synchronous and NOT durable. The WAL entry that carried the message
 * is its durable copy until the replica's snapshot replaces that entry; so a replica calls
 * `sync()` (every put so far durable) before the snapshot that references those records is
 * saved. A crash may lose or tear records put after the last sync: they are re-put when the
 * WAL is replayed.
 */

/** Handle of one stored record in this process: valid until its last reference is released. */
export type BodyHandle = number;

export interface MessageStoreStats {
  /** Records with at least one reference. */
  readonly liveRecords: number;
  /** Bytes of those records' messages. */
  readonly liveBytes: number;
  /** Bytes of all segment files (live, dead and not yet compacted). */
  readonly diskBytes: number;
  readonly segments: number;
  /** Bytes held by the read-ahead cache (at most its `cacheBytes` option). */
  readonly cacheBytes: number;
  /** Bytes of records put but not yet written to their segment file (served from memory). */
  readonly pendingWriteBytes: number;
  /** Segments rewritten by compaction since open, and the bytes that freed. */
  readonly compactions: number;
  readonly compactedBytes: number;
}

export interface MessageStoreApi {
  /** Random id of this store, kept in its directory: whose record ids a snapshot holds. */
  readonly storeId: string;

  /**
   * Stores `bytes` (copied) and returns a handle with one reference. With a `key` (a
   * fan-out's: the same message routed to several queues), a live record put under the same
   * key recently (the store remembers the last `recentKeys` keys) is shared instead:
   * one more reference, nothing written.
   */
  put(bytes: Uint8Array, key?: string): BodyHandle;
  /**
   * A reference to a record by its id, for a replica restoring its own snapshot after an
   * open. Returns the handle (shared by every replica adopting the same id), or null when
   * the store has no such record (then the message's bytes are lost: the caller reports it).
   * Only valid before `recovered()`.
   */
  adopt(recordId: number): BodyHandle | null;
  /** One more reference to a live record. */
  retain(handle: BodyHandle): void;
  /** Drops one reference; the record is dead once none is left. */
  release(handle: BodyHandle): void;
  /** The record id of a live record (what a snapshot keeps). */
  recordId(handle: BodyHandle): number;
  /** Byte length of a live record's message. */
  size(handle: BodyHandle): number;
  /**
   * The message's bytes, synchronously: from unflushed writes, the read cache, or the disk
   * (a sequential reader gets read-ahead). Undefined when the record cannot be read back
   * (its CRC fails or the file is gone): reported, never thrown.
   */
  read(handle: BodyHandle): Uint8Array | undefined;
  /** Resolves once every record put before the call is durable. */
  sync(): Promise<void>;
  /**
   * Every replica restored: records nobody adopted are dead. Files with nothing live are
   * deleted and compaction may start. Until then nothing is deleted.
   */
  recovered(): void;
  stats(): MessageStoreStats;
  /**
   * Empties the read-ahead cache if nothing was read through it since the previous call;
   * returns the bytes it dropped. Also drops the handle table's pages that hold no live
   * record now, and the spare write chunks if nothing was put since the previous call. A
   * node calls it every few seconds: an idle store keeps no cache.
   */
  dropCacheIfUnused(): number;
  /** Flushes and closes. Not durable unless `sync()` resolved first. */
  close(): Promise<void>;
}
