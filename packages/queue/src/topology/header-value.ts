import { describeValue } from './describe.js';
import { TOPOLOGY_LIMITS } from './limits.js';

/**
 * A typed message header value, as in the spec's message model. int64 and timestamp use
 * bigint so that every 64-bit value survives exactly; a timestamp is milliseconds since the
 * Unix epoch.
 */
export type HeaderValue =
  | { readonly type: 'string'; readonly value: string }
  | { readonly type: 'int64'; readonly value: bigint }
  | { readonly type: 'double'; readonly value: number }
  | { readonly type: 'bool'; readonly value: boolean }
  | { readonly type: 'bytes'; readonly value: Uint8Array }
  | { readonly type: 'timestamp'; readonly value: bigint }
  | { readonly type: 'list'; readonly value: readonly HeaderValue[] }
  | { readonly type: 'map'; readonly value: ReadonlyMap<string, HeaderValue> };

export type HeaderValueType = HeaderValue['type'];

/** A message's headers. */
export type Headers = ReadonlyMap<string, HeaderValue>;

const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;

/**
 * Type-aware equality: values of different types are never equal, so int64 1, double 1.0
 * and string "1" are three different values. (RabbitMQ compares with Erlang `==`, which
 * equates 1 and 1.0; the spec asks for typed headers, and a typed match is the one a
 * client can predict from the types it sent.) Doubles compare as IEEE numbers: NaN equals
 * nothing and 0 equals -0. Maps compare as sets of entries, ignoring order.
 */
export function headerValuesEqual(a: HeaderValue, b: HeaderValue): boolean {
  switch (a.type) {
    case 'string':
    case 'double':
    case 'bool':
    case 'int64':
    case 'timestamp':
      return b.type === a.type && b.value === a.value;
    case 'bytes':
      return b.type === 'bytes' && bytesEqual(a.value, b.value);
    case 'list':
      return b.type === 'list' && listsEqual(a.value, b.value);
    case 'map':
      return b.type === 'map' && mapsEqual(a.value, b.value);
  }
}

function bytesEqual(a: Uint8Array, b: Uint8Array): boolean {
  if (a.byteLength !== b.byteLength) return false;
  for (let i = 0; i < a.byteLength; i++) if (a[i] !== b[i]) return false;
  return true;
}

function listsEqual(a: readonly HeaderValue[], b: readonly HeaderValue[]): boolean {
  if (a.length !== b.length) return false;
  return a.every((item, i) => {
    const other = b[i];
    return other !== undefined && headerValuesEqual(item, other);
  });
}

function mapsEqual(a: ReadonlyMap<string, HeaderValue>, b: ReadonlyMap<string, HeaderValue>): boolean {
  if (a.size !== b.size) return false;
  for (const [key, value] of a) {
    const other = b.get(key);
    if (other === undefined || !headerValuesEqual(value, other)) return false;
  }
  return true;
}

/**
 * Why `value` is not a well-formed HeaderValue (commands come from the log and are
 * checked as untrusted input), or null. `budget.values` counts values across a whole
 * arguments table so that one binding cannot carry an unbounded tree.
 */
export function headerValueProblem(value: unknown, depth: number, budget: { values: number }): string | null {
  budget.values += 1;
  if (budget.values > TOPOLOGY_LIMITS.bindingArgumentValuesCountMax) {
    return `more than ${TOPOLOGY_LIMITS.bindingArgumentValuesCountMax} values`;
  }
  if (depth > TOPOLOGY_LIMITS.headerValueDepthMax) return `nested deeper than ${TOPOLOGY_LIMITS.headerValueDepthMax}`;
  if (typeof value !== 'object' || value === null || !('type' in value) || !('value' in value)) {
    return 'not a {type, value} header value';
  }
  const v = value.value;
  switch (value.type) {
    case 'string':
      return typeof v === 'string' ? null : 'string value is not a string';
    case 'int64':
      return typeof v === 'bigint' && v >= INT64_MIN && v <= INT64_MAX ? null : 'int64 value is not a 64-bit bigint';
    case 'timestamp':
      return typeof v === 'bigint' && v >= INT64_MIN && v <= INT64_MAX ? null : 'timestamp value is not a 64-bit bigint';
    case 'double':
      return typeof v === 'number' ? null : 'double value is not a number';
    case 'bool':
      return typeof v === 'boolean' ? null : 'bool value is not a boolean';
    case 'bytes':
      return v instanceof Uint8Array ? null : 'bytes value is not a Uint8Array';
    case 'list':
      return Array.isArray(v) ? firstProblem(v, depth, budget) : 'list value is not an array';
    case 'map':
      return v instanceof Map ? mapProblem(v, depth, budget) : 'map value is not a Map';
    default:
      return `unknown header value type ${describeValue(value.type)}`;
  }
}

function firstProblem(items: readonly unknown[], depth: number, budget: { values: number }): string | null {
  for (const item of items) {
    const problem = headerValueProblem(item, depth + 1, budget);
    if (problem !== null) return problem;
  }
  return null;
}

function mapProblem(map: Map<unknown, unknown>, depth: number, budget: { values: number }): string | null {
  for (const key of map.keys()) if (typeof key !== 'string') return 'map key is not a string';
  return firstProblem([...map.values()], depth, budget);
}

/**
 * A string that is equal for two values exactly when headerValuesEqual would say so
 * (except NaN, which is equal to itself here so that a binding with a NaN argument can
 * still be found again to unbind it). Used to identify bindings by their arguments.
 */
export function canonicalHeaderValue(value: HeaderValue): string {
  switch (value.type) {
    case 'string':
    case 'bool':
      return JSON.stringify([value.type, value.value]);
    case 'double':
      // JSON turns NaN and infinities into null; String() keeps them distinct. -0 becomes "0".
      return JSON.stringify([value.type, String(value.value)]);
    case 'int64':
    case 'timestamp':
      return JSON.stringify([value.type, value.value.toString()]);
    case 'bytes':
      return JSON.stringify([value.type, Array.from(value.value)]);
    case 'list':
      return `["list",[${value.value.map(canonicalHeaderValue).join(',')}]]`;
    case 'map':
      return `["map",${canonicalTable(value.value)}]`;
  }
}

/** Canonical form of a table whose entries may be null (a presence-only binding argument). */
export function canonicalTable(table: ReadonlyMap<string, HeaderValue | null>): string {
  const keys = [...table.keys()].sort();
  const entries = keys.map((key) => {
    const value = table.get(key);
    return `[${JSON.stringify(key)},${value === undefined || value === null ? 'null' : canonicalHeaderValue(value)}]`;
  });
  return `[${entries.join(',')}]`;
}

/**
 * A deep copy, so that state never shares a Uint8Array, array or Map with the command it
 * came from: a caller reusing its buffer must not change a stored binding behind the index.
 */
export function cloneHeaderValue(value: HeaderValue): HeaderValue {
  switch (value.type) {
    case 'string':
    case 'int64':
    case 'double':
    case 'bool':
    case 'timestamp':
      return { ...value };
    case 'bytes':
      return { type: 'bytes', value: value.value.slice() };
    case 'list':
      return { type: 'list', value: value.value.map(cloneHeaderValue) };
    case 'map':
      return { type: 'map', value: new Map([...value.value].map(([key, item]) => [key, cloneHeaderValue(item)])) };
  }
}
