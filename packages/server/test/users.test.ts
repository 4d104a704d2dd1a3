/**
 * Users and permissions in the metadata machine (users.ts): applied the same on every
 * replica, checked like any other metadata command, carried by snapshots.
 */
import type { Entry } from '@quorumq/raft';
import { describe, expect, it } from 'vitest';

import { decodeJson, encodeJson } from '../src/json-codec.js';
import { decodeMetaCommand } from '../src/meta-command.js';
import { MetaMachine, type MetaCommand } from '../src/meta-machine.js';
import { Users } from '../src/users.js';

let index = 0;
const entryOf = (command: unknown): Entry => ({ index: ++index, term: 1, type: 'normal', data: encodeJson(command) });
const ALL = { configure: '.*', write: '.*', read: '.*' };

describe('Users', () => {
  it('creates, changes, sets and clears permissions, deletes; a missing user is NOT_FOUND / USER_NOT_FOUND', () => {
    const users = new Users();
    expect(users.apply({ type: 'putUser', name: 'alice', passwordHash: '$h1', tags: [] })).toEqual({ ok: true, changed: true, created: true });
    expect(users.apply({ type: 'setPermissions', name: 'alice', permissions: { configure: '', write: '^orders$', read: '' } }).ok).toBe(true);
    // A change of tags keeps the password and the permissions.
    expect(users.apply({ type: 'putUser', name: 'alice', tags: ['monitoring'] })).toEqual({ ok: true, changed: true, created: false });
    expect(users.get('alice')).toEqual({ name: 'alice', passwordHash: '$h1', tags: ['monitoring'], permissions: { configure: '', write: '^orders$', read: '' } });
    expect(users.apply({ type: 'clearPermissions', name: 'alice' })).toEqual({ ok: true, changed: true });
    expect(users.get('alice')?.permissions).toBeNull();
    expect(users.apply({ type: 'deleteUser', name: 'alice' })).toEqual({ ok: true, changed: true });
    for (const command of [
      { type: 'deleteUser', name: 'alice' },
      { type: 'setPermissions', name: 'alice', permissions: ALL },
      { type: 'clearPermissions', name: 'alice' },
    ] as const) {
      expect(users.apply(command)).toMatchObject({ ok: false, code: 'NOT_FOUND', reason: 'USER_NOT_FOUND' });
    }
  });

  it('ifAbsent leaves an existing user as it is (the first administrator after a password change)', () => {
    const users = new Users();
    users.apply({ type: 'putUser', name: 'admin', passwordHash: '$changed', tags: ['administrator'] });
    expect(users.apply({ type: 'putUser', name: 'admin', passwordHash: '$configured', tags: ['administrator'], permissions: ALL, ifAbsent: true })).toEqual({
      ok: true,
      changed: false,
      created: false,
    });
    expect(users.get('admin')?.passwordHash).toBe('$changed');
  });

  it('restore skips records that are not users (a snapshot is untrusted input)', () => {
    const users = new Users();
    users.restore([
      { name: 'ok', passwordHash: null, tags: [], permissions: null },
      { name: 'bad:name', passwordHash: null, tags: [], permissions: null },
      { name: 'badpattern', passwordHash: null, tags: [], permissions: { configure: '(', write: '', read: '' } },
      'nonsense',
      null,
    ]);
    expect(users.all().map((u) => u.name)).toEqual(['ok']);
  });
});

describe('user metadata commands', () => {
  it('refuses malformed ones with the problem named, without throwing', () => {
    const cases: Array<[unknown, string]> = [
      [{ type: 'putUser', name: '', tags: [] }, 'must not be empty'],
      [{ type: 'putUser', name: 'a:b', tags: [] }, 'must not contain ":"'],
      [{ type: 'putUser', name: 'a', tags: 'administrator' }, 'tags must be a list'],
      [{ type: 'putUser', name: 'a', tags: ['no spaces'] }, 'a tag is'],
      [{ type: 'putUser', name: 'a', tags: [], passwordHash: 7 }, 'passwordHash'],
      [{ type: 'putUser', name: 'a', tags: [], ifAbsent: 'yes' }, 'ifAbsent'],
      [{ type: 'setPermissions', name: 'a', permissions: { configure: '[', write: '', read: '' } }, 'configure is not a regular expression'],
      [{ type: 'setPermissions', name: 'a', permissions: { configure: '', write: 'x'.repeat(5000), read: '' } }, 'at most 4096'],
      [{ type: 'setPermissions', name: 'a' }, 'permissions must be an object'],
      [{ type: 'deleteUser', name: 42 }, 'must not be empty'],
    ];
    for (const [command, problem] of cases) {
      const parsed = decodeMetaCommand(encodeJson(command));
      expect(parsed.ok, JSON.stringify(command)).toBe(false);
      if (!parsed.ok) expect(parsed.problem).toContain(problem);
    }
  });

  it('the machine applies them, replies with an error for a bad one, and a snapshot carries the users', () => {
    const machine = new MetaMachine(() => {});
    const put: MetaCommand = { type: 'putUser', name: 'bob', passwordHash: '$scrypt$x', tags: ['administrator'], permissions: ALL };
    expect(machine.apply(entryOf(put))).toMatchObject({ ok: true, changed: true, created: true });
    expect(machine.apply(entryOf({ type: 'setPermissions', name: 'bob', permissions: { configure: '(', write: '', read: '' } }))).toMatchObject({
      ok: false,
      reason: 'MALFORMED_COMMAND',
    });
    expect(machine.apply(entryOf({ type: 'deleteUser', name: 'nobody' }))).toMatchObject({ ok: false, code: 'NOT_FOUND', reason: 'USER_NOT_FOUND' });
    const restored = new MetaMachine(() => {});
    restored.restore(machine.snapshot());
    expect(restored.users.get('bob')).toEqual({ name: 'bob', passwordHash: '$scrypt$x', tags: ['administrator'], permissions: ALL });
    // A snapshot from before users restores with none.
    const { users: _users, ...before } = decodeJson<Record<string, unknown>>(machine.snapshot());
    const old = new MetaMachine(() => {});
    old.restore(encodeJson(before));
    expect(old.users.size).toBe(0);
  });
});
