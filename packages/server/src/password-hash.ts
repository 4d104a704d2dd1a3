/**
 * Passwords as a memory-hard hash: scrypt (RFC 7914) from Node's own crypto module (OpenSSL's
 * implementation, maintained with Node; no native add-on to build or prebuilt binary to
 * fetch at install), run on libuv's thread pool so the event loop never waits for it.
 *
 * Stored as a PHC string, `$scrypt$ln=15,r=8,p=3$<salt>$<hash>` (base64 without padding):
 * the parameters travel with each hash, so they can be raised later and old hashes still
 * verify. The defaults follow OWASP's password storage guidance for scrypt (N = 2^15, r = 8,
 * p = 3: 32 MiB and ~0.1-0.2 s of one core per hash here).
 */
import { randomBytes, scrypt, timingSafeEqual } from 'node:crypto';

export interface ScryptParameters {
  /** log2 of N, the CPU/memory cost. */
  readonly ln: number;
  readonly r: number;
  readonly p: number;
}

export const DEFAULT_SCRYPT: ScryptParameters = { ln: 15, r: 8, p: 3 };

const SALT_BYTES = 16;
const HASH_BYTES = 32;
/** Parameters a stored hash may ask for (a forged one must not make a node allocate gigabytes). */
const LN_MAX = 20;
const R_MAX = 32;
const P_MAX = 16;

const b64 = (bytes: Buffer): string => bytes.toString('base64').replace(/=+$/, '');

function derive(password: string, salt: Buffer, params: ScryptParameters, length: number): Promise<Buffer> {
  const N = 2 ** params.ln;
  // scrypt needs 128 * N * r bytes (and a little more); Node refuses above maxmem.
  const maxmem = 128 * N * params.r * 2 + 1024 * 1024;
  return new Promise((resolve, reject) => {
    scrypt(password.normalize('NFC'), salt, length, { N, r: params.r, p: params.p, maxmem }, (error, key) => (error ? reject(error) : resolve(key)));
  });
}

/** A new hash of `password` with a random salt. */
export async function hashPassword(password: string, params: ScryptParameters = DEFAULT_SCRYPT): Promise<string> {
  const salt = randomBytes(SALT_BYTES);
  const hash = await derive(password, salt, params, HASH_BYTES);
  return `$scrypt$ln=${params.ln},r=${params.r},p=${params.p}$${b64(salt)}$${b64(hash)}`;
}

interface Parsed {
  readonly params: ScryptParameters;
  readonly salt: Buffer;
  readonly hash: Buffer;
}

const PHC = /^\$scrypt\$ln=(\d{1,2}),r=(\d{1,2}),p=(\d{1,2})\$([A-Za-z0-9+/]{1,88})\$([A-Za-z0-9+/]{16,172})$/;

/** The parts of a stored hash, or null when it is not one this node can check. */
export function parsePasswordHash(stored: string): Parsed | null {
  const match = PHC.exec(stored);
  if (match === null) return null;
  const params = { ln: Number(match[1]), r: Number(match[2]), p: Number(match[3]) };
  if (params.ln < 1 || params.ln > LN_MAX || params.r < 1 || params.r > R_MAX || params.p < 1 || params.p > P_MAX) return null;
  return { params, salt: Buffer.from(match[4]!, 'base64'), hash: Buffer.from(match[5]!, 'base64') };
}

/**
 * Whether `password` matches `stored`. A stored value that is not a hash this node can check
 * matches nothing (after the same work, so the answer takes as long).
 */
export async function verifyPassword(password: string, stored: string): Promise<boolean> {
  const parsed = parsePasswordHash(stored);
  if (parsed === null) {
    await derive(password, Buffer.alloc(SALT_BYTES), DEFAULT_SCRYPT, HASH_BYTES);
    return false;
  }
  const hash = await derive(password, parsed.salt, parsed.params, parsed.hash.length);
  return timingSafeEqual(hash, parsed.hash);
}

/** Work as long as checking a password, for a user that does not exist (so the answer does not tell). */
export async function verifyNothing(password: string): Promise<false> {
  await derive(password, Buffer.alloc(SALT_BYTES), DEFAULT_SCRYPT, HASH_BYTES);
  return false;
}
