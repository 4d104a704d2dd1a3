import { mkdtemp, readdir, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Entry, HardState } from '@quorumq/raft';
import { NodeWalFs } from '../src/node-wal-fs.js';
import type { WalRecord } from '../src/record.js';
import type { StoreFs, StoreReadFile } from '../src/message-store/store-fs.js';
import type { OpenOptions, WalFile } from '../src/wal-fs.js';

const created: string[] = [];

/** A fresh directory under os.tmpdir(); removed by `removeTempDirs`. */
export async function tempDir(label: string): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), `quorumq-storage-${label}-`));
  created.push(dir);
  return dir;
}

export async function removeTempDirs(): Promise<void> {
  const dirs = created.splice(0);
  await Promise.all(dirs.map((dir) => rm(dir, { recursive: true, force: true })));
}

export function bytesOf(text: string): Uint8Array {
  return new TextEncoder().encode(text);
}

export function textOf(bytes: Uint8Array): string {
  return new TextDecoder().decode(bytes);
}

export function entry(index: number, term: number, text = `e${index}t${term}`): Entry {
  return { index, term, type: 'normal', data: bytesOf(text) };
}

export function entries(from: number, to: number, term: number, text?: (index: number) => string): Entry[] {
  const out: Entry[] = [];
  for (let index = from; index <= to; index++) out.push(entry(index, term, text?.(index)));
  return out;
}

export function entryRecord(groupId: string, index: number, term = 1, text?: string): WalRecord {
  return { kind: 'entry', groupId, entry: entry(index, term, text) };
}

export function hardStateRecord(groupId: string, hardState: HardState): WalRecord {
  return { kind: 'hardState', groupId, hardState };
}

/** Comparable form of a record (Uint8Array data as text). */
export function plain(record: WalRecord): unknown {
  if (record.kind === 'hardState') return record;
  return { ...record, entry: { ...record.entry, data: textOf(record.entry.data) } };
}

export function plainEntries(list: readonly Entry[]): unknown[] {
  return list.map((e) => ({ ...e, data: textOf(e.data) }));
}

export async function walFiles(dir: string): Promise<string[]> {
  return (await readdir(dir)).filter((name) => name.endsWith('.wal')).sort();
}

export async function dirBytes(dir: string, names: readonly string[]): Promise<number> {
  let total = 0;
  for (const name of names) total += (await stat(join(dir, name))).size;
  return total;
}

export function errnoError(code: string): Error {
  return Object.assign(new Error(`${code}: injected`), { code });
}

export interface WriteFault {
  readonly error: Error;
  /** Bytes that really reach the file before the error, as a real short write would. */
  readonly partialBytes: number;
}

/** Resolves after `n` turns of the event loop. */
export async function turns(n: number): Promise<void> {
  for (let i = 0; i < n; i++) await new Promise((resolve) => setImmediate(resolve));
}

/**
 * A WalFs (and the message store's StoreFs) over the real disk that counts calls and injects
 * faults. Faults stay armed until cleared. `datasyncGate`/`writeGate` hold every
 * datasync/write until they resolve.
 */
export class InstrumentedFs implements StoreFs {
  readonly calls = { appendDurable: 0, appendDurableNow: 0, writev: 0, write: 0, datasync: 0, truncate: 0, openAppend: 0, syncDir: 0, unlink: 0, readSync: 0 };
  /** `appendDurableNow` answers false (the file cannot take the write now). */
  inlineRefused = false;
  /** A clock (ms) for the WAL's `now`; each `appendDurableNow` advances it by `inlineWriteMs`. */
  clockMs = 0;
  inlineWriteMs = 0;
  readFault: Error | null = null;
  writeFault: WriteFault | null = null;
  datasyncFault: Error | null = null;
  truncateFault: Error | null = null;
  datasyncGate: Promise<void> | null = null;
  writeGate: Promise<void> | null = null;
  private readonly inner = new NodeWalFs();

  mkdirp(dir: string): Promise<void> {
    return this.inner.mkdirp(dir);
  }
  list(dir: string): Promise<string[]> {
    return this.inner.list(dir);
  }
  readFile(path: string): Promise<Uint8Array> {
    return this.inner.readFile(path);
  }
  async openAppend(path: string, options?: OpenOptions): Promise<WalFile> {
    this.calls.openAppend++;
    return new InstrumentedFile(this, await this.inner.openAppend(path, options));
  }
  unlink(path: string): Promise<void> {
    this.calls.unlink++;
    return this.inner.unlink(path);
  }
  syncDir(dir: string): Promise<void> {
    this.calls.syncDir++;
    return this.inner.syncDir(dir);
  }
  openRead(path: string): StoreReadFile {
    const inner = this.inner.openRead(path);
    return {
      size: () => inner.size(),
      readSync: (position, length) => {
        this.calls.readSync++;
        if (this.readFault !== null) throw this.readFault;
        return inner.readSync(position, length);
      },
      close: () => inner.close(),
    };
  }
}

class InstrumentedFile implements WalFile {
  constructor(
    private readonly fs: InstrumentedFs,
    private readonly inner: WalFile,
  ) {}

  write(data: Uint8Array): Promise<void> {
    this.fs.calls.write++;
    return this.writeWithFaults([data]);
  }
  writev(data: readonly Uint8Array[]): Promise<void> {
    this.fs.calls.writev++;
    return this.writeWithFaults(data);
  }
  async datasync(): Promise<void> {
    this.fs.calls.datasync++;
    if (this.fs.datasyncGate !== null) await this.fs.datasyncGate;
    if (this.fs.datasyncFault !== null) throw this.fs.datasyncFault;
    return this.inner.datasync();
  }
  /** Counted as one writev and one datasync; their faults and gates apply in that order. */
  async appendDurable(data: readonly Uint8Array[]): Promise<void> {
    this.fs.calls.appendDurable++;
    await this.writev(data);
    await this.datasync();
  }
  /** Counted as one appendDurableNow; the write fault applies (its partial bytes really reach the file), gates do not. */
  appendDurableNow(data: readonly Uint8Array[]): boolean {
    this.fs.calls.appendDurableNow++;
    if (this.fs.inlineRefused) return false;
    this.fs.clockMs += this.fs.inlineWriteMs;
    const inline = this.inner.appendDurableNow?.bind(this.inner);
    if (inline === undefined) return false;
    const fault = this.fs.writeFault;
    if (fault === null) return inline(data);
    const all = Buffer.concat(data.map((buf) => Buffer.from(buf.buffer, buf.byteOffset, buf.byteLength)));
    inline([all.subarray(0, Math.min(fault.partialBytes, all.length))]);
    throw fault.error;
  }
  truncate(length: number): Promise<void> {
    this.fs.calls.truncate++;
    if (this.fs.truncateFault !== null) return Promise.reject(this.fs.truncateFault);
    return this.inner.truncate(length);
  }
  close(): Promise<void> {
    return this.inner.close();
  }
  async seal(): Promise<void> {
    await this.inner.seal?.();
  }

  private async writeWithFaults(data: readonly Uint8Array[]): Promise<void> {
    if (this.fs.writeGate !== null) await this.fs.writeGate;
    const fault = this.fs.writeFault;
    if (fault === null) return this.inner.writev(data);
    const all = Buffer.concat(data.map((buf) => Buffer.from(buf.buffer, buf.byteOffset, buf.byteLength)));
    await this.inner.write(all.subarray(0, Math.min(fault.partialBytes, all.length)));
    throw fault.error;
  }
}
