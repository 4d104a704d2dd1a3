/**
 * Snapshot bytes live in files, one per group and snapshot, not in the KV store: a queue's
 * snapshot carries its live messages and can be hundreds of megabytes, which a LevelDB value
 * would copy into its write batch on the event loop, into its log, and again at every
 * compaction.
 *
 * Protocol (all through `WalFs`, so the simulator's crash semantics cover it too):
 * 1. write the new file, named by group, index and term, and fsync it and its directory;
 * 2. commit the KV batch that points at it (`snapshot-file/<id>`: name, length, CRC-32C);
 * 3. remove the group's previous file.
 * A crash before 2 leaves an unreferenced file, removed when the storage opens next; after 2
 * the KV store points at a complete, durable file. A referenced file that is missing, short
 * or fails its CRC is corruption: opening the storage fails and names the file.
 */
import { crc32c } from '@node-rs/crc32';
import { StorageError } from './errors.js';
import { joinPath, type WalFs } from './wal-fs.js';

/** What the KV store keeps for a group's snapshot file. */
export interface SnapshotFileRef {
  readonly file: string;
  readonly bytes: number;
  readonly crc: number;
}

const SNAPSHOT_FILE = /^[0-9a-f]+-\d+-\d+\.snap$/;

export class SnapshotFileError extends StorageError {
  override readonly name = 'SnapshotFileError';
}

export class SnapshotFiles {
  private constructor(
    private readonly fs: WalFs,
    readonly dir: string,
  ) {}

  static async open(fs: WalFs, dir: string): Promise<SnapshotFiles> {
    await fs.mkdirp(dir);
    return new SnapshotFiles(fs, dir);
  }

  /** The file name of a group's snapshot at (index, term): the group id in hex, so any id is a safe name. */
  static fileName(groupId: string, index: number, term: number): string {
    return `${Buffer.from(groupId, 'utf8').toString('hex')}-${index}-${term}.snap`;
  }

  /** Writes and fsyncs the file (and its directory entry); resolves once it is durable. */
  async write(groupId: string, index: number, term: number, data: Uint8Array): Promise<SnapshotFileRef> {
    const file = SnapshotFiles.fileName(groupId, index, term);
    const handle = await this.fs.openAppend(joinPath(this.dir, file));
    try {
      // A file of that name can only be a leftover of a crash before its KV batch.
      await handle.truncate(0);
      await handle.write(data);
      await handle.datasync();
    } finally {
      await handle.close();
    }
    await this.fs.syncDir(this.dir);
    return { file, bytes: data.byteLength, crc: crc32c(data) };
  }

  /** Reads a referenced file and checks its length and CRC. */
  async read(ref: SnapshotFileRef, groupId: string): Promise<Uint8Array> {
    let data: Uint8Array;
    try {
      data = await this.fs.readFile(joinPath(this.dir, ref.file));
    } catch (error) {
      throw new SnapshotFileError(`snapshot of group ${groupId}: cannot read ${joinPath(this.dir, ref.file)}: ${String(error)}`);
    }
    if (data.byteLength !== ref.bytes || crc32c(data) !== ref.crc) {
      throw new SnapshotFileError(
        `snapshot of group ${groupId}: ${joinPath(this.dir, ref.file)} is damaged (${data.byteLength} bytes, expected ${ref.bytes}, or its CRC-32C does not match)`,
      );
    }
    return data;
  }

  /** Removes a file that no KV entry points at any more (best effort: a leftover is removed at the next open). */
  async remove(file: string): Promise<void> {
    try {
      await this.fs.unlink(joinPath(this.dir, file));
    } catch {
      // Already gone, or the next open removes it.
    }
  }

  /** Removes every snapshot file not in `referenced` (leftovers of crashes and failed removals). */
  async removeUnreferenced(referenced: ReadonlySet<string>): Promise<void> {
    for (const name of await this.fs.list(this.dir)) {
      if (SNAPSHOT_FILE.test(name) && !referenced.has(name)) await this.remove(name);
    }
  }
}
