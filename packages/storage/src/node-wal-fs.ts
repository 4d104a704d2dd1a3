import { mkdir, open, readdir, readFile, unlink } from 'node:fs/promises';
import type { FileHandle } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';
import type { WalFile, WalFs } from './wal-fs.js';

/** `WalFs` over the real file system (node:fs/promises). */
export class NodeWalFs implements WalFs {
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

  async openAppend(path: string): Promise<WalFile> {
    return new NodeWalFile(await open(path, 'a'));
  }

  unlink(path: string): Promise<void> {
    return unlink(path);
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
