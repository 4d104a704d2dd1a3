/**
 * The cluster's users and their permissions, as the metadata group replicates them
 * (docs/security.md). Part of MetaMachine's state: pure and deterministic, no clock, no
 * hashing (a password arrives already hashed in the command: password-hash.ts runs on the
 * node that received the admin call). Records are immutable: a change makes a new one, so
 * a reader may key caches on a record's identity (access-rules.ts).
 */
import { Reason } from '@quorumq/proto/errors';

import type { MetaErrorCode } from './meta-machine.js';

/** RabbitMQ's three permissions: regular expressions over queue and exchange names. */
export interface Permissions {
  readonly configure: string;
  readonly write: string;
  readonly read: string;
}

export interface UserRecord {
  readonly name: string;
  /** The password's hash (password-hash.ts, a PHC string), or null: certificate only. */
  readonly passwordHash: string | null;
  readonly tags: readonly string[];
  /** Null: none set (the user may do nothing on queues and exchanges). */
  readonly permissions: Permissions | null;
}

export const ADMINISTRATOR_TAG = 'administrator';

/** Limits checked on every replica (meta-command.ts) and before a proposal (service). */
export const USER_NAME_BYTES_MAX = 255;
export const USER_TAGS_MAX = 16;
export const PERMISSION_PATTERN_LENGTH_MAX = 4096;
export const PASSWORD_HASH_LENGTH_MAX = 512;
const TAG = /^[A-Za-z0-9_.-]{1,64}$/;

export type UserCommand =
  | {
      readonly type: 'putUser';
      readonly name: string;
      /** Undefined: a new user gets none, an existing one keeps its own. */
      readonly passwordHash?: string | null;
      readonly tags: readonly string[];
      /** Set on a new user only (the first administrator gets every permission). */
      readonly permissions?: Permissions;
      /** Change nothing when the user exists (the first administrator, proposed by every node at start). */
      readonly ifAbsent?: boolean;
    }
  | { readonly type: 'deleteUser'; readonly name: string }
  | { readonly type: 'setPermissions'; readonly name: string; readonly permissions: Permissions }
  | { readonly type: 'clearPermissions'; readonly name: string };

export type UserReply =
  | { readonly ok: true; readonly changed: boolean; readonly created?: boolean }
  | { readonly ok: false; readonly code: MetaErrorCode; readonly reason: string; readonly message: string };

/** A user name's problem, or null: not empty, at most 255 bytes, no ':' (Basic credentials split there), no control characters. */
export function userNameProblem(name: unknown): string | null {
  if (typeof name !== 'string' || name.length === 0) return 'a user name must not be empty';
  if (Buffer.byteLength(name) > USER_NAME_BYTES_MAX) return `a user name is at most ${USER_NAME_BYTES_MAX} bytes`;
  if (name.includes(':')) return 'a user name must not contain ":"';
  // eslint-disable-next-line no-control-regex
  if (/[\u0000-\u001f\u007f]/.test(name)) return 'a user name must not contain control characters';
  return null;
}

export function tagsProblem(tags: unknown): string | null {
  if (!Array.isArray(tags)) return 'tags must be a list of strings';
  if (tags.length > USER_TAGS_MAX) return `a user has at most ${USER_TAGS_MAX} tags`;
  for (const tag of tags) {
    if (typeof tag !== 'string' || !TAG.test(tag)) return `a tag is 1 to 64 letters, digits, "_", "." or "-", got ${JSON.stringify(tag)}`;
  }
  return null;
}

/** A permission pattern's problem, or null: a JavaScript regular expression of at most 4,096 characters. */
export function patternProblem(what: string, pattern: unknown): string | null {
  if (typeof pattern !== 'string') return `${what} must be a string (a regular expression; "" matches nothing)`;
  if (pattern.length > PERMISSION_PATTERN_LENGTH_MAX) return `${what} is at most ${PERMISSION_PATTERN_LENGTH_MAX} characters`;
  try {
    new RegExp(pattern, 'u');
  } catch (error) {
    return `${what} is not a regular expression: ${error instanceof Error ? error.message : String(error)}`;
  }
  return null;
}

export function permissionsProblem(permissions: unknown): string | null {
  if (typeof permissions !== 'object' || permissions === null) return 'permissions must be an object with configure, write and read';
  const p = permissions as Record<string, unknown>;
  return patternProblem('configure', p['configure']) ?? patternProblem('write', p['write']) ?? patternProblem('read', p['read']);
}

const notFound = (name: string): UserReply => ({
  ok: false,
  code: 'NOT_FOUND',
  reason: Reason.USER_NOT_FOUND,
  message: `user ${JSON.stringify(name)} does not exist`,
});

export class Users {
  private readonly records = new Map<string, UserRecord>();

  get(name: string): UserRecord | undefined {
    return this.records.get(name);
  }

  get size(): number {
    return this.records.size;
  }

  all(): UserRecord[] {
    return [...this.records.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  }

  /** Applies a checked command (meta-command.ts); never throws. */
  apply(command: UserCommand): UserReply {
    const existing = this.records.get(command.name);
    switch (command.type) {
      case 'putUser': {
        if (existing !== undefined && command.ifAbsent === true) return { ok: true, changed: false, created: false };
        const record: UserRecord = {
          name: command.name,
          passwordHash: command.passwordHash === undefined ? (existing?.passwordHash ?? null) : command.passwordHash,
          tags: [...command.tags],
          permissions: existing === undefined ? (command.permissions ?? null) : existing.permissions,
        };
        this.records.set(command.name, record);
        return { ok: true, changed: true, created: existing === undefined };
      }
      case 'deleteUser':
        if (existing === undefined) return notFound(command.name);
        this.records.delete(command.name);
        return { ok: true, changed: true };
      case 'setPermissions':
        if (existing === undefined) return notFound(command.name);
        this.records.set(command.name, { ...existing, permissions: { ...command.permissions } });
        return { ok: true, changed: true };
      case 'clearPermissions':
        if (existing === undefined) return notFound(command.name);
        this.records.set(command.name, { ...existing, permissions: null });
        return { ok: true, changed: existing.permissions !== null };
    }
  }

  snapshot(): UserRecord[] {
    return this.all();
  }

  /** Replaces the state with a snapshot's records; a record that fails the checks is skipped (a snapshot is untrusted input too). */
  restore(records: unknown): void {
    this.records.clear();
    if (!Array.isArray(records)) return;
    for (const value of records) {
      const record = recordOf(value);
      if (record !== null) this.records.set(record.name, record);
    }
  }
}

function recordOf(value: unknown): UserRecord | null {
  if (typeof value !== 'object' || value === null) return null;
  const v = value as Record<string, unknown>;
  const { name, passwordHash, tags, permissions } = v;
  if (userNameProblem(name) !== null || tagsProblem(tags) !== null) return null;
  if (passwordHash !== null && !(typeof passwordHash === 'string' && passwordHash.length <= PASSWORD_HASH_LENGTH_MAX)) return null;
  if (permissions !== null && permissionsProblem(permissions) !== null) return null;
  const p = permissions as Permissions | null;
  return {
    name: name as string,
    passwordHash: passwordHash as string | null,
    tags: [...(tags as string[])],
    permissions: p === null ? null : { configure: p.configure, write: p.write, read: p.read },
  };
}
