import { assert } from './errors.js';
import { headerValuesEqual, type HeaderValue, type Headers } from './header-value.js';
import type { BindingArguments } from './model.js';

export type HeadersMatchMode = 'all' | 'any' | 'all-with-x' | 'any-with-x';

const MATCH_MODES: readonly HeadersMatchMode[] = ['all', 'any', 'all-with-x', 'any-with-x'];

/** The binding argument that selects the mode. It is never itself matched. */
export const X_MATCH = 'x-match';

/** A headers binding compiled once at bind time, so a publish only compares values. */
export interface HeadersPattern {
  readonly requireAll: boolean;
  /** The arguments compared with the message headers; null = the header must be present. */
  readonly fields: ReadonlyArray<readonly [string, HeaderValue | null]>;
}

/** Why `x-match` is unusable, or null. It is optional: absent means `all`, as in RabbitMQ. */
export function headersMatchProblem(args: BindingArguments): string | null {
  if (!args.has(X_MATCH)) return null;
  const mode = args.get(X_MATCH);
  if (mode === null || mode === undefined || mode.type !== 'string' || !isMatchMode(mode.value)) {
    return `x-match must be a string, one of ${MATCH_MODES.join(', ')}`;
  }
  return null;
}

function isMatchMode(value: string): value is HeadersMatchMode {
  return (MATCH_MODES as readonly string[]).includes(value);
}

/**
 * Arguments starting with `x-` are broker settings, not patterns, and are skipped unless
 * the mode is one of the `-with-x` forms (RabbitMQ 3.10+); `x-match` itself is always
 * skipped.
 */
export function compileHeadersPattern(args: BindingArguments): HeadersPattern {
  assert(headersMatchProblem(args) === null, 'compiling a headers binding with an invalid x-match');
  const modeValue = args.get(X_MATCH);
  const mode: HeadersMatchMode = modeValue?.type === 'string' && isMatchMode(modeValue.value) ? modeValue.value : 'all';
  const includeX = mode === 'all-with-x' || mode === 'any-with-x';
  const fields = [...args].filter(([key]) => key !== X_MATCH && (includeX || !key.startsWith('x-')));
  return { requireAll: mode === 'all' || mode === 'all-with-x', fields };
}

/**
 * `all`: every field matches, so a binding with no fields matches every message.
 * `any`: at least one field matches, so a binding with no fields matches nothing.
 * Both follow RabbitMQ. A field matches when the header is present and equal by type and
 * value, or, for a presence-only field, when the header is present at all.
 */
export function headersMatch(pattern: HeadersPattern, headers: Headers): boolean {
  const fieldMatches = ([key, expected]: readonly [string, HeaderValue | null]): boolean => {
    const actual = headers.get(key);
    if (actual === undefined) return false;
    return expected === null || headerValuesEqual(expected, actual);
  };
  return pattern.requireAll ? pattern.fields.every(fieldMatches) : pattern.fields.some(fieldMatches);
}
