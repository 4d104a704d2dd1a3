/**
 * The small key-value store NodeStorage keeps beside the WAL: group membership, snapshots
 * and hard-state checkpoints. Keys are strings (ordered by their UTF-8 bytes), values bytes.
 *
 * Durability contract: a batch is atomic (all of its ops or none survive a crash) and
 * batches are applied in call order. A batch with `sync: true` is durable, together with
 * every batch before it, when its promise resolves. A batch with `sync: false` may be lost
 * in a crash (with everything after it), never torn. NodeStorage only uses `sync: true`.
 */
export type KvOp =
  | { readonly type: 'put'; readonly key: string; readonly value: Uint8Array }
  | { readonly type: 'del'; readonly key: string };

export interface KvStore {
  get(key: string): Promise<Uint8Array | undefined>;
  batch(ops: readonly KvOp[], opts: { readonly sync: boolean }): Promise<void>;
  /** Every entry whose key starts with `prefix`, in ascending key order. */
  scan(prefix: string): Promise<Array<[string, Uint8Array]>>;
  close(): Promise<void>;
}
