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
