/**
 * Binary snapshots do not depend on where the store keeps its messages. The encoder copies
 * column ranges whole when the messages sit in consecutive slots in id order, and gathers
 * them slot by slot otherwise (freed slots reused out of id order, sparse ids); both stream
 * the columns in chunks. States of every layout must encode to the bytes of the same state
 * rebuilt in id order, across chunk boundaries, and decode back exactly. A snapshot written by
 * the first version-2 encoder must still decode and re-encode byte for byte.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { decodeSnapshot, encodeSnapshot, recordDeath, restore, snapshot, stateHash, type QueueState } from '../src/machine/index.js';
import { MessageStore, type NewMessage } from '../src/machine/store.js';
import { Harness } from './machine-harness.js';

/** More than two of the codec's chunks (8192 values). */
const MULTI_CHUNK = 20_000;

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  return Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(Buffer.from(b.buffer, b.byteOffset, b.byteLength));
}

/** Encodes like the same state rebuilt in id order (consecutive slots), and decodes back exactly. */
function expectLayoutIndependent(state: QueueState): Uint8Array {
  const bytes = encodeSnapshot(state);
  const rebuilt = restore(snapshot(state));
  expect(rebuilt.messages.liveSlotRun()).toBeGreaterThanOrEqual(0);
  expect(sameBytes(encodeSnapshot(rebuilt), bytes)).toBe(true);
  const decoded = decodeSnapshot(bytes);
  expect(stateHash(decoded)).toBe(stateHash(state));
  expect(sameBytes(encodeSnapshot(decoded), bytes)).toBe(true);
  return bytes;
}

function isAscending(values: ArrayLike<number>): boolean {
  for (let i = 1; i < values.length; i += 1) if ((values[i] as number) <= (values[i - 1] as number)) return false;
  return true;
}

function message(id: number, exchange = 'ex'): NewMessage {
  return { id, sizeBytes: 10, priority: 0, exchange, routingKeys: ['rk'], deaths: null, expiresAt: -1, expirationMs: -1, notBefore: 0 };
}

describe('MessageStore slot order (binary snapshots)', () => {
  it('finds a run of consecutive slots in id order, also after consuming from the head', () => {
    const store = new MessageStore();
    for (let id = 1; id <= 10; id += 1) store.insert(message(id), 'ready');
    expect(store.liveSlotRun()).toBe(0);
    store.delete(1);
    store.delete(2);
    expect(store.liveSlotRun()).toBe(2);
    store.delete(5); // a hole: no run, but the slots are still in id order
    expect(store.liveSlotRun()).toBe(-1);
    expect([...store.slotsInIdOrder()]).toEqual([2, 3, 5, 6, 7, 8, 9]);
    store.insert(message(11), 'ready'); // reuses the freed slot of 5, out of id order
    expect(store.liveSlotRun()).toBe(-1);
    expect([...store.slotsInIdOrder()]).toEqual([2, 3, 5, 6, 7, 8, 9, 4]);
  });

  it('lists the live slots in id order for dense and sparse ids, in any layout, and knows a route shared by all (property)', () => {
    type Op = { readonly kind: 'insert'; readonly gap: number; readonly route: number } | { readonly kind: 'delete'; readonly pick: number } | { readonly kind: 'shrink' };
    const gap = fc.oneof(fc.integer({ min: 1, max: 3 }), fc.integer({ min: 1, max: 2 ** 40 }));
    const op: fc.Arbitrary<Op> = fc.oneof(
      { weight: 5, arbitrary: fc.record({ kind: fc.constant('insert' as const), gap, route: fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 2 })) }) },
      { weight: 3, arbitrary: fc.record({ kind: fc.constant('delete' as const), pick: fc.nat() }) },
      { weight: 1, arbitrary: fc.record({ kind: fc.constant('shrink' as const) }) },
    );
    fc.assert(
      fc.property(fc.array(op, { maxLength: 300 }), (ops) => {
        const store = new MessageStore();
        let nextId = 0;
        for (const o of ops) {
          if (o.kind === 'insert') store.insert(message((nextId += o.gap), `ex${o.route}`), 'ready');
          else if (o.kind === 'shrink') store.shrink();
          else if (store.size > 0) store.delete(store.keys()[o.pick % store.size] as number);
        }
        const slots = store.slotsInIdOrder();
        expect([...slots].map((slot) => store.ids[slot])).toEqual(store.keys());
        const run = store.liveSlotRun();
        if (run >= 0) expect([...slots]).toEqual(store.keys().map((_, i) => run + i));
        const exchanges = [...new Set(store.keys().map((id) => store.get(id)!.exchange))];
        const sole = store.soleRoute();
        expect(sole >= 0 ? [store.route(sole).exchange] : []).toEqual(exchanges.length === 1 ? exchanges : []);
      }),
      { numRuns: 300 },
    );
  });
});

