// Hand-written protobuf field writers for the hot paths that size a message first and write
// it into one buffer (the node's entries, peer batches and deliveries; the SDK's publish
// batches). Values are safe non-negative integers; strings are UTF-8.

/** Bytes of `value` as a varint. */
export function varintBytes(value) {
  let n = 1;
  while (value >= 0x80) {
    value = Math.floor(value / 128);
    n += 1;
  }
  return n;
}

/** Writes `value` as a varint at `at`; returns the offset after it. */
export function writeVarint(buf, at, value) {
  while (value >= 0x80) {
    buf[at++] = (value & 0x7f) | 0x80;
    value = Math.floor(value / 128);
  }
  buf[at++] = value;
  return at;
}

/** Bytes of a proto3 string field: 0 for the empty string, which is not written. */
export function stringFieldBytes(text) {
  if (text == null || text === '') return 0;
  const length = Buffer.byteLength(text, 'utf8');
  return 1 + varintBytes(length) + length;
}

/** Writes a proto3 string field (nothing for the empty string); returns the offset after it. */
export function writeStringField(buf, at, tag, text) {
  if (text == null || text === '') return at;
  buf[at++] = tag;
  const length = Buffer.byteLength(text, 'utf8');
  at = writeVarint(buf, at, length);
  return at + buf.write(text, at, length, 'utf8');
}

/** Bytes of a length-delimited field holding `length` bytes (always written). */
export function bytesFieldBytes(length) {
  return 1 + varintBytes(length) + length;
}

/** Writes a length-delimited field with `bytes` (always written); returns the offset after it. */
export function writeBytesField(buf, at, tag, bytes) {
  buf[at++] = tag;
  at = writeVarint(buf, at, bytes.byteLength);
  buf.set(bytes, at);
  return at + bytes.byteLength;
}

/** Bytes of a proto3 varint field: 0 for zero, which is not written. */
export function varintFieldBytes(value) {
  return value == null || value === 0 ? 0 : 1 + varintBytes(value);
}

/** Writes a proto3 varint field (nothing for zero); returns the offset after it. */
export function writeVarintField(buf, at, tag, value) {
  if (value == null || value === 0) return at;
  buf[at++] = tag;
  return writeVarint(buf, at, value);
}
