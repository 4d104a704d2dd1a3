/**
 * JSON for replicated commands and replies that may hold bigint, bytes and Map values
 * (header values, binding arguments). Tagged objects keep them exact.
 */
const encoder = new TextEncoder();
const decoder = new TextDecoder();

function replacer(this: unknown, _key: string, value: unknown): unknown {
  if (typeof value === 'bigint') return { $bigint: value.toString() };
  if (value instanceof Uint8Array) return { $bytes: Buffer.from(value).toString('base64') };
  if (value instanceof Map) return { $map: [...value.entries()] };
  return value;
}

function reviver(_key: string, value: unknown): unknown {
  if (typeof value === 'object' && value !== null && !Array.isArray(value)) {
    const tagged = value as Record<string, unknown>;
    const keys = Object.keys(tagged);
    if (keys.length === 1) {
      if (typeof tagged.$bigint === 'string') return BigInt(tagged.$bigint);
      if (typeof tagged.$bytes === 'string') return new Uint8Array(Buffer.from(tagged.$bytes, 'base64'));
      if (Array.isArray(tagged.$map)) return new Map(tagged.$map as Array<[unknown, unknown]>);
    }
  }
  return value;
}

export function encodeJson(value: unknown): Uint8Array {
  return encoder.encode(JSON.stringify(value, replacer));
}

export function decodeJson<T>(bytes: Uint8Array): T {
  return JSON.parse(decoder.decode(bytes), reviver) as T;
}
