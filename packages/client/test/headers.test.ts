import { quorumq } from '@quorumq/proto';
import { describe, expect, it } from 'vitest';
import { decodeHeaderValue, decodeHeaders, encodeHeaderValue, encodeHeaders, type HeaderValue, type Headers } from '../src/headers.js';

/** Encodes headers, puts them through real protobuf bytes, decodes them. */
function roundTrip(headers: Headers): { [key: string]: HeaderValue } {
  const bytes = quorumq.v1.Message.encode({ headers: encodeHeaders(headers) }).finish();
  return decodeHeaders(quorumq.v1.Message.decode(bytes).headers);
}

function wireKind(value: HeaderValue): string | undefined {
  const bytes = quorumq.v1.HeaderValue.encode(encodeHeaderValue(value)).finish();
  return quorumq.v1.HeaderValue.decode(bytes).value;
}

describe('header codec', () => {
  it('round-trips scalars with their wire types', () => {
    const decoded = roundTrip({ s: 'héllo', i: 42, neg: -7, d: 1.5, t: true, f: false, empty: '' });
    expect(decoded).toEqual({ s: 'héllo', i: 42, neg: -7, d: 1.5, t: true, f: false, empty: '' });
    expect(wireKind(42)).toBe('intValue');
    expect(wireKind(1.5)).toBe('doubleValue');
    expect(wireKind('x')).toBe('stringValue');
    expect(wireKind(true)).toBe('boolValue');
  });

  it('encodes non-safe-integer numbers as doubles and keeps -0, NaN and infinities', () => {
    expect(wireKind(2 ** 60)).toBe('doubleValue');
    expect(wireKind(-0)).toBe('doubleValue');
    const decoded = roundTrip({ big: 2 ** 60, nz: -0, nan: Number.NaN, inf: Number.POSITIVE_INFINITY });
    expect(decoded['big']).toBe(2 ** 60);
    expect(Object.is(decoded['nz'], -0)).toBe(true);
    expect(decoded['nan']).toBeNaN();
    expect(decoded['inf']).toBe(Number.POSITIVE_INFINITY);
  });

  it('encodes bigints as ints, exactly beyond 2^53, and decodes small ones as numbers', () => {
    const decoded = roundTrip({ small: 12n, negative: -5n });
    expect(decoded).toEqual({ small: 12, negative: -5 });
    expect(wireKind(12n)).toBe('intValue');
    // The exact bytes on the wire: field 2 (int_value), varint of the two's complement.
    for (const value of [2n ** 62n + 12345n, -(2n ** 63n), 2n ** 63n - 1n, -3n]) {
      const bytes = quorumq.v1.HeaderValue.encode(encodeHeaderValue(value)).finish();
      expect(Buffer.from(bytes)).toEqual(Buffer.from([0x10, ...varint(BigInt.asUintN(64, value))]));
    }
    expect(() => encodeHeaderValue(2n ** 63n)).toThrow(RangeError);
    // Beyond 2^53 a decoded int is a bigint (when protobufjs hands out Long values).
    const long = { low: 12345, high: 2 ** 30, unsigned: false };
    expect(decodeHeaderValue({ intValue: long as unknown as number })).toBe(2n ** 62n + 12345n);
    expect(decodeHeaderValue({ intValue: { low: -3, high: -1, unsigned: false } as unknown as number })).toBe(-3);
  });

  it('decodes ints beyond 2^53 exactly, as bigints, through real protobuf bytes (issue 12 item 8)', () => {
    const values = [9007199254740993n, -9007199254740993n, 2n ** 63n - 1n, -(2n ** 63n)];
    const headers = Object.fromEntries(values.map((v, i) => [`v${i}`, v]));
    expect(roundTrip({ ...headers, safe: 2n ** 53n - 1n, list: [values[0]!], map: { inner: values[3]! } })).toEqual({
      ...headers,
      safe: 2 ** 53 - 1,
      list: [values[0]],
      map: { inner: values[3] },
    });
  });

  it('round-trips bytes as Buffers and dates as timestamps', () => {
    const when = new Date('2026-11-30T01:02:03.456Z');
    const decoded = roundTrip({ buf: Buffer.from([1, 2, 3]), u8: new Uint8Array([9, 8]), when });
    expect(Buffer.isBuffer(decoded['buf'])).toBe(true);
    expect(decoded['buf']).toEqual(Buffer.from([1, 2, 3]));
    expect(decoded['u8']).toEqual(Buffer.from([9, 8]));
    expect(decoded['when']).toBeInstanceOf(Date);
    expect((decoded['when'] as Date).getTime()).toBe(when.getTime());
    expect(wireKind(when)).toBe('timestampMs');
    expect(wireKind(new Uint8Array([1]))).toBe('bytesValue');
  });

  it('round-trips nested lists and maps, and null as a void value', () => {
    const headers: Headers = {
      list: [1, 'two', [3.5, false], { deep: [null] }],
      map: { a: 1, b: { c: 'd', e: [new Date(0)] } },
      'x-match': 'all',
      present: null,
    };
    const decoded = roundTrip(headers);
    expect(decoded).toEqual(headers);
    expect(wireKind(null)).toBe('voidValue');
    expect(wireKind([1])).toBe('listValue');
    expect(wireKind({ a: 1 })).toBe('mapValue');
    expect(wireKind(Object.create(null) as Headers)).toBe('mapValue');
  });

  it('skips undefined entries and refuses values it cannot carry', () => {
    const withUndefined: Record<string, HeaderValue | undefined> = { a: 1, b: undefined };
    expect(Object.keys(encodeHeaders(withUndefined as Headers))).toEqual(['a']);
    const fn: unknown = () => 1;
    expect(() => encodeHeaders({ bad: fn as HeaderValue })).toThrow(/headers\.bad.*function/);
    expect(() => encodeHeaderValue(new Map() as unknown as HeaderValue)).toThrow(/Map/);
    expect(() => encodeHeaderValue(new Date(Number.NaN))).toThrow(/invalid Date/);
    expect(() => encodeHeaderValue({ list: [1, Symbol('x') as unknown as HeaderValue] })).toThrow(/header\.list\[1\]/);
  });

  it('decodes plain (not protobuf-decoded) wire values and absent values', () => {
    expect(decodeHeaderValue({ intValue: 7 })).toBe(7);
    expect(decodeHeaderValue({ timestampMs: 1000 })).toEqual(new Date(1000));
    expect(decodeHeaderValue({ listValue: { values: [{ stringValue: 'a' }] } })).toEqual(['a']);
    expect(decodeHeaderValue(undefined)).toBeNull();
    expect(decodeHeaders(null)).toEqual({});
  });
});

function varint(value: bigint): number[] {
  const out: number[] = [];
  let v = value;
  while (v >= 0x80n) {
    out.push(Number(v & 0x7fn) | 0x80);
    v >>= 7n;
  }
  out.push(Number(v));
  return out;
}
