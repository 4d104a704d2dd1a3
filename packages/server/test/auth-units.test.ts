/**
 * Authentication and authorization, unit by unit: scrypt hashes (password-hash.ts),
 * RabbitMQ-style permissions (access-control.ts) and the client authenticator
 * (client-auth.ts). The whole path through a cluster is in e2e-auth.test.ts.
 */
import { Metadata } from '@grpc/grpc-js';
import { describe, expect, it } from 'vitest';

import { ANONYMOUS, AccessControl, exchange, queue, type Principal } from '../src/access-control.js';
import { BrokerError } from '../src/errors.js';
import { ClientAuthenticator, INVALID_CREDENTIALS, NO_CREDENTIALS, parseBasic, type AuthenticationFailure } from '../src/client-auth.js';
import { hashPassword, parsePasswordHash, verifyPassword } from '../src/password-hash.js';
import { Users } from '../src/users.js';

const FAST = { ln: 4, r: 8, p: 1 };
const basic = (user: string, password: string): string => `Basic ${Buffer.from(`${user}:${password}`).toString('base64')}`;

describe('password hashes', () => {
  it('verify the password they were made from and no other; each has its own salt', async () => {
    const a = await hashPassword('correct horse', FAST);
    const b = await hashPassword('correct horse', FAST);
    expect(a).toMatch(/^\$scrypt\$ln=4,r=8,p=1\$[A-Za-z0-9+/]+\$[A-Za-z0-9+/]+$/);
    expect(a).not.toBe(b);
    expect(await verifyPassword('correct horse', a)).toBe(true);
    expect(await verifyPassword('correct horsf', a)).toBe(false);
    expect(await verifyPassword('', a)).toBe(false);
  });

  it('the default parameters are memory-hard (N = 2^15, r = 8)', async () => {
    const parsed = parsePasswordHash(await hashPassword('x'));
    expect(parsed?.params).toEqual({ ln: 15, r: 8, p: 3 });
  });

  it('a stored value that is not a hash, or asks for absurd parameters, matches nothing', async () => {
    expect(await verifyPassword('x', 'plaintext')).toBe(false);
    expect(parsePasswordHash('$scrypt$ln=40,r=8,p=1$AAAAAAAAAAAAAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA')).toBeNull();
    expect(parsePasswordHash('$scrypt$ln=14,r=99,p=1$AAAAAAAAAAAAAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA')).toBeNull();
  });
});

function usersWith(...records: Array<{ name: string; permissions?: { configure: string; write: string; read: string }; tags?: string[]; passwordHash?: string | null }>): Users {
  const users = new Users();
  for (const r of records) {
    users.apply({ type: 'putUser', name: r.name, passwordHash: r.passwordHash ?? null, tags: r.tags ?? [] });
    if (r.permissions !== undefined) users.apply({ type: 'setPermissions', name: r.name, permissions: r.permissions });
  }
  return users;
}

const alice: Principal = { kind: 'user', user: 'alice', mechanism: 'password' };

