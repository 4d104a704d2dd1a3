import { quorumq } from '@quorumq/proto';
import { toWireInt64, wireInt, wireNumber } from './longs.js';

/**
 * A header value as applications see it. Encoding: string → string, number → int when it is
 * a safe integer else double, bigint → int, boolean → bool, Buffer/Uint8Array → bytes,
 * Date → timestamp, null → void (presence only), array → list, plain object → map.
 * Decoding is the inverse: int → number, bytes → Buffer, timestamp → Date, void → null.
 * Ints are exact to 64 bits both ways: bigints are encoded exactly, and an int beyond ±2^53
 * decodes as a bigint (a safe one as a number).
 */
export type HeaderValue =
  | string
  | number
  | bigint
  | boolean
  | Uint8Array
  | Date
  | null
  | readonly HeaderValue[]
  | { readonly [key: string]: HeaderValue };

/** Headers (or headers-exchange binding arguments) as applications see them. */
export type Headers = { readonly [key: string]: HeaderValue };

/** Decoded headers: like {@link Headers}, but bytes are Buffers and ints may be bigints. */
export type DecodedHeaders = { [key: string]: HeaderValue };

type WireValue = quorumq.v1.HeaderValue.$Properties;
type WireMap = { [key: string]: quorumq.v1.HeaderValue.$Properties };

function isPlainObject(value: object): value is { readonly [key: string]: HeaderValue } {
  const proto: unknown = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

/** Encodes one header value for the wire. Throws a TypeError for values it cannot carry. */
export function encodeHeaderValue(value: HeaderValue, path = 'header'): WireValue {
  switch (typeof value) {
    case 'string':
      return { stringValue: value };
    case 'boolean':
      return { boolValue: value };
    case 'bigint':
      return { intValue: toWireInt64(value) };
    case 'number':
      return Number.isSafeInteger(value) && !Object.is(value, -0) ? { intValue: value } : { doubleValue: value };
    case 'object': {
      if (value === null) return { voidValue: true };
      if (value instanceof Date) {
        const ms = value.getTime();
        if (Number.isNaN(ms)) throw new TypeError(`${path}: invalid Date`);
        return { timestampMs: ms };
      }
      if (value instanceof Uint8Array) return { bytesValue: value };
      if (Array.isArray(value)) {
        const list: readonly HeaderValue[] = value;
        return { listValue: { values: list.map((v, i) => encodeHeaderValue(v, `${path}[${i}]`)) } };
      }
      if (isPlainObject(value)) return { mapValue: { entries: encodeHeaders(value, path) } };
      break;
    }
    default:
      break;
  }
  throw new TypeError(`${path}: cannot encode a header value of type ${describe(value)}`);
}

function describe(value: unknown): string {
  if (typeof value !== 'object' || value === null) return typeof value;
  const ctor: unknown = (value as { constructor?: unknown }).constructor;
  return typeof ctor === 'function' && ctor.name !== '' ? ctor.name : 'object';
}

/** Encodes a headers object; entries whose value is `undefined` are skipped. */
export function encodeHeaders(headers: Headers | undefined, path = 'headers'): WireMap {
  const out: WireMap = {};
  if (headers === undefined) return out;
  for (const [key, value] of Object.entries(headers)) {
    if ((value as HeaderValue | undefined) === undefined) continue;
    out[key] = encodeHeaderValue(value, `${path}.${key}`);
  }
  return out;
}

/** Decodes one header value from the wire (a decoded or plain HeaderValue message). */
export function decodeHeaderValue(value: WireValue | null | undefined): HeaderValue {
  if (value === null || value === undefined) return null;
  const kind = value.value ?? kindOf(value);
  switch (kind) {
    case 'stringValue':
      return value.stringValue ?? '';
    case 'intValue':
      return wireInt(value.intValue);
    case 'doubleValue':
      return value.doubleValue ?? 0;
    case 'boolValue':
      return value.boolValue ?? false;
    case 'bytesValue': {
      const bytes = value.bytesValue ?? new Uint8Array(0);
      return Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    }
    case 'timestampMs':
      return new Date(wireNumber(value.timestampMs));
    case 'listValue':
      return (value.listValue?.values ?? []).map((v) => decodeHeaderValue(v));
    case 'mapValue':
      return decodeHeaders(value.mapValue?.entries);
    case 'voidValue':
    case undefined:
      return null;
  }
}

function kindOf(value: WireValue): WireValue['value'] {
  const kinds = ['stringValue', 'intValue', 'doubleValue', 'boolValue', 'bytesValue', 'timestampMs', 'listValue', 'mapValue', 'voidValue'] as const;
  for (const kind of kinds) if (value[kind] !== null && value[kind] !== undefined) return kind;
  return undefined;
}

/** Decodes a headers map from the wire. */
export function decodeHeaders(entries: { readonly [key: string]: WireValue } | null | undefined): DecodedHeaders {
  const out: DecodedHeaders = {};
  if (entries === null || entries === undefined) return out;
  for (const [key, value] of Object.entries(entries)) out[key] = decodeHeaderValue(value);
  return out;
}
