import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  decodeSnapshot,
  encodeSnapshot,
  encodeSnapshotLater,
  QueueInvariantError,
  SnapshotScratch,
  recordDeath,
  snapshot,
  SNAPSHOT_VERSION,
  stateHash,
  type Command,
} from '../src/machine/index.js';
import { Harness } from './machine-harness.js';

/** A small deterministic PRNG (mulberry32). */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const deaths = recordDeath(null, {
  queue: 'other',
  reason: 'rejected',
  exchange: 'ex0',
  routingKeys: ['a', 'b'],
  time: 500,
  originalExpirationMs: 1234,
});

/** A busy queue with every kind of per-message variety: routes, priorities, places, TTLs, deaths. */
function randomQueue(seed: number, messages: number): Harness {
  const random = prng(seed);
  const pick = (n: number): number => Math.floor(random() * n);
  const h = new Harness({ maxPriority: 4, deadLetterExchange: 'dlx', deadLetterStrategy: 'at-least-once', messageTtlMs: 60_000, deliveryLimit: 3 });
  h.run({ type: 'subscribe', consumerId: 'c1', prefetch: 50 });
  h.run({ type: 'subscribe', consumerId: 'c2', prefetch: 100, priority: 1 });
  for (let i = 0; i < messages; i += 1) {
    const roll = pick(100);
    h.publish({
      sizeBytes: roll < 5 ? 1e12 + pick(1000) : pick(4096),
      exchange: `ex${pick(3)}`,
      routingKeys: roll < 10 ? ['a', 'b'] : [`rk${pick(5)}`],
      priority: pick(6),
      ...(roll % 7 === 0 ? { expirationMs: pick(100_000) } : {}),
      ...(roll % 11 === 0 ? { delayMs: pick(5_000) } : {}),
      ...(roll % 13 === 0 ? { deaths } : {}),
      ...(roll % 17 === 0 ? { producerId: `p${pick(4)}`, sequence: i } : {}),
    });
    if (i % 97 === 0) h.now += pick(500) + 0.25;
    if (i % 89 === 0) h.run({ type: 'return', consumerId: 'c1', deliveryTag: 1 + pick(40), multiple: pick(2) === 0 });
    if (i % 83 === 0) h.run({ type: 'ack', consumerId: 'c2', deliveryTag: 1 + pick(200) });
    if (i % 79 === 0) h.run({ type: 'discard', consumerId: 'c1', deliveryTag: 1 + pick(40) });
    if (i % 1000 === 999) h.advance(3_000);
  }
  return h;
}

function replay(h: Harness, commands: readonly Command[]): string[] {
  return commands.map((command) => {
    h.run(command);
    return stateHash(h.state);
  });
}

