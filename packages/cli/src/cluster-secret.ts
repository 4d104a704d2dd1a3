/**
 * The cluster secret of a local cluster (`quorumq cluster`, LocalCluster): made at random
 * the first time, kept in the cluster's data directory (readable by its owner only), so a
 * restart with the same data finds the same one. Nodes get the file's path
 * (QUORUMQ_CLUSTER_SECRET_FILE), not the secret itself.
 */
import { randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

export const CLUSTER_SECRET_FILE = 'cluster-secret';

/** The path of `dir`'s secret file, made (32 random bytes, hex) when there is none yet. */
export function ensureClusterSecret(dir: string): string {
  mkdirSync(dir, { recursive: true });
  const file = join(dir, CLUSTER_SECRET_FILE);
  try {
    if (readFileSync(file, 'utf8').trim() !== '') return file;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
  }
  // 'wx': never overwrite a secret another process made meanwhile.
  try {
    writeFileSync(file, `${randomBytes(32).toString('hex')}\n`, { mode: 0o600, flag: 'wx' });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
  }
  return file;
}
