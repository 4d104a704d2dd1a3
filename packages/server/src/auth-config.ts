/**
 * The configuration of client authentication (docs/security.md, "Users"): whether calls
 * must authenticate, and the first administrator, which a node creates (if no user of that
 * name exists yet) once the cluster serves. Read by config.ts.
 */
import { readFileSync } from 'node:fs';

import { userNameProblem } from './users.js';

export interface AuthConfig {
  /** Every client call must carry a user's credentials or a client certificate naming a user. */
  readonly requireAuthentication: boolean;
  /** The first administrator: created with every permission when no user of its name exists. */
  readonly admin: { readonly user: string; readonly password: string } | null;
}

export const AUTH_ENV: Record<string, string> = {
  QUORUMQ_REQUIRE_AUTHENTICATION: 'requireAuthentication',
  QUORUMQ_ADMIN_USER: 'adminUser',
  QUORUMQ_ADMIN_PASSWORD: 'adminPassword',
  QUORUMQ_ADMIN_PASSWORD_FILE: 'adminPasswordFile',
};

/** The shortest first-administrator password a node accepts. */
export const ADMIN_PASSWORD_MIN_LENGTH = 12;

type Raw = Record<string, unknown>;

function flag(raw: Raw, key: string, fail: (message: string) => Error): boolean {
  const value = raw[key];
  if (value === undefined || value === null || value === '') return false;
  if (value === true || value === 'true' || value === '1') return true;
  if (value === false || value === 'false' || value === '0') return false;
  throw fail(`${key}: expected true or false, got ${JSON.stringify(value)}`);
}

function optionalText(raw: Raw, key: string, fail: (message: string) => Error): string | null {
  const value = raw[key];
  if (value === undefined || value === null || value === '') return null;
  if (typeof value !== 'string') throw fail(`${key}: expected a string, got ${JSON.stringify(value)}`);
  return value;
}

export function authConfig(raw: Raw, fail: (message: string) => Error): AuthConfig {
  const requireAuthentication = flag(raw, 'requireAuthentication', fail);
  const user = optionalText(raw, 'adminUser', fail);
  const inline = optionalText(raw, 'adminPassword', fail);
  const file = optionalText(raw, 'adminPasswordFile', fail);
  if (inline !== null && file !== null) throw fail('set adminPassword or adminPasswordFile, not both');
  let password = inline;
  if (file !== null) {
    try {
      password = readFileSync(file, 'utf8').trim();
    } catch (error) {
      throw fail(`adminPasswordFile: cannot read ${file}: ${error instanceof Error ? error.message : String(error)}`);
    }
  }
  if (user === null) {
    if (password !== null) throw fail('adminPassword is set without adminUser (QUORUMQ_ADMIN_USER)');
    return { requireAuthentication, admin: null };
  }
  const problem = userNameProblem(user);
  if (problem !== null) throw fail(`adminUser: ${problem}`);
  if (password === null || password.length < ADMIN_PASSWORD_MIN_LENGTH) {
    throw fail(
      `adminUser ${JSON.stringify(user)} needs a password of at least ${ADMIN_PASSWORD_MIN_LENGTH} characters ` +
        '(QUORUMQ_ADMIN_PASSWORD, or adminPassword / adminPasswordFile in the config file; e.g. openssl rand -base64 18)',
    );
  }
  return { requireAuthentication, admin: { user, password } };
}
