/**
 * Authentication of client calls (docs/security.md, "Users"). With `requireAuthentication`
 * a call must carry a user's credentials, `authorization: Basic base64(user:password)` in
 * its metadata (the SDK sends them with every call), or come over TLS with a verified client
 * certificate whose identity is a user's name. Without it every call is anonymous and may
 * do everything (the default, for a first try on loopback).
 *
 * A password is checked against the user's scrypt hash once: a success is remembered for
 * those exact credentials while the user's hash stays the one it was checked against (a
 * password change or a deleted user ends it), so a client's later calls cost a map lookup.
 * Checks run at most CHECKS_RUNNING at a time on the thread pool, CHECKS_WAITING more wait;
 * beyond that a call is refused (RESOURCE_EXHAUSTED / AUTHENTICATION_BUSY) rather than
 * letting a flood of wrong passwords take the pool from the disk. Failures are UNAUTHENTICATED
 * with one message whatever was wrong, and take as long for an unknown user as for a wrong
 * password.
 */
import type { Metadata } from '@grpc/grpc-js';
import { AUTHORIZATION_METADATA } from '@quorumq/proto/errors';

import { ANONYMOUS, type Principal } from './access-control.js';
import { BrokerError, Reason, Status, resourceExhausted } from './errors.js';
import { verifyNothing, verifyPassword } from './password-hash.js';
import type { Users } from './users.js';

export const CHECKS_RUNNING = 2;
export const CHECKS_WAITING = 256;
/** Remembered successes; the map is emptied when it is full (a client's next call checks again). */
export const REMEMBERED_MAX = 10_000;

export const INVALID_CREDENTIALS = 'authentication failed: invalid credentials';
export const NO_CREDENTIALS =
  'this node requires authentication: send a user and password (the SDK\'s `auth` option, metadata "authorization: Basic ...") or use a client certificate';

export const unauthenticated = (message: string): BrokerError => new BrokerError(Status.UNAUTHENTICATED, Reason.UNAUTHENTICATED, message);

/** What a call offers to authenticate with. */
export interface CallCredentials {
  readonly metadata: Metadata;
  /** The identity of the call's verified TLS client certificate, if any (tls-identity.ts). */
  readonly certificateIdentity: string | null;
  /** The caller's address, for the audit line. */
  readonly peer: string;
}

export interface AuthenticationFailure {
  readonly user: string | null;
  readonly mechanism: 'password' | 'certificate' | 'none';
  readonly peer: string;
}

/** A refused call: what the audit line says, and the message the caller gets. */
export interface Refusal {
  readonly failure: AuthenticationFailure;
  readonly message: string;
}

export class ClientAuthenticator {
  /** Basic credentials that matched -> the user and the hash they matched. */
  private readonly remembered = new Map<string, { readonly user: string; readonly hash: string }>();
  /** Checks under way, by credentials: concurrent calls of one client wait for one check. */
  private readonly checking = new Map<string, Promise<boolean>>();
  private running = 0;
  private readonly waiting: Array<() => void> = [];

  constructor(
    readonly required: boolean,
    private readonly users: () => Users,
    private readonly onFailure: (failure: AuthenticationFailure) => void,
  ) {}

  /** The call's principal; throws UNAUTHENTICATED (reported) or AUTHENTICATION_BUSY. */
  async authenticate(call: CallCredentials): Promise<Principal> {
    const result = await this.check(call);
    if ('kind' in result) return result;
    return this.refuse(result);
  }

  /** The call's principal, or why it is refused (not reported yet: see refuse). Throws AUTHENTICATION_BUSY. */
  async check(call: CallCredentials): Promise<Principal | Refusal> {
    if (!this.required) return ANONYMOUS;
    const values = call.metadata.get(AUTHORIZATION_METADATA);
    if (values.length > 0) {
      const header = values.length === 1 && typeof values[0] === 'string' ? values[0] : null;
      const credentials = header === null ? null : parseBasic(header);
      if (header === null || credentials === null) return { failure: { user: null, mechanism: 'password', peer: call.peer }, message: INVALID_CREDENTIALS };
      if (await this.checkPassword(header, credentials.user, credentials.password)) {
        return { kind: 'user', user: credentials.user, mechanism: 'password' };
      }
      return { failure: { user: credentials.user, mechanism: 'password', peer: call.peer }, message: INVALID_CREDENTIALS };
    }
    if (call.certificateIdentity !== null) {
      if (this.users().get(call.certificateIdentity) !== undefined) return { kind: 'user', user: call.certificateIdentity, mechanism: 'certificate' };
      return { failure: { user: call.certificateIdentity, mechanism: 'certificate', peer: call.peer }, message: INVALID_CREDENTIALS };
    }
    return { failure: { user: null, mechanism: 'none', peer: call.peer }, message: NO_CREDENTIALS };
  }

  /** Reports a refusal (the audit line) and throws its UNAUTHENTICATED. */
  refuse(refusal: Refusal): never {
    this.onFailure(refusal.failure);
    throw unauthenticated(refusal.message);
  }

  private async checkPassword(header: string, user: string, password: string): Promise<boolean> {
    const record = this.users().get(user);
    const known = this.remembered.get(header);
    if (known !== undefined && record !== undefined && known.user === user && record.passwordHash === known.hash) return true;
    const hash = record?.passwordHash ?? null;
    const key = `${hash ?? ''}\n${header}`;
    let check = this.checking.get(key);
    if (check === undefined) {
      check = this.limited(() => (hash === null ? verifyNothing(password) : verifyPassword(password, hash))).finally(() => this.checking.delete(key));
      this.checking.set(key, check);
    }
    const ok = await check;
    if (ok && hash !== null) {
      if (this.remembered.size >= REMEMBERED_MAX) this.remembered.clear();
      this.remembered.set(header, { user, hash });
    }
    return ok;
  }

  private async limited<T>(run: () => Promise<T>): Promise<T> {
    if (this.running >= CHECKS_RUNNING) {
      if (this.waiting.length >= CHECKS_WAITING) {
        throw resourceExhausted(Reason.AUTHENTICATION_BUSY, 'too many password checks are waiting on this node; retry later');
      }
      await new Promise<void>((resolve) => this.waiting.push(resolve));
    } else {
      this.running += 1;
    }
    try {
      return await run();
    } finally {
      const next = this.waiting.shift();
      // The slot passes to the next waiter as it is.
      if (next !== undefined) next();
      else this.running -= 1;
    }
  }
}

/** `Basic base64(user:password)` (RFC 7617), or null. */
export function parseBasic(header: string): { user: string; password: string } | null {
  const match = /^Basic ([A-Za-z0-9+/]+={0,2})$/i.exec(header.trim());
  if (match === null) return null;
  const decoded = Buffer.from(match[1]!, 'base64').toString('utf8');
  const colon = decoded.indexOf(':');
  if (colon <= 0) return null;
  return { user: decoded.slice(0, colon), password: decoded.slice(colon + 1) };
}
