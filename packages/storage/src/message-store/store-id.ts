/**
 * `store.id`: the random id of a message store, one line of 32 lowercase hex digits. A
 * replica's snapshot keeps it next to its record ids, so that the ids are never looked up in
 * another store (a node whose data directory was replaced).
 *
 * Created durably (written, datasynced, its directory entry synced) before the first segment
 * file, so a directory with segments always has a complete `store.id`: one that is missing
 * or damaged there is not the trace of a crash, and opening refuses to guess.
 */
import { randomBytes } from 'node:crypto';
import { errnoCode, MessageStoreCorruptionError } from '../errors.js';
import { joinPath, type WalFs } from '../wal-fs.js';

export const STORE_ID_FILE = 'store.id';
const STORE_ID = /^[0-9a-f]{32}$/;

export function randomStoreId(): string {
  return randomBytes(16).toString('hex');
}

/**
 * The id in `dir`, created with `newId` when the directory has no segments yet and no
 * complete id (never opened, or a crash during the first open).
 */
export async function openStoreId(fs: WalFs, dir: string, hasSegments: boolean, newId: () => string): Promise<string> {
  const path = joinPath(dir, STORE_ID_FILE);
  const found = await readStoreId(fs, path);
  if (found.id !== null) return found.id;
  if (hasSegments) {
    throw new MessageStoreCorruptionError(
      `message store ${dir}: ${STORE_ID_FILE} is ${found.problem}, but the directory holds segment files. ` +
        `Restore ${path} from a backup, or remove the directory to start the node with an empty store (its replicas then recover their messages from their peers).`,
    );
  }
  const id = newId();
  if (!STORE_ID.test(id)) throw new TypeError(`a store id must be 32 lowercase hex digits, got ${JSON.stringify(id)}`);
  const file = await fs.openAppend(path);
  try {
    await file.truncate(0); // the torn leftover of a crash during the first open
    await file.write(Buffer.from(`${id}\n`, 'utf8'));
    await file.datasync();
  } finally {
    await file.close();
  }
  await fs.syncDir(dir);
  return id;
}

async function readStoreId(fs: WalFs, path: string): Promise<{ id: string | null; problem: string }> {
  let bytes: Uint8Array;
  try {
    bytes = await fs.readFile(path);
  } catch (error) {
    if (errnoCode(error) === 'ENOENT') return { id: null, problem: 'missing' };
    throw error;
  }
  const text = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('utf8');
  const id = text.endsWith('\n') ? text.slice(0, -1) : null;
  if (id === null || !STORE_ID.test(id)) return { id: null, problem: `damaged (${bytes.byteLength} bytes that are not a store id)` };
  return { id, problem: '' };
}
