import { readdir } from 'node:fs/promises';
import { NodeWalFs } from '../src/node-wal-fs.js';
import { MessageStore } from '../src/message-store/store.js';
import type { MessageStoreOptions } from '../src/message-store/store-options.js';
import type { StoreFs } from '../src/message-store/store-fs.js';

/** Collects what the store reports. */
export class Warnings {
  readonly messages: string[] = [];
  readonly logger = { warn: (message: string): void => void this.messages.push(message) };

  matching(pattern: RegExp): string[] {
    return this.messages.filter((message) => pattern.test(message));
  }
}

export interface Opened {
  readonly store: MessageStore;
  readonly warnings: Warnings;
}

export async function openStore(dir: string, options: Partial<MessageStoreOptions> = {}, fs: StoreFs = new NodeWalFs()): Promise<Opened> {
  const warnings = new Warnings();
  const store = await MessageStore.open({ dir, fs, logger: warnings.logger, ...options });
  return { store, warnings };
}

/** Distinct, checkable bytes for message `i` (a Buffer, as the store's reads are). */
export function message(i: number, bytes = 100): Buffer {
  const out = Buffer.alloc(bytes);
  for (let k = 0; k < bytes; k++) out[k] = (i * 31 + k * 7) & 0xff;
  return out;
}

export async function storeFiles(dir: string, suffix: '.seg' | '.idx'): Promise<string[]> {
  return (await readdir(dir)).filter((name) => name.endsWith(suffix)).sort();
}

/** Fails unless `actual` holds exactly `expected` (fast, unlike a deep toEqual of large buffers). */
export function expectBytes(actual: Uint8Array | undefined, expected: Uint8Array, label = 'bytes'): void {
  if (actual === undefined) throw new Error(`${label}: undefined, expected ${expected.byteLength} bytes`);
  if (Buffer.from(actual.buffer, actual.byteOffset, actual.byteLength).equals(expected)) return;
  let at = 0;
  while (at < Math.min(actual.byteLength, expected.byteLength) && actual[at] === expected[at]) at++;
  throw new Error(`${label}: ${actual.byteLength} bytes differing from the expected ${expected.byteLength} at index ${at}`);
}

/** Waits (polling each turn, real I/O included) until `condition` holds; fails after `timeoutMs`. */
export async function until(condition: () => boolean, what: string, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 1));
  }
}
