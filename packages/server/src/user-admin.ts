/**
 * The user RPCs (PutUser, DeleteUser, ListUsers, SetPermissions, ClearPermissions, WhoAmI):
 * checked here, hashed here (never in the machine: the salt is random), then proposed to
 * the metadata group, so every node enforces the same users once it applied the change.
 * Each change writes an audit line with the user who made it.
 */
import { quorumq } from '@quorumq/proto';
import type { Logger } from 'pino';
import safeRegex from 'safe-regex2';

import type { AccessControl, Principal } from './access-control.js';
import { BrokerError, Reason, Status, invalidArgument } from './errors.js';
import type { MetaCommand, MetaReply } from './meta-machine.js';
import { hashPassword } from './password-hash.js';
import { permissionsProblem, tagsProblem, userNameProblem, type Permissions, type UserRecord, type Users } from './users.js';

import pb = quorumq.v1;

/** A password longer than this is refused (scrypt reads all of it). */
export const PASSWORD_BYTES_MAX = 1024;

export interface UserAdminParts {
  readonly users: () => Users;
  readonly access: AccessControl;
  readonly authenticationRequired: boolean;
  readonly propose: (command: MetaCommand) => Promise<MetaReply>;
  readonly metaError: (reply: Extract<MetaReply, { ok: false }>) => BrokerError;
  readonly logger: Logger;
}

const who = (principal: Principal): string => (principal.kind === 'anonymous' ? '(anonymous)' : principal.user);

function checked<T>(problem: string | null, value: T): T {
  if (problem !== null) throw invalidArgument(problem);
  return value;
}

/**
 * A pattern that could take exponential time on some name (nested quantifiers, e.g.
 * `(a+)+$`) is refused here, before it is proposed: every node matches it on the event loop,
 * so one such pattern could stall them all. (The machine checks only the syntax: a check
 * whose verdict a library upgrade could change must not decide what a replica applies.)
 */
function permissionsFromWire(permissions: pb.Permissions.$Properties | null | undefined): Permissions {
  const p = { configure: permissions?.configure ?? '', write: permissions?.write ?? '', read: permissions?.read ?? '' };
  checked(permissionsProblem(p), p);
  for (const key of ['configure', 'write', 'read'] as const) {
    if (!safeRegex(p[key])) {
      throw invalidArgument(`${key} ${JSON.stringify(p[key])} may take exponential time to match (nested quantifiers such as (a+)+); write it without them`);
    }
  }
  return p;
}

const permissionsToWire = (permissions: Permissions | null): pb.Permissions.$Properties | null =>
  permissions === null ? null : { configure: permissions.configure, write: permissions.write, read: permissions.read };

export class UserAdmin {
  constructor(private readonly parts: UserAdminParts) {}

  private async change(principal: Principal, command: MetaCommand, audit: Record<string, unknown>): Promise<Extract<MetaReply, { ok: true }>> {
    this.parts.access.requireAdministrator(principal);
    const reply = await this.parts.propose(command);
    if (!reply.ok) throw this.parts.metaError(reply);
    this.parts.logger.info({ audit: command.type, by: who(principal), ...audit, changed: reply.changed }, 'user administration');
    return reply;
  }

  async putUser(request: pb.PutUserRequest, principal: Principal): Promise<pb.PutUserResponse.$Properties> {
    const name = checked(userNameProblem(request.name), request.name);
    const tags = checked(tagsProblem(request.tags), [...request.tags]);
    const password = request.password ?? null;
    if (password !== null && (password.length === 0 || Buffer.byteLength(password) > PASSWORD_BYTES_MAX)) {
      throw invalidArgument(`a password is 1 to ${PASSWORD_BYTES_MAX} bytes (leave it unset for a user that authenticates with a client certificate)`);
    }
    // The caller's right first: a refused caller does not get a hash computed for it.
    this.parts.access.requireAdministrator(principal);
    const passwordHash = password === null ? undefined : await hashPassword(password);
    const reply = await this.change(
      principal,
      { type: 'putUser', name, tags, ...(passwordHash !== undefined ? { passwordHash } : {}) },
      { user: name, tags, passwordChanged: passwordHash !== undefined },
    );
    return { created: reply.created === true };
  }

