// The protobufjs runtime as the generated code (generated/quorumq.js) and the hand-written
// readers of the node and the SDK use it, without changing the protobufjs module they share
// with the application.
//
// protobufjs keeps its configuration in one module-wide place: `util.Long`, and the 64-bit
// methods of `Reader.prototype`, which `configure()` rewrites to hand out Long objects or
// numbers. An application (or another library) that uses the same protobufjs relies on that
// configuration, so nothing here writes to it. Instead:
//
// - `util` is a view of protobufjs's util without Long: the generated code's default values
//   and converters then use numbers, whatever the shared copy has.
// - `Reader` is protobufjs's BufferReader with its own 64-bit methods, which read the varint
//   themselves: int64 / uint64 fields decode as numbers (exact up to 2^53, as the generated
//   types say), and `int64Exact` decodes as a number when that is exact, else as a bigint
//   (for header values, which the SDK promises exact to 64 bits).
// - `long` turns a bigint into the low/high bits protobufjs's Writer encodes exactly (it
//   writes 0 for a bigint).
// - `oneOfSetter` is protobufjs's setter of a oneof's case (the decoders set it for every
//   oneof field they read), without `delete` of the fields that are not there: deleting an
//   absent property costs about 40 ns in V8, so a QueueCommand (19 cases) took 0.7 µs more
//   to decode than its one command (packages/server/bench/codec-bench.mjs).
import $protobuf from 'protobufjs/minimal.js';

/** protobufjs's Writer, which the generated code writes with (read only, never changed here). */
export const Writer = $protobuf.Writer;

/** protobufjs's util, seen without Long support (reads fall through to the shared util). */
export const util = Object.create($protobuf.util, { Long: { value: null, enumerable: true } });

const TWO_32 = 4294967296;
const INT64_MIN = -(1n << 63n);
const UINT64_MAX = (1n << 64n) - 1n;

// The bits of the varint read last (one reader runs at a time: no allocation per read).
let lo = 0;
let hi = 0;

function indexOutOfRange(reader) {
  return new RangeError(`index out of range: ${reader.pos} + 1 > ${reader.len}`);
}

/** Reads a varint of up to 64 bits into `lo` / `hi` (as protobufjs's readLongVarint does). */
function readVarint64(reader) {
  const buf = reader.buf;
  const len = reader.len;
  let pos = reader.pos;
  let b;
  lo = 0;
  hi = 0;
  for (let i = 0; i < 4; i++) {
    if (pos >= len) throw indexOutOfRange(reader);
    b = buf[pos++];
    lo = (lo | ((b & 127) << (i * 7))) >>> 0;
    if (b < 128) {
      reader.pos = pos;
      return;
    }
  }
  if (pos >= len) throw indexOutOfRange(reader);
  b = buf[pos++];
  lo = (lo | ((b & 127) << 28)) >>> 0;
  hi = (hi | ((b & 127) >> 4)) >>> 0;
  if (b < 128) {
    reader.pos = pos;
    return;
  }
  for (let i = 0; i < 5; i++) {
    if (pos >= len) throw indexOutOfRange(reader);
    b = buf[pos++];
    hi = (hi | ((b & 127) << (i * 7 + 3))) >>> 0;
    if (b < 128) {
      reader.pos = pos;
      return;
    }
  }
  throw new Error('invalid varint encoding');
}

/** `lo` / `hi` as a (possibly unsafe) number, as protobufjs's LongBits.toNumber. */
function bitsToNumber(unsigned) {
  if (!unsigned && hi >>> 31) {
    const l = (~lo + 1) >>> 0;
    let h = ~hi >>> 0;
    if (!l) h = (h + 1) >>> 0;
    return -(l + h * TWO_32);
  }
  return lo + hi * TWO_32;
}

/** `lo` / `hi` as a signed 64-bit value: a number when that is exact, else a bigint. */
function bitsToExactInt64() {
  const value = bitsToNumber(false);
  if (Number.isSafeInteger(value)) return value;
  return BigInt.asIntN(64, (BigInt(hi) << 32n) | BigInt(lo));
}

const asBuffer = (bytes) => (Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength));

/** protobufjs's BufferReader with 64-bit reads that do not depend on protobufjs's configuration. */
export class Reader extends $protobuf.BufferReader {
  /** A reader over `buffer` (a Buffer or a Uint8Array, not copied). */
  static create(buffer) {
    return new Reader(asBuffer(buffer));
  }

  int64() {
    readVarint64(this);
    return bitsToNumber(false);
  }

  uint64() {
    readVarint64(this);
    return bitsToNumber(true);
  }

  /** An int64 exactly: a number when it is a safe integer, else a bigint. */
  int64Exact() {
    readVarint64(this);
    return bitsToExactInt64();
  }
}

/**
 * A value for protobufjs's Writer's int64 / uint64: a bigint becomes the low/high bits it
 * encodes exactly; anything else is passed through. Throws a RangeError for a bigint that no
 * 64-bit field can hold.
 */
export function long(value) {
  if (typeof value !== 'bigint') return value;
  if (value < INT64_MIN || value > UINT64_MAX) throw new RangeError(`${value} does not fit in 64 bits`);
  const bits = BigInt.asUintN(64, value);
  return { low: Number(bits & 0xffffffffn) | 0, high: Number(bits >> 32n) | 0, unsigned: false };
}

/**
 * A oneof's setter: setting the case to `name` deletes the other cases' fields, as
 * protobufjs's util.oneOfSetter does, but only those the message has.
 */
export function oneOfSetter(fieldNames) {
  return function setOneOf(name) {
    for (let i = 0; i < fieldNames.length; ++i) {
      const field = fieldNames[i];
      if (field !== name && Object.prototype.hasOwnProperty.call(this, field)) delete this[field];
    }
  };
}
