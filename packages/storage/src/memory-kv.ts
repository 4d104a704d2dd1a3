import { StorageInvariantError } from './errors.js';
import type { KvOp, KvStore } from './kv.js';

/**
 * An in-memory `KvStore` for tests and the simulator. It models LevelDB's crash semantics:
 * batches apply atomically and in order; `crash()` loses every batch written since the
 * last `sync: true` batch (an OS crash or power loss, not just a process exit).
 */
export class MemoryKvStore implements KvStore {
  private durable = new Map<string, Uint8Array>();
  private live = new Map<string, Uint8Array>();
  private closed = false;

  async get(key: string): Promise<Uint8Array | undefined> {
    this.assertOpen();
    return this.live.get(key);
  }

  async batch(ops: readonly KvOp[], opts: { readonly sync: boolean }): Promise<void> {
    this.assertOpen();
    for (const op of ops) {
      if (op.type === 'put') this.live.set(op.key, new Uint8Array(op.value)); // copy: the caller may reuse its buffer
      else this.live.delete(op.key);
    }
    if (opts.sync) this.durable = new Map(this.live);
  }

  async scan(prefix: string): Promise<Array<[string, Uint8Array]>> {
    this.assertOpen();
    const out: Array<[string, Uint8Array]> = [];
    for (const [key, value] of this.live) if (key.startsWith(prefix)) out.push([key, value]);
    return out.sort(([a], [b]) => Buffer.compare(Buffer.from(a, 'utf8'), Buffer.from(b, 'utf8')));
  }

  async close(): Promise<void> {
    this.closed = true;
  }

  /** Simulates a crash: returns the store a restarted node sees (only synced batches). */
  crash(): MemoryKvStore {
    this.closed = true;
    const restarted = new MemoryKvStore();
    restarted.durable = new Map(this.durable);
    restarted.live = new Map(this.durable);
    return restarted;
  }

  private assertOpen(): void {
    if (this.closed) throw new StorageInvariantError('MemoryKvStore used after close (or crash)');
  }
}
