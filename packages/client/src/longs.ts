// 64-bit integers on the wire. @quorumq/proto reads int64/uint64 fields as JS numbers, except a
// header's int_value, which it reads exactly (a number when that is exact, else a bigint); it
// does so without touching the protobufjs module the application shares. Messages decoded by
// other code (e.g. a protobufjs with Long support) may hold Long objects instead. Every read of
// a 64-bit field in the SDK goes through these helpers so that any representation works.

/** A protobufjs Long (or anything shaped like one). */
interface LongLike {
  readonly low: number;
  readonly high: number;
  readonly unsigned?: boolean;
}

function isLongLike(value: unknown): value is LongLike {
  return typeof value === 'object' && value !== null
    && typeof (value as { low?: unknown }).low === 'number' && typeof (value as { high?: unknown }).high === 'number';
}

const TWO_64 = 1n << 64n;
const INT64_MIN = -(1n << 63n);
const INT64_MAX = (1n << 63n) - 1n;

/** A 64-bit wire value (number, Long, bigint, decimal string) as a bigint. */
export function wireBigInt(value: unknown): bigint {
  if (typeof value === 'bigint') return value;
  if (typeof value === 'number') return Number.isFinite(value) ? BigInt(Math.trunc(value)) : 0n;
  if (typeof value === 'string') return value === '' ? 0n : BigInt(value);
  if (isLongLike(value)) {
    const bits = (BigInt(value.high >>> 0) << 32n) | BigInt(value.low >>> 0);
    return !value.unsigned && value.high < 0 ? bits - TWO_64 : bits;
  }
  return 0n;
}

/** A 64-bit wire value as a JS number (precision is lost beyond 2^53; 0 when absent). */
export function wireNumber(value: unknown): number {
  if (typeof value === 'number') return value;
  if (value === null || value === undefined) return 0;
  return Number(wireBigInt(value));
}

/** A 64-bit wire value as a number when it is a safe integer, else as a bigint. */
export function wireInt(value: unknown): number | bigint {
  if (typeof value === 'number') return value;
  const big = wireBigInt(value);
  return big >= BigInt(Number.MIN_SAFE_INTEGER) && big <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(big) : big;
}

/**
 * A value to put in a generated int64 field. Safe integers stay numbers; larger bigints are
 * passed as low/high bits, which the protobufjs writer encodes exactly (it would silently
 * write 0 for a bigint).
 */
export function toWireInt64(value: number | bigint): number {
  if (typeof value === 'number') return value;
  if (value < INT64_MIN || value > INT64_MAX) throw new RangeError(`${value} does not fit in a signed 64-bit integer`);
  if (value >= BigInt(Number.MIN_SAFE_INTEGER) && value <= BigInt(Number.MAX_SAFE_INTEGER)) return Number(value);
  const bits = BigInt.asUintN(64, value);
  const long: LongLike = { low: Number(bits & 0xffffffffn) | 0, high: Number(bits >> 32n) | 0, unsigned: false };
  // The generated field type says number; the writer accepts Long-shaped values (LongBits.from).
  return long as unknown as number;
}
