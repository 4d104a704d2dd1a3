/**
 * The file API of the message store: the WAL's (`WalFs`, with its durability contract, which
 * the store relies on unchanged for everything it writes) plus synchronous positional reads,
 * because `MessageStore.read` is synchronous: a replica delivering a message must not wait a
 * turn of the event loop, and the bytes are almost always in the page cache or in the
 * store's own read-ahead cache.
 *
 * `NodeWalFs` implements it over `node:fs` (openSync/readSync), the simulator over its
 * in-memory disk.
 */
import type { WalFs } from '../wal-fs.js';

export interface StoreFs extends WalFs {
  /**
   * Opens an existing file for reading; throws (an error with code ENOENT when it does
   * not exist). Reads see what a reader sees now: everything written, durable or not.
   */
  openRead(path: string): StoreReadFile;
}

export interface StoreReadFile {
  /** The file's current length in bytes. */
  size(): number;
  /**
   * Up to `length` bytes from `position`: fewer only where the file ends. A fresh buffer
   * the caller owns. Throws on an I/O error.
   */
  readSync(position: number, length: number): Uint8Array;
  /** Releases the file; a failure to close is not reported (nothing was written through it). */
  close(): void;
}