describe('permissions', () => {
  it('match unanchored like RabbitMQ; "" matches nothing; the default exchange is amq.default', () => {
    const users = usersWith({ name: 'alice', permissions: { configure: '^tmp\\.', write: 'orders', read: '' } });
    const access = new AccessControl(() => users);
    expect(access.allowed(alice, 'configure', queue('tmp.1'))).toBe(true);
    expect(access.allowed(alice, 'configure', queue('x.tmp.1'))).toBe(false);
    expect(access.allowed(alice, 'write', exchange('all-orders-eu'))).toBe(true);
    expect(access.allowed(alice, 'read', queue(''))).toBe(false);
    expect(access.allowed(alice, 'read', queue('anything'))).toBe(false);
    expect(exchange('').name).toBe('amq.default');
    const defaultOnly = usersWith({ name: 'alice', permissions: { configure: '', write: '^amq\\.default$', read: '' } });
    expect(new AccessControl(() => defaultOnly).allowed(alice, 'write', exchange(''))).toBe(true);
  });

  it('a refusal is PERMISSION_DENIED / ACCESS_REFUSED naming the permission and the resource', () => {
    const users = usersWith({ name: 'alice', permissions: { configure: '', write: '', read: '.*' } });
    const access = new AccessControl(() => users);
    let error: unknown;
    try {
      access.require(alice, 'write', exchange('orders'));
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(BrokerError);
    expect((error as BrokerError).code).toBe(7);
    expect((error as BrokerError).reason).toBe('ACCESS_REFUSED');
    expect((error as BrokerError).message).toBe('user "alice" has no write permission on exchange "orders"');
  });

  it('a user without permissions, or deleted since it authenticated, may do nothing; anonymous (authentication off) everything', () => {
    const users = usersWith({ name: 'alice' });
    const access = new AccessControl(() => users);
    expect(access.allowed(alice, 'read', queue('q'))).toBe(false);
    expect(access.allowed({ kind: 'user', user: 'gone', mechanism: 'password' }, 'read', queue('q'))).toBe(false);
    expect(access.allowed(ANONYMOUS, 'configure', queue('q'))).toBe(true);
  });

  it('a change of permissions applies to the next check', () => {
    const users = usersWith({ name: 'alice', permissions: { configure: '', write: '', read: '' } });
    const access = new AccessControl(() => users);
    expect(access.allowed(alice, 'read', queue('q'))).toBe(false);
    users.apply({ type: 'setPermissions', name: 'alice', permissions: { configure: '', write: '', read: '^q$' } });
    expect(access.allowed(alice, 'read', queue('q'))).toBe(true);
  });

  it('user administration needs the administrator tag', () => {
    const users = usersWith({ name: 'alice', permissions: { configure: '.*', write: '.*', read: '.*' } }, { name: 'root', tags: ['administrator'] });
    const access = new AccessControl(() => users);
    expect(() => access.requireAdministrator(alice)).toThrow('user "alice" does not have the administrator tag this call needs');
    expect(() => access.requireAdministrator({ kind: 'user', user: 'root', mechanism: 'password' })).not.toThrow();
  });
});

describe('the client authenticator', () => {
  async function setup() {
    const users = new Users();
    users.apply({ type: 'putUser', name: 'alice', passwordHash: await hashPassword('s3cret', FAST), tags: [] });
    users.apply({ type: 'putUser', name: 'carol', passwordHash: null, tags: [] });
    const failures: AuthenticationFailure[] = [];
    const auth = new ClientAuthenticator(true, () => users, (f) => failures.push(f));
    const call = (headers: Record<string, string>, certificateIdentity: string | null = null) => {
      const metadata = new Metadata();
      for (const [k, v] of Object.entries(headers)) metadata.set(k, v);
      return { metadata, certificateIdentity, peer: 'ipv4:127.0.0.1:5555' };
    };
    return { users, auth, failures, call };
  }

  const refusal = (promise: Promise<unknown>) =>
    promise.then(
      () => null,
      (error: BrokerError) => ({ code: error.code, reason: error.reason, message: error.message }),
    );

  it('accepts the right password and a certificate naming a user', async () => {
    const { auth, call } = await setup();
    expect(await auth.authenticate(call({ authorization: basic('alice', 's3cret') }))).toEqual({ kind: 'user', user: 'alice', mechanism: 'password' });
    expect(await auth.authenticate(call({}, 'carol'))).toEqual({ kind: 'user', user: 'carol', mechanism: 'certificate' });
  });

  it('refuses a wrong password and an unknown user with the same UNAUTHENTICATED message, and reports each', async () => {
    const { auth, call, failures } = await setup();
    const wrong = await refusal(auth.authenticate(call({ authorization: basic('alice', 'nope') })));
    const unknown = await refusal(auth.authenticate(call({ authorization: basic('mallory', 'nope') })));
    const garbage = await refusal(auth.authenticate(call({ authorization: 'Bearer abc' })));
    const certOnly = await refusal(auth.authenticate(call({ authorization: basic('carol', 'guess') })));
    for (const r of [wrong, unknown, garbage, certOnly]) expect(r).toEqual({ code: 16, reason: 'UNAUTHENTICATED', message: INVALID_CREDENTIALS });
    expect(await refusal(auth.authenticate(call({})))).toEqual({ code: 16, reason: 'UNAUTHENTICATED', message: NO_CREDENTIALS });
    expect(await refusal(auth.authenticate(call({}, 'mallory')))).toEqual({ code: 16, reason: 'UNAUTHENTICATED', message: INVALID_CREDENTIALS });
    expect(failures.map((f) => [f.user, f.mechanism])).toEqual([
      ['alice', 'password'],
      ['mallory', 'password'],
      [null, 'password'],
      ['carol', 'password'],
      [null, 'none'],
      ['mallory', 'certificate'],
    ]);
  });

  it('a remembered success ends when the password changes or the user is deleted', async () => {
    const { users, auth, call } = await setup();
    const headers = { authorization: basic('alice', 's3cret') };
    await auth.authenticate(call(headers));
    users.apply({ type: 'putUser', name: 'alice', passwordHash: await hashPassword('n3w', FAST), tags: [] });
    expect(await refusal(auth.authenticate(call(headers)))).toMatchObject({ reason: 'UNAUTHENTICATED' });
    expect(await auth.authenticate(call({ authorization: basic('alice', 'n3w') }))).toMatchObject({ user: 'alice' });
    users.apply({ type: 'deleteUser', name: 'alice' });
    expect(await refusal(auth.authenticate(call({ authorization: basic('alice', 'n3w') })))).toMatchObject({ reason: 'UNAUTHENTICATED' });
  });

  it('with authentication off every call is anonymous, credentials or not', async () => {
    const auth = new ClientAuthenticator(false, () => new Users(), () => {});
    expect(await auth.authenticate({ metadata: new Metadata(), certificateIdentity: null, peer: '' })).toBe(ANONYMOUS);
  });

  it('parses Basic credentials (RFC 7617); a password may hold ":"', () => {
    expect(parseBasic(basic('u', 'p:a:ss'))).toEqual({ user: 'u', password: 'p:a:ss' });
    expect(parseBasic('Basic ' + Buffer.from('nocolon').toString('base64'))).toBeNull();
    expect(parseBasic('Basic ' + Buffer.from(':p').toString('base64'))).toBeNull();
    expect(parseBasic('Digest x')).toBeNull();
  });
});
