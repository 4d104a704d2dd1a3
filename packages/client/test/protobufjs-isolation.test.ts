/**
 * Issue 12 item 9: importing the SDK leaves the application's own protobufjs as it was.
 * The SDK is imported only after the application's protobufjs has been looked at, in a
 * process (test file) of its own.
 */
import { createRequire } from 'node:module';
import { expect, it } from 'vitest';

const require = createRequire(import.meta.url);

it('importing @quorumq/client leaves protobufjs (require and import) and its int64 decoding as they were', async () => {
  const cjs = require('protobufjs') as typeof import('protobufjs');
  const esm = (await import('protobufjs')).default;
  const Long = require('long') as typeof import('long').default;
  const longBefore = cjs.util.Long;
  expect(longBefore).toBe(Long);
  expect(esm.util.Long).toBe(longBefore);
  const int64Before = cjs.Reader.prototype.int64;
  const rootsBefore = Object.keys(cjs.roots);

  const sdk = await import('@quorumq/client');
  // The SDK's own decoding runs too (it is what used to reconfigure protobufjs).
  expect(sdk.decodeHeaders({ n: { intValue: 5 } })).toEqual({ n: 5 });

  expect(cjs.util.Long).toBe(longBefore);
  expect((await import('protobufjs')).default.util.Long).toBe(longBefore);
  expect(cjs.Reader.prototype.int64).toBe(int64Before);
  expect(Object.keys(cjs.roots)).toEqual(rootsBefore);

  // The application's own int64 field still decodes exactly, as a Long.
  const { root } = cjs.parse('syntax = "proto3"; message Order { int64 id = 1; uint64 total = 2; }');
  const Order = root.lookupType('Order');
  const bytes = Order.encode(Order.create({ id: Long.fromString('9007199254740993'), total: Long.fromString('18446744073709551615', true) })).finish();
  const decoded = Order.decode(bytes) as unknown as { id: InstanceType<typeof Long>; total: InstanceType<typeof Long> };
  expect(Long.isLong(decoded.id)).toBe(true);
  expect(decoded.id.toString()).toBe('9007199254740993');
  expect(decoded.total.toString()).toBe('18446744073709551615');
});
