/**
 * Header values between the wire (proto HeaderValue) and the topology's typed values
 * (`@quorumq/queue` HeaderValue, with bigint int64s), for headers-exchange routing and
 * binding arguments.
 */
import { quorumq } from '@quorumq/proto';
import type { BindingArguments, HeaderValue, Headers } from '@quorumq/queue';

import { invalidArgument } from './errors.js';

import pb = quorumq.v1;

type WireValue = pb.HeaderValue.$Properties;

export function headerFromWire(value: WireValue, path: string): HeaderValue | null {
  if (value.stringValue != null) return { type: 'string', value: value.stringValue };
  if (value.intValue != null) return { type: 'int64', value: BigInt(value.intValue) };
  if (value.doubleValue != null) return { type: 'double', value: value.doubleValue };
  if (value.boolValue != null) return { type: 'bool', value: value.boolValue };
  if (value.bytesValue != null) return { type: 'bytes', value: value.bytesValue };
  if (value.timestampMs != null) return { type: 'timestamp', value: BigInt(value.timestampMs) };
  if (value.listValue != null) {
    const values: HeaderValue[] = [];
    (value.listValue.values ?? []).forEach((v, i) => {
      const decoded = headerFromWire(v, `${path}[${i}]`);
      if (decoded === null) throw invalidArgument(`header ${path}[${i}]: a void value cannot be nested`);
      values.push(decoded);
    });
    return { type: 'list', value: values };
  }
  if (value.mapValue != null) {
    const entries = new Map<string, HeaderValue>();
    for (const [key, v] of Object.entries(value.mapValue.entries ?? {})) {
      const decoded = headerFromWire(v, `${path}.${key}`);
      if (decoded === null) throw invalidArgument(`header ${path}.${key}: a void value cannot be nested`);
      entries.set(key, decoded);
    }
    return { type: 'map', value: entries };
  }
  if (value.voidValue != null) return null;
  throw invalidArgument(`header ${path} has no value`);
}

/** A message's headers for routing. Void values (binding-only) are refused. */
export function headersFromWire(headers: Record<string, WireValue> | null | undefined): Headers {
  const result = new Map<string, HeaderValue>();
  for (const [key, value] of Object.entries(headers ?? {})) {
    const decoded = headerFromWire(value, key);
    if (decoded === null) throw invalidArgument(`header ${key}: void values are only allowed in binding arguments`);
    result.set(key, decoded);
  }
  return result;
}

export function bindingArgumentsFromWire(args: Record<string, WireValue> | null | undefined): BindingArguments {
  const result = new Map<string, HeaderValue | null>();
  for (const key of Object.keys(args ?? {}).sort()) {
    const value = args?.[key];
    if (value !== undefined) result.set(key, headerFromWire(value, key));
  }
  return result;
}

/** An int64 for the wire: a number when safe, else a Long-shaped value (the writer takes both). */
function int64ToWire(value: bigint): number {
  if (value >= BigInt(Number.MIN_SAFE_INTEGER) && value <= BigInt(Number.MAX_SAFE_INTEGER)) return Number(value);
  const bits = BigInt.asUintN(64, value);
  return { low: Number(bits & 0xffffffffn) | 0, high: Number(bits >> 32n) | 0, unsigned: false } as unknown as number;
}

/** A typed value back to the wire (null: a binding's void value, "the header is present"). */
export function headerToWire(value: HeaderValue | null): WireValue {
  if (value === null) return { voidValue: true };
  switch (value.type) {
    case 'string':
      return { stringValue: value.value };
    case 'int64':
      return { intValue: int64ToWire(value.value) };
    case 'double':
      return { doubleValue: value.value };
    case 'bool':
      return { boolValue: value.value };
    case 'bytes':
      return { bytesValue: value.value };
    case 'timestamp':
      return { timestampMs: int64ToWire(value.value) };
    case 'list':
      return { listValue: { values: value.value.map((v) => headerToWire(v)) } };
    case 'map':
      return { mapValue: { entries: Object.fromEntries([...value.value].map(([k, v]) => [k, headerToWire(v)])) } };
  }
}

export function bindingArgumentsToWire(args: BindingArguments): Record<string, WireValue> {
  return Object.fromEntries([...args].map(([key, value]) => [key, headerToWire(value)]));
}
