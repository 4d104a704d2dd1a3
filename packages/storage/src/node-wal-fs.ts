import { closeSync, constants, fstatSync, openSync, readSync } from 'node:fs';
import { mkdir, open, readdir, readFile, unlink } from 'node:fs/promises';
import type { FileHandle } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';
import type { StoreFs, StoreReadFile } from './message-store/store-fs.js';
import type { WalFile } from './wal-fs.js';

/**
 * `WalFs` over the real file system (node:fs/promises), and the message store's `StoreFs`
 * (its synchronous reads through node:fs openSync/readSync).
 */
export class NodeWalFs implements StoreFs {
  async mkdirp(dir: string): Promise<void> {
    const created = await mkdir(dir, { recursive: true });
    if (created === undefined) return;
    const firstCreated = resolve(created);
    // Each directory we created is an entry in its parent: make those entries durable,
    // from the deepest up to the parent of the first one we created.
    for (let created = resolve(dir); ; created = dirname(created)) {
      await this.syncDir(dirname(created));
      if (created === firstCreated || dirname(created) === created) break;
    }
  }

  list(dir: string): Promise<string[]> {
    return readdir(dir);
  }

  readFile(path: string): Promise<Uint8Array> {
    return readFile(path);
  }

  /**
   * Opens with O_DSYNC: each write returns once its bytes (and the file's new length) are
   * on the disk, so `appendDurable` is one write system call, one trip through libuv's
   * thread pool, and one cache flush, instead of a write and then an fdatasync.
   */
  async openAppend(path: string): Promise<WalFile> {
    return new NodeWalFile(await open(path, APPEND_DSYNC));
  }

  unlink(path: string): Promise<void> {
    return unlink(path);
  }

  openRead(path: string): StoreReadFile {
    return new NodeReadFile(openSync(path, 'r'));
  }

  async syncDir(dir: string): Promise<void> {
    const handle = await open(dir, 'r');
    try {
      await handle.sync();
    } finally {
      await handle.close();
    }
  }
}

const APPEND_DSYNC = constants.O_WRONLY | constants.O_CREAT | constants.O_APPEND | constants.O_DSYNC;

class NodeWalFile implements WalFile {
  constructor(private readonly handle: FileHandle) {}

  write(data: Uint8Array): Promise<void> {
    return this.writev([data]);
  }

  async writev(data: readonly Uint8Array[]): Promise<void> {
    let total = 0;
    for (const buf of data) total += buf.byteLength;
    // libuv already loops over short writes and IOV_MAX; a short count here means an
    // error (ENOSPC...) after some bytes went out. Writing the rest surfaces that error.
    const { bytesWritten } = await this.handle.writev(Array.from(data));
    if (bytesWritten < total) await this.writeRest(data, bytesWritten);
  }

  datasync(): Promise<void> {
    return this.handle.datasync();
  }

  appendDurable(data: readonly Uint8Array[]): Promise<void> {
    // O_DSYNC (see openAppend): the write is durable when it returns.
    return this.writev(data);
  }

  truncate(length: number): Promise<void> {
    return this.handle.truncate(length);
  }

  close(): Promise<void> {
    return this.handle.close();
  }

  private async writeRest(data: readonly Uint8Array[], alreadyWritten: number): Promise<void> {
    let skip = alreadyWritten;
    for (const buf of data) {
      if (skip >= buf.byteLength) {
        skip -= buf.byteLength;
        continue;
      }
      for (let offset = skip; offset < buf.byteLength; ) {
        const { bytesWritten } = await this.handle.write(buf, offset, buf.byteLength - offset);
        if (bytesWritten === 0) throw new Error(`write made no progress at offset ${offset}`);
        offset += bytesWritten;
      }
      skip = 0;
    }
  }
}

class NodeReadFile implements StoreReadFile {
  constructor(private readonly fd: number) {}

  size(): number {
    return fstatSync(this.fd).size;
  }

  readSync(position: number, length: number): Uint8Array {
    const buf = Buffer.allocUnsafe(length);
    let got = 0;
    // readSync may return fewer bytes than asked before the end of the file; 0 is the end.
    while (got < length) {
      const n = readSync(this.fd, buf, got, length - got, position + got);
      if (n === 0) break;
      got += n;
    }
    return got === length ? buf : buf.subarray(0, got);
  }

  close(): void {
    try {
      closeSync(this.fd);
    } catch {
      // Nothing was written through this descriptor: there is nothing a failed close can lose.
    }
  }
}