describe('binary snapshots of every store layout', () => {
  it('a backlog consumed from the head and refilled (freed slots reused out of id order)', () => {
    const h = new Harness({ maxPriority: 2 });
    for (let i = 0; i < MULTI_CHUNK; i += 1) h.publish({ sizeBytes: 100 + (i % 7) });
    for (let i = 0; i < 5_000; i += 1) h.run({ type: 'get', ackMode: 'auto' });
    expect(h.state.messages.liveSlotRun()).toBeGreaterThan(0); // consumed from the head: still a run
    expectLayoutIndependent(h.state);
    for (let i = 0; i < 5_000; i += 1) h.publish({ exchange: i % 2 === 0 ? 'a' : 'b', priority: i % 3 });
    expect(h.state.messages.liveSlotRun()).toBe(-1);
    expect(isAscending(h.state.messages.slotsInIdOrder())).toBe(false);
    expectLayoutIndependent(h.state);
  });

  it('sparse ids (a few old messages held, many consumed since) with slots out of id order', () => {
    const h = new Harness();
    h.run({ type: 'subscribe', consumerId: 'c1', prefetch: 5 });
    for (let i = 0; i < 5; i += 1) h.publish();
    h.run({ type: 'cancel', consumerId: 'c1' }); // the five go back to ready
    h.run({ type: 'subscribe', consumerId: 'c2', prefetch: 3 });
    for (let i = 0; i < 3_000; i += 1) {
      h.publish();
      h.run({ type: 'get', ackMode: 'auto' });
    }
    h.run({ type: 'ack', consumerId: 'c2', deliveryTag: 2, multiple: false }); // frees a low slot
    for (let i = 0; i < 20; i += 1) h.publish({ priority: 0, sizeBytes: i });
    const ids = h.state.messages.keys();
    expect((ids.at(-1) as number) - (ids[0] as number)).toBeGreaterThan(8 * ids.length); // too sparse for a table by id
    expect(isAscending(h.state.messages.slotsInIdOrder())).toBe(false);
    expectLayoutIndependent(h.state);
  });

  it('varied columns across chunk boundaries: priorities, places, delivery counts, TTLs, delays, deaths, big ids and sizes', () => {
    const deaths = recordDeath(null, { queue: 'other', reason: 'expired', exchange: 'x', routingKeys: ['r'], time: 5, originalExpirationMs: null });
    const h = new Harness({ maxPriority: 4, deliveryLimit: 5, deadLetterExchange: 'dlx' });
    h.index = 2 ** 40; // ids past 2^31: stored as steps
    for (let i = 0; i < MULTI_CHUNK; i += 1) {
      h.publish({
        sizeBytes: i === 15_000 ? 2 ** 33 : 64,
        priority: i < 9_000 ? 0 : i % 5, // constant through the first chunk, varied after
        ...(i > 17_000 ? { expirationMs: 1_000 + i } : {}),
        ...(i % 4_001 === 4_000 ? { delayMs: 50 } : {}),
        ...(i % 5_003 === 7 ? { deaths } : {}),
      });
      if (i === 10_000) h.now += 0.5;
    }
    h.run({ type: 'subscribe', consumerId: 'c', prefetch: 300 });
    h.run({ type: 'return', consumerId: 'c', deliveryTag: 250, multiple: true });
    for (let i = 0; i < 200; i += 1) h.run({ type: 'get', ackMode: 'auto' });
    for (let i = 0; i < 100; i += 1) h.publish({ priority: 4 });
    const bytes = expectLayoutIndependent(h.state);

    // The restored store keeps working like the original one.
    const twin = new Harness();
    Object.assign(twin, { state: decodeSnapshot(bytes), index: h.index, now: h.now });
    for (const run of [h, twin]) {
      run.advance(100_000);
      for (let i = 0; i < 500; i += 1) run.run({ type: 'get', ackMode: 'auto' });
      for (let i = 0; i < 500; i += 1) run.publish({ priority: i % 5 });
    }
    expect(stateHash(twin.state)).toBe(stateHash(h.state));
  });

  it('messages all of one priority, place and route (constant columns known without a scan)', () => {
    const h = new Harness({ maxPriority: 5 });
    h.run({ type: 'subscribe', consumerId: 'c', prefetch: MULTI_CHUNK });
    for (let i = 0; i < MULTI_CHUNK; i += 1) h.publish({ priority: 3, exchange: 'one', routingKeys: ['k'] });
    const plain = snapshot(h.state).messages;
    expect(new Set(plain.map((m) => `${m.priority} ${m.place} ${m.exchange}`))).toEqual(new Set(['3 delivered one']));
    expectLayoutIndependent(h.state);
  });

  it('keeps -0, NaN and fractions exactly, in a run of slots and gathered', () => {
    for (const reuseSlots of [false, true]) {
      const h = new Harness();
      for (let i = 0; i < MULTI_CHUNK; i += 1) h.publish();
      if (reuseSlots) {
        for (let i = 0; i < 10; i += 1) h.run({ type: 'get', ackMode: 'auto' });
        for (let i = 0; i < 10; i += 1) h.publish();
        expect(h.state.messages.liveSlotRun()).toBe(-1);
      }
      const ids = h.state.messages.keys();
      const at = (i: number): number => ids[i] as number;
      // Each alone among zeros or -1s, so that the column would otherwise be a constant or small integers.
      const odd: Array<[number, 'notBefore' | 'expiresAt', number]> = [
        [at(8_191), 'notBefore', -0],
        [at(8_192), 'expiresAt', Number.NaN],
        [at(16_384), 'expiresAt', 0.5],
      ];
      for (const [id, field, value] of odd) h.state.messages.get(id)![field] = value;
      const decoded = decodeSnapshot(expectLayoutIndependent(h.state));
      for (const [id, field, value] of odd) expect(Object.is(decoded.messages.get(id)![field], value), `${field} of ${id}`).toBe(true);
      expect(Object.is(decoded.messages.get(at(0))!.notBefore, 0)).toBe(true);
    }
  });
});

