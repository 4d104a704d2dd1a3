/**
 * Authorization in RabbitMQ's model (docs/security.md, "Permissions"): each user has three
 * regular expressions, configure / write / read, matched unanchored against a queue's or an
 * exchange's name ("" matches nothing), and tags ("administrator" for the user RPCs). Which
 * call needs which permission is the service's (service.ts); this file answers whether the
 * caller has it, from the user's current record, so a change applies to the next check.
 *
 * With authentication off every call is the anonymous principal, which may do everything.
 */
import { BrokerError, Reason, Status } from './errors.js';
import { ADMINISTRATOR_TAG, type Permissions, type UserRecord, type Users } from './users.js';

export type Permission = 'configure' | 'write' | 'read';

export interface Resource {
  readonly kind: 'queue' | 'exchange';
  readonly name: string;
}

/** Who a call is from: a user (authenticated by password or certificate, or named by the peer that proxied the call), or anyone (authentication off). */
export type Principal =
  | { readonly kind: 'user'; readonly user: string; readonly mechanism: 'password' | 'certificate' | 'peer' }
  | { readonly kind: 'anonymous' };

export const ANONYMOUS: Principal = Object.freeze({ kind: 'anonymous' });

/** The default exchange ("") as permissions name it, like RabbitMQ. */
export const DEFAULT_EXCHANGE_NAME = 'amq.default';

export const queue = (name: string): Resource => ({ kind: 'queue', name });
export const exchange = (name: string): Resource => ({ kind: 'exchange', name: name === '' ? DEFAULT_EXCHANGE_NAME : name });

interface Compiled {
  readonly configure: RegExp | null;
  readonly write: RegExp | null;
  readonly read: RegExp | null;
}

function compile(pattern: string): RegExp | null {
  if (pattern === '') return null;
  try {
    return new RegExp(pattern, 'u');
  } catch {
    // Checked before it was stored; a record restored from elsewhere that is not a pattern grants nothing.
    return null;
  }
}

export const accessRefused = (message: string): BrokerError => new BrokerError(Status.PERMISSION_DENIED, Reason.ACCESS_REFUSED, message);

export class AccessControl {
  /** Patterns compiled once per permissions record (records are replaced, never changed). */
  private readonly compiled = new WeakMap<Permissions, Compiled>();

  constructor(private readonly users: () => Users) {}

  /** The user's current record (null for anonymous, or a user deleted since it authenticated). */
  recordOf(principal: Principal): UserRecord | null {
    return principal.kind === 'anonymous' ? null : (this.users().get(principal.user) ?? null);
  }

  allowed(principal: Principal, permission: Permission, resource: Resource): boolean {
    if (principal.kind === 'anonymous') return true;
    const permissions = this.users().get(principal.user)?.permissions ?? null;
    if (permissions === null) return false;
    let compiled = this.compiled.get(permissions);
    if (compiled === undefined) {
      compiled = { configure: compile(permissions.configure), write: compile(permissions.write), read: compile(permissions.read) };
      this.compiled.set(permissions, compiled);
    }
    const pattern = compiled[permission];
    if (pattern === null) return false;
    pattern.lastIndex = 0;
    return pattern.test(resource.name);
  }

  /** Throws PERMISSION_DENIED / ACCESS_REFUSED naming the permission missing. */
  require(principal: Principal, permission: Permission, resource: Resource): void {
    if (this.allowed(principal, permission, resource)) return;
    throw accessRefused(`${describe(principal)} has no ${permission} permission on ${resource.kind} ${JSON.stringify(resource.name)}`);
  }

  /** One of several permissions on a resource (a passive declare, a status). */
  requireAny(principal: Principal, permissions: readonly Permission[], resource: Resource): void {
    if (permissions.some((permission) => this.allowed(principal, permission, resource))) return;
    throw accessRefused(`${describe(principal)} has none of the ${permissions.join(' / ')} permissions on ${resource.kind} ${JSON.stringify(resource.name)}`);
  }

  requireAdministrator(principal: Principal): void {
    if (principal.kind === 'anonymous') return;
    const record = this.users().get(principal.user);
    if (record?.tags.includes(ADMINISTRATOR_TAG) === true) return;
    throw accessRefused(`${describe(principal)} does not have the ${ADMINISTRATOR_TAG} tag this call needs`);
  }
}

const describe = (principal: Principal): string => (principal.kind === 'anonymous' ? 'anonymous' : `user ${JSON.stringify(principal.user)}`);
