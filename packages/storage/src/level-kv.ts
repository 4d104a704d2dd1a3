import { mkdir } from 'node:fs/promises';
import leveldown from 'leveldown';
import type { KvOp, KvStore } from './kv.js';

type LevelDb = ReturnType<typeof leveldown>;

/** `KvStore` over LevelDB (leveldown). `sync: true` batches are fsynced before resolving. */
export class LevelKvStore implements KvStore {
  private constructor(private readonly db: LevelDb) {}

  static async open(location: string): Promise<LevelKvStore> {
    await mkdir(location, { recursive: true });
    const db = leveldown(location);
    await new Promise<void>((resolve, reject) => {
      db.open({ createIfMissing: true }, (error) => (error ? reject(error) : resolve()));
    });
    return new LevelKvStore(db);
  }

  get(key: string): Promise<Uint8Array | undefined> {
    return new Promise((resolve, reject) => {
      this.db.get(key, { asBuffer: true }, (error, value) => {
        if (!error) resolve(value);
        else if (isNotFound(error)) resolve(undefined);
        else reject(error);
      });
    });
  }

  batch(ops: readonly KvOp[], opts: { readonly sync: boolean }): Promise<void> {
    const levelOps = ops.map((op) =>
      op.type === 'put' ? { type: op.type, key: op.key, value: toBuffer(op.value) } : { type: op.type, key: op.key },
    );
    return new Promise((resolve, reject) => {
      this.db.batch(levelOps, { sync: opts.sync }, (error) => (error ? reject(error) : resolve()));
    });
  }

  async scan(prefix: string): Promise<Array<[string, Uint8Array]>> {
    const gte = Buffer.from(prefix, 'utf8');
    // No UTF-8 key contains the byte 0xff, so this bounds exactly the keys with the prefix.
    const lt = Buffer.concat([gte, Buffer.from([0xff])]);
    const iterator = this.db.iterator({ gte, lt, keyAsBuffer: false, valueAsBuffer: true });
    const out: Array<[string, Uint8Array]> = [];
    try {
      for (;;) {
        const next = await new Promise<[string, Buffer] | undefined>((resolve, reject) => {
          iterator.next((error, key, value) => {
            if (error) reject(error);
            else resolve(key === undefined || value === undefined ? undefined : [key, value]);
          });
        });
        if (next === undefined) return out;
        out.push(next);
      }
    } finally {
      await new Promise<void>((resolve, reject) => iterator.end((error) => (error ? reject(error) : resolve())));
    }
  }

  close(): Promise<void> {
    return new Promise((resolve, reject) => this.db.close((error) => (error ? reject(error) : resolve())));
  }
}

function isNotFound(error: Error): boolean {
  return error.message.startsWith('NotFound');
}

/** leveldown stringifies anything that is not a Buffer; view the bytes without copying. */
function toBuffer(bytes: Uint8Array): Buffer {
  return Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}