/** Written by the first version-2 encoder: 11 messages with ids past 2^33, a 1 TiB message, a death, an expiration, a delay, deliveries, priorities. */
const FIRST_V2_SNAPSHOT = 'UVFTAs8IAABUT58YDQYAAHsibmFtZSI6InEiLCJhcmdzIjp7ImRlbGl2ZXJ5TGltaXQiOjMsImRlYWRMZXR0ZXJFeGNoYW5nZSI6ImRseCIsImRlYWRMZXR0ZXJSb3V0aW5nS2V5IjpudWxsLCJkZWFkTGV0dGVyU3RyYXRlZ3kiOiJhdC1sZWFzdC1vbmNlIiwibWVzc2FnZVR0bE1zIjo2MDAwMCwibWF4TGVuZ3RoIjpudWxsLCJtYXhMZW5ndGhCeXRlcyI6bnVsbCwib3ZlcmZsb3ciOiJkcm9wLWhlYWQiLCJtYXhQcmlvcml0eSI6Mywic2luZ2xlQWN0aXZlQ29uc3VtZXIiOmZhbHNlLCJkZWR1cFdpbmRvd01zIjoxMjAwMDAsImNvbnN1bWVyVGltZW91dE1zIjoxODAwMDAwLCJhdXRvRGVsZXRlIjpmYWxzZSwiZXhwaXJlc01zIjpudWxsLCJleGNsdXNpdmUiOmZhbHNlfSwidG90YWxzIjp7InJlYWR5Ijp7ImNvdW50Ijo3LCJieXRlcyI6MTA5OTUxMTYyODQyMH0sImRlbGF5ZWQiOnsiY291bnQiOjEsImJ5dGVzIjoxMDd9LCJkZWxpdmVyZWQiOnsiY291bnQiOjMsImJ5dGVzIjozMDV9LCJkZWFkTGV0dGVyaW5nIjp7ImNvdW50IjowLCJieXRlcyI6MH0sIm1vdmluZyI6eyJjb3VudCI6MCwiYnl0ZXMiOjB9fSwiY29uc3VtZXJzIjpbeyJpZCI6ImMxIiwicHJlZmV0Y2giOjMsInByaW9yaXR5IjowLCJyZWdpc3RlcmVkSW5kZXgiOjEsInVuYWNrZWQiOltbMSw4NTg5OTM0NTkzXSxbMyw4NTg5OTM0NTk1XSxbNCw4NTg5OTM0NTk2XV0sIm5leHREZWxpdmVyeVRhZyI6NSwibGFzdFNlcnZlZFNlcSI6NH1dLCJhY3RpdmVDb25zdW1lcklkIjpudWxsLCJwcm9kdWNlcnMiOltdLCJzZXJ2ZVNlcSI6NCwiaGFkQ29uc3VtZXIiOnRydWUsImxhc3RVc2VkQXQiOjEwMDUsInRpY2tBdCI6MTUwMS41LCJkZWxldGVkIjpmYWxzZSwiY2xvY2tNcyI6MTAwNS41LCJsYXN0SW5kZXgiOjg1ODk5MzQ2MDYsImdvbmUiOnsiYWNrZWQiOjEsInJlamVjdGVkIjowLCJleHBpcmVkIjowLCJtYXhsZW4iOjAsImRlbGl2ZXJ5X2xpbWl0IjowLCJwdXJnZWQiOjAsImRlbGV0ZWQiOjAsIm1vdmVkIjowfSwiZW5xdWV1ZWQiOjEyLCJtZXNzYWdlQ291bnQiOjExLCJsZXZlbHMiOjQsInJvdXRlcyI6W1siYSIsWyJrIiwiazAiXV0sWyJhIixbImsiLCJrMSJdXSxbImIiLFsiayIsImsxIl1dLFsiYiIsWyJrIiwiazAiXV1dLCJkZWF0aHMiOltbODU4OTkzNDU5Nix7InJlY29yZHMiOlt7InF1ZXVlIjoib3RoZXIiLCJyZWFzb24iOiJyZWplY3RlZCIsImNvdW50IjoxLCJleGNoYW5nZSI6ImV4MCIsInJvdXRpbmdLZXlzIjpbImEiLCJiIl0sImZpcnN0VGltZSI6NTAwLCJsYXN0VGltZSI6NTAwLCJvcmlnaW5hbEV4cGlyYXRpb25NcyI6MTIzNH1dLCJmaXJzdCI6eyJyZWFzb24iOiJyZWplY3RlZCIsInF1ZXVlIjoib3RoZXIiLCJleGNoYW5nZSI6ImV4MCJ9LCJsYXN0Ijp7InJlYXNvbiI6InJlamVjdGVkIiwicXVldWUiOiJvdGhlciIsImV4Y2hhbmdlIjoiZXgwIn19XV0sImV4cGlyYXRpb25zIjpbWzg1ODk5MzQ1OTYsNTAwXV0sImRlbGl2ZXJpZXMiOltbODU4OTkzNDU5MywiYzEiLDEsMTAwMF0sWzg1ODk5MzQ1OTUsImMxIiwzLDEwMDFdLFs4NTg5OTM0NTk2LCJjMSIsNCwxMDA0LjVdXX0DCwAAAAAACAAAAABCAQAAAAEAAAABAAAAAQAAAAEAAAACAAAAAQAAAAIAAAACAAAAAQAAAAQLAAAAAAAAAAAAWUAAAAAAAEBZQAAAAAAAgFlAAAAAAADAWUAAAAAAAABwQgAAAAAAQFpAAAAAAADAWkAAAAAAAABbQAAAAAAAQFtAAAAAAACAW0AAAAAAAMBbQAQLAAAAAAAAAADJ7UAAAAAAEMntQAAAAAAgye1AAAAAAAB2l0AAAAAAQMntQAAAAABQye1AAAAAAHDJ7UAAAAAAgMntQAAAAACQye1AAAAAAKDJ7UAAAAAAsMntQAQLAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAC+nUAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAELAAAAAAEAAAAAAAAAAAABCwAAAAABAgMAAQMAAQIDAQsAAAACAAICAAABAAAAAAELAAAAAAEAAQABAgMCAwIEAAAAAAMCAAAAAAAoAAAAAEIEAAAAAAEAAAAAABAAAAAAQgMCAAAAAAAwAAAAAEIFAAAABAAAAAAAAQAAAAAAaAAAAABCBAAAAAAAAQAAAAAAcAAAAABCBAIAAAAAAAAAAL6dQAAAQAAAAABCBBgAAAAAAAAAAHaXQAAAIAAAAABCAAAAAADJ7UAAAAgAAAAAQgAAAAAgye1AAAAYAAAAAEIAAAAAEMntQAAAEAAAAABCAAAAAEDJ7UAAACgAAAAAQgAAAABQye1AAAAwAAAAAEIAAAAAYMntQAAAOAAAAABCAAAAAHDJ7UAAAEAAAAAAQgAAAACAye1AAABIAAAAAEIAAAAAkMntQAAAWAAAAABCAAAAAKDJ7UAAAGgAAAAAQgAAAACwye1AAABwAAAAAEI=';