describe('binary snapshot encoding', () => {
  it('a snapshot encoded a step at a time holds the state it started from, however the queue changes meanwhile', () => {
    const h = randomQueue(11, 5_000);
    const expected = encodeSnapshot(h.state);
    const hashBefore = stateHash(h.state);
    const later = encodeSnapshotLater(h.state);
    expect(stateHash(later.state)).toBe(hashBefore);
    let steps = 0;
    let bytes: Uint8Array | null = null;
    let tag = 1;
    while (bytes === null) {
      // Between steps: new messages, acks, returns, expiry and dead-lettering change every column.
      h.publish({ sizeBytes: 10, exchange: 'late', routingKeys: ['z'], priority: 3 });
      h.run({ type: 'ack', consumerId: 'c2', deliveryTag: tag++ });
      h.run({ type: 'return', consumerId: 'c1', deliveryTag: tag, multiple: true });
      h.advance(997);
      bytes = later.step(1);
      steps += 1;
    }
    // A step per column chunk (8192 values) and pass: dozens of steps, not one.
    expect(steps).toBeGreaterThan(20);
    expect(stateHash(h.state)).not.toBe(hashBefore);
    expect(bytes).toEqual(expected);
    expect(stateHash(decodeSnapshot(bytes))).toBe(hashBefore);
  });

  it('snapshots taken in steps one after the other reuse their memory and still hold each its own start', () => {
    const h = randomQueue(13, 3_000);
    const scratch = new SnapshotScratch();
    let tag = 1;
    for (let round = 0; round < 4; round++) {
      // The queue grows in some rounds and shrinks in others: arrays with and without room.
      for (let i = 0; i < (round % 2 === 0 ? 2_000 : 10); i++) h.publish({ sizeBytes: 5, exchange: 'r', routingKeys: [`k${round}`] });
      if (round === 3) for (let i = 0; i < 2_500; i++) h.run({ type: 'ack', consumerId: 'c2', deliveryTag: tag++ });
      const expected = encodeSnapshot(h.state);
      const later = encodeSnapshotLater(h.state, scratch);
      let bytes: Uint8Array | null = null;
      while (bytes === null) {
        h.publish({ sizeBytes: 7, exchange: 'late', routingKeys: ['z'] });
        h.run({ type: 'return', consumerId: 'c1', deliveryTag: tag, multiple: true });
        h.advance(101);
        bytes = later.step(1);
      }
      expect(Buffer.from(bytes).equals(Buffer.from(expected)), `round ${round}`).toBe(true);
    }
    expect(scratch.copy).not.toBeNull();
    expect(scratch.output).not.toBeNull();
  });

  it('round-trips a large random state exactly, and the restored state behaves the same', () => {
    const h = randomQueue(7, 5_000);
    const bytes = encodeSnapshot(h.state);
    const restored = decodeSnapshot(bytes);
    expect(stateHash(restored)).toBe(stateHash(h.state));
    expect(snapshot(restored)).toEqual(snapshot(h.state));
    expect(encodeSnapshot(restored)).toEqual(bytes);
    // Compact: well below the JSON form even for this irregular state.
    expect(bytes.byteLength * 3).toBeLessThan(JSON.stringify(snapshot(h.state)).length);

    const twin = new Harness();
    Object.assign(twin, { state: restored, index: h.index, now: h.now });
    const commands: Command[] = [
      { type: 'credit', consumerId: 'c1', prefetch: 500 },
      { type: 'return', consumerId: 'c2', deliveryTag: 5, multiple: true },
      { type: 'tick' },
      { type: 'get', ackMode: 'auto' },
      { type: 'cancel', consumerId: 'c1' },
      { type: 'purge' },
    ];
    expect(replay(twin, commands)).toEqual(replay(h, commands));
    // Seconds of work: the default 5 s timeout fails on a loaded machine.
  }, 60_000);

  it('round-trips random small states (property)', () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 2 ** 31 }), fc.integer({ min: 0, max: 400 }), (seed, messages) => {
        const h = randomQueue(seed, messages);
        const restored = decodeSnapshot(encodeSnapshot(h.state));
        expect(stateHash(restored)).toBe(stateHash(h.state));
        expect(snapshot(restored)).toEqual(snapshot(h.state));
      }),
      { numRuns: 30 },
    );
  }, 60_000);

  it('starts with the magic and the version', () => {
    const bytes = encodeSnapshot(new Harness().state);
    expect([...bytes.subarray(0, 4)]).toEqual([0x51, 0x51, 0x53, SNAPSHOT_VERSION]);
    expect(stateHash(decodeSnapshot(bytes))).toBe(stateHash(new Harness().state));
  });

  it('throws on a truncated, extended or corrupted buffer, never returns a state', () => {
    const bytes = encodeSnapshot(randomQueue(3, 500).state);
    const random = prng(11);
    for (const length of [0, 3, 11, 12, 13, bytes.length >> 1, bytes.length - 1]) {
      expect(() => decodeSnapshot(bytes.slice(0, length))).toThrow(QueueInvariantError);
    }
    const longer = new Uint8Array(bytes.length + 1);
    longer.set(bytes);
    expect(() => decodeSnapshot(longer)).toThrow(/corrupt queue snapshot/);
    for (let i = 0; i < 200; i += 1) {
      const copy = bytes.slice();
      const at = Math.floor(random() * copy.length);
      copy[at] = (copy[at] as number) ^ (1 + Math.floor(random() * 255));
      expect(() => decodeSnapshot(copy), `byte ${at} flipped`).toThrow(/corrupt queue snapshot/);
    }
    expect(() => decodeSnapshot(new TextEncoder().encode('{"version":1}'))).toThrow(/bad magic/);
    const wrongVersion = bytes.slice();
    wrongVersion[3] = SNAPSHOT_VERSION + 1;
    expect(() => decodeSnapshot(wrongVersion)).toThrow(/version/);
  });
});
