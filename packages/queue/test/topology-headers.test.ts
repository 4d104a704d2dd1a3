/** Typed header values and the headers exchange, against direct restatements of the rules. */
import fc from 'fast-check';
import { describe, expect, test } from 'vitest';
import { headerValuesEqual, route, type HeaderValue, type HeadersMatchMode } from '../src/topology/index.js';
import { bind, queue, setUp, withExchange } from './topology-helpers.js';

/** Values from small domains, so that equal values of the same and of other types are common. */
const headerValue: fc.Arbitrary<HeaderValue> = fc.letrec<{ value: HeaderValue }>((tie) => ({
  value: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    fc.constantFrom('', '1', 'a').map((value): HeaderValue => ({ type: 'string', value })),
    fc.constantFrom(0n, 1n, -1n).map((value): HeaderValue => ({ type: 'int64', value })),
    fc.constantFrom(0n, 1n).map((value): HeaderValue => ({ type: 'timestamp', value })),
    fc.constantFrom(0, 1, -0, 0.5).map((value): HeaderValue => ({ type: 'double', value })),
    fc.boolean().map((value): HeaderValue => ({ type: 'bool', value })),
    fc.uint8Array({ maxLength: 2, max: 1 }).map((value): HeaderValue => ({ type: 'bytes', value })),
    fc.array(tie('value'), { maxLength: 2 }).map((value): HeaderValue => ({ type: 'list', value })),
    fc.array(fc.tuple(fc.constantFrom('a', 'b'), tie('value')), { maxLength: 2 }).map((entries): HeaderValue => ({ type: 'map', value: new Map(entries) })),
  ),
})).value;

/** Equality restated: same type and structurally equal content (no NaN in the domain above). */
function referenceEqual(a: HeaderValue, b: HeaderValue): boolean {
  const plain = (value: HeaderValue): unknown => {
    switch (value.type) {
      case 'bytes':
        return [value.type, [...value.value]];
      case 'list':
        return [value.type, value.value.map(plain)];
      case 'map':
        return [value.type, [...value.value].sort(([x], [y]) => (x < y ? -1 : 1)).map(([k, v]) => [k, plain(v)])];
      case 'double':
        return [value.type, value.value === 0 ? 0 : value.value];
      default:
        return [value.type, value.value];
    }
  };
  return JSON.stringify(plain(a), (_k, v: unknown) => (typeof v === 'bigint' ? `${v}n` : v)) ===
    JSON.stringify(plain(b), (_k, v: unknown) => (typeof v === 'bigint' ? `${v}n` : v));
}

describe('typed header equality (spec 1: headers are a map of typed values)', () => {
  test('agrees with the restated rule, and is reflexive and symmetric', () => {
    fc.assert(
      fc.property(headerValue, headerValue, (a, b) => {
        expect(headerValuesEqual(a, b)).toBe(referenceEqual(a, b));
        expect(headerValuesEqual(a, b)).toBe(headerValuesEqual(b, a));
        expect(headerValuesEqual(a, a)).toBe(true);
      }),
      { numRuns: 2000, seed: 11 },
    );
  });
});

const fieldNames = ['a', 'b', 'x-c'] as const;
const bindingArguments = fc.record({
  mode: fc.constantFrom<HeadersMatchMode | undefined>(undefined, 'all', 'any', 'all-with-x', 'any-with-x'),
  fields: fc.array(fc.tuple(fc.constantFrom(...fieldNames), fc.option(headerValue, { nil: null })), { maxLength: 3 }),
});
const messageHeaders = fc.array(fc.tuple(fc.constantFrom(...fieldNames, 'x-match'), headerValue), { maxLength: 4 });

describe('headers exchange matches as the x-match rules say', () => {
  test('against a restatement of all / any / -with-x and presence-only arguments', () => {
    fc.assert(
      fc.property(bindingArguments, messageHeaders, ({ mode, fields }, headerEntries) => {
        const argumentsTable = new Map<string, HeaderValue | null>(fields);
        if (mode !== undefined) argumentsTable.set('x-match', { type: 'string', value: mode });
        const headers = new Map<string, HeaderValue>(headerEntries);
        const t = setUp([bind('x', queue('q'), '', argumentsTable)], withExchange('headers', ['q']));

        const withX = mode === 'all-with-x' || mode === 'any-with-x';
        const compared = [...argumentsTable].filter(([name]) => name !== 'x-match' && (withX || !name.startsWith('x-')));
        const matches = compared.map(([name, expected]) => {
          const actual = headers.get(name);
          return actual !== undefined && (expected === null || referenceEqual(expected, actual));
        });
        const requireAll = mode === undefined || mode === 'all' || mode === 'all-with-x';
        const expected = requireAll ? matches.every(Boolean) : matches.some(Boolean);
        expect(route(t, 'x', '', headers).unroutable).toBe(!expected);
      }),
      { numRuns: 1000, seed: 12 },
    );
  });
});