describe('snapshots written before the streaming encoder', () => {
  it('decode and re-encode byte for byte', () => {
    const bytes = new Uint8Array(Buffer.from(FIRST_V2_SNAPSHOT, 'base64'));
    const state = decodeSnapshot(bytes);
    expect(sameBytes(encodeSnapshot(state), bytes)).toBe(true);
    expect(state.messages.size).toBe(11);
    const plain = snapshot(state).messages;
    expect(plain.map((m) => m.sizeBytes)).toContain(2 ** 40);
    expect(plain.filter((m) => m.deaths !== null)).toHaveLength(1);
    expect(plain.filter((m) => m.place === 'delivered').map((m) => m.consumerId)).toEqual(['c1', 'c1', 'c1']);
    expect(plain.filter((m) => m.place === 'delayed')).toHaveLength(1);
    expect(new Set(plain.map((m) => m.priority))).toEqual(new Set([0, 1, 2, 3]));
  });
});

/** CRC-32 (IEEE), bit by bit: the reference for crafted snapshots. */
function crc32(data: Uint8Array): number {
  let crc = -1;
  for (const byte of data) {
    crc ^= byte;
    for (let k = 0; k < 8; k += 1) crc = crc & 1 ? 0xedb88320 ^ (crc >>> 1) : crc >>> 1;
  }
  return (crc ^ -1) >>> 0;
}

