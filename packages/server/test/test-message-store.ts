/**
 * A real message store (packages/storage) on a fresh temporary directory, for the tests of
 * queue replicas. Open one per file (top-level await or beforeAll) and close it in afterAll:
 *
 *   const stores = new TestStores();
 *   const store = await stores.open();
 *   afterAll(() => stores.closeAll());
 */
import { MessageStore, NodeWalFs, type MessageStoreOptions } from '@quorumq/storage';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { decodeQueueSnapshot, encodeQueueSnapshot } from '../src/log-format.js';

/** What a store reported (damaged records, failed writes): a test can assert there was none. */
export class StoreWarnings {
  readonly messages: string[] = [];
  readonly logger = { warn: (message: string): void => void this.messages.push(message) };
}

export interface OpenOptions extends Partial<Omit<MessageStoreOptions, 'dir' | 'fs' | 'logger'>> {
  /** The directory (default: a new temporary one). Reopening a closed store's directory reopens that store. */
  readonly dir?: string;
  /**
   * Call `recovered()` at once (default true): a fresh store has nothing to adopt. Pass false
   * when the test adopts records first (AdoptedBodies.collect calls `recovered()` itself).
   */
  readonly recovered?: boolean;
}

export interface OpenedStore {
  readonly store: MessageStore;
  readonly dir: string;
  readonly warnings: StoreWarnings;
}

/** Opens stores on temporary directories and closes and removes them all at the end. */
export class TestStores {
  private readonly open_ = new Set<MessageStore>();
  private readonly dirs = new Set<string>();

  /** A new store on a new temporary directory (or `options.dir`). */
  async openWith(options: OpenOptions = {}): Promise<OpenedStore> {
    const { dir: given, recovered = true, ...rest } = options;
    const dir = given ?? (await mkdtemp(join(tmpdir(), 'quorumq-store-')));
    this.dirs.add(dir);
    const warnings = new StoreWarnings();
    const store = await MessageStore.open({ dir, fs: new NodeWalFs(), logger: warnings.logger, ...rest });
    if (recovered) store.recovered();
    this.open_.add(store);
    return { store, dir, warnings };
  }

  /** A new store on a new temporary directory, recovered (ready for puts and releases). */
  async open(options: OpenOptions = {}): Promise<MessageStore> {
    return (await this.openWith(options)).store;
  }

  /** Closes one store (its directory stays until closeAll). */
  async close(store: MessageStore): Promise<void> {
    this.open_.delete(store);
    await store.close();
  }

  /** Closes every store still open and removes every directory. */
  async closeAll(): Promise<void> {
    const stores = [...this.open_];
    this.open_.clear();
    await Promise.all(stores.map((store) => store.close()));
    const dirs = [...this.dirs];
    this.dirs.clear();
    await Promise.all(dirs.map((dir) => rm(dir, { recursive: true, force: true })));
  }
}

/**
 * The portable form of a local snapshot `data` of `replica`: every message it lists with its
 * bytes inline, as releases before the message store saved (and their leaders sent) them.
 * Null when `data` is portable already.
 */
export function portableOf(replica: { bodies: { read(id: number): Uint8Array | undefined } }, data: Uint8Array): Uint8Array | null {
  const snapshot = decodeQueueSnapshot(data);
  if (snapshot.refs === null) return null;
  const messages: Array<readonly [number, Uint8Array]> = [];
  for (const id of snapshot.refs.messageIds) {
    const bytes = replica.bodies.read(id);
    if (bytes === undefined) throw new Error(`message ${id} has no bytes`);
    messages.push([id, bytes]);
  }
  return encodeQueueSnapshot(snapshot.machine, messages);
}