  async deleteUser(request: pb.DeleteUserRequest, principal: Principal): Promise<pb.DeleteUserResponse.$Properties> {
    const name = checked(userNameProblem(request.name), request.name);
    await this.change(principal, { type: 'deleteUser', name }, { user: name });
    return {};
  }

  async setPermissions(request: pb.SetPermissionsRequest, principal: Principal): Promise<pb.SetPermissionsResponse.$Properties> {
    const name = checked(userNameProblem(request.user), request.user);
    if (request.permissions == null) throw invalidArgument('set_permissions needs permissions (configure, write, read)');
    const permissions = permissionsFromWire(request.permissions);
    await this.change(principal, { type: 'setPermissions', name, permissions }, { user: name, permissions });
    return {};
  }

  async clearPermissions(request: pb.ClearPermissionsRequest, principal: Principal): Promise<pb.ClearPermissionsResponse.$Properties> {
    const name = checked(userNameProblem(request.user), request.user);
    await this.change(principal, { type: 'clearPermissions', name }, { user: name });
    return {};
  }

  listUsers(principal: Principal): pb.ListUsersResponse.$Properties {
    this.parts.access.requireAdministrator(principal);
    return { users: this.parts.users().all().map(userInfo) };
  }

  whoAmI(principal: Principal): pb.WhoAmIResponse.$Properties {
    const required = this.parts.authenticationRequired;
    if (principal.kind === 'anonymous') return { user: '', mechanism: 'none', tags: [], permissions: null, authenticationRequired: required };
    const record = this.parts.users().get(principal.user);
    if (record === undefined) throw new BrokerError(Status.UNAUTHENTICATED, Reason.UNAUTHENTICATED, 'authentication failed: invalid credentials');
    return { user: record.name, mechanism: principal.mechanism, tags: [...record.tags], permissions: permissionsToWire(record.permissions), authenticationRequired: required };
  }
}

const userInfo = (record: UserRecord): pb.UserInfo.$Properties => ({
  name: record.name,
  tags: [...record.tags],
  hasPassword: record.passwordHash !== null,
  permissions: permissionsToWire(record.permissions),
});

/** What the first administrator is given: the administrator tag and every permission. */
export const FIRST_ADMINISTRATOR_PERMISSIONS: Permissions = { configure: '.*', write: '.*', read: '.*' };

/**
 * Creates the configured first administrator unless a user of its name exists (every node
 * proposes it once it serves; `ifAbsent` makes the later ones change nothing, and a password
 * changed since through the API stays). Retries while the metadata group has no leader.
 */
export async function ensureFirstAdministrator(
  admin: { readonly user: string; readonly password: string },
  parts: Pick<UserAdminParts, 'users' | 'propose' | 'logger'>,
  stopped: () => boolean,
  sleep: (ms: number) => Promise<void>,
): Promise<void> {
  if (parts.users().get(admin.user) !== undefined) return;
  const passwordHash = await hashPassword(admin.password);
  for (let attempt = 0; !stopped(); attempt += 1) {
    if (parts.users().get(admin.user) !== undefined) return;
    try {
      const reply = await parts.propose({
        type: 'putUser',
        name: admin.user,
        passwordHash,
        tags: ['administrator'],
        permissions: FIRST_ADMINISTRATOR_PERMISSIONS,
        ifAbsent: true,
      });
      if (reply.ok) {
        if (reply.created === true) parts.logger.info({ audit: 'putUser', by: '(configuration)', user: admin.user, tags: ['administrator'] }, 'created the first administrator');
        return;
      }
      parts.logger.error({ user: admin.user, reason: reply.reason, message: reply.message }, 'could not create the first administrator');
      return;
    } catch (error) {
      if (attempt % 10 === 0) parts.logger.warn({ err: error, user: admin.user }, 'creating the first administrator failed; retrying');
      await sleep(Math.min(5000, 200 * (attempt + 1)));
    }
  }
}