describe('decoding crafted snapshots', () => {
  it('rejects a constant id column claiming billions of messages before allocating for them', () => {
    const empty = encodeSnapshot(new Harness().state);
    const view = new DataView(empty.buffer, empty.byteOffset, empty.byteLength);
    const metaLength = view.getUint32(12, true);
    const meta = JSON.parse(Buffer.from(empty.subarray(16, 16 + metaLength)).toString('utf8')) as Record<string, unknown>;
    const lists = empty.subarray(16 + metaLength + 8 * 5); // after the eight empty message columns
    const newMeta = Buffer.from(JSON.stringify({ ...meta, messageCount: 0xffffffff }));
    const body = new Uint8Array(4 + newMeta.length + 8 * 13 + lists.length);
    const out = new DataView(body.buffer);
    out.setUint32(0, newMeta.length, true);
    body.set(newMeta, 4);
    for (let c = 0, at = 4 + newMeta.length; c < 8; c += 1, at += 13) {
      out.setUint8(at, 0); // constant
      out.setUint32(at + 1, 0xffffffff, true);
      out.setFloat64(at + 5, 1, true);
    }
    body.set(lists, body.length - lists.length);
    const crafted = new Uint8Array(12 + body.length);
    crafted.set([0x51, 0x51, 0x53, empty[3] as number]);
    new DataView(crafted.buffer).setUint32(4, body.length, true);
    new DataView(crafted.buffer).setUint32(8, crc32(body), true);
    crafted.set(body, 12);
    expect(() => decodeSnapshot(crafted)).toThrow(/corrupt queue snapshot: message ids not ascending/);
  });
});
