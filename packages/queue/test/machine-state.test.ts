import { describe, expect, it } from 'vitest';
import {
  argumentMismatch,
  decodeSnapshot,
  encodeSnapshot,
  leaderEffects,
  lowestLiveIndex,
  parseQueueArguments,
  restore,
  snapshot,
  stateHash,
} from '../src/machine/index.js';
import { Harness } from './machine-harness.js';

function busyQueue(): Harness {
  const h = new Harness({ maxPriority: 2, deadLetterExchange: 'dlx', messageTtlMs: 10_000 });
  for (let i = 0; i < 6; i += 1) h.publish({ priority: i % 3, producerId: 'p', sequence: i });
  h.publish({ delayMs: 500 });
  h.run({ type: 'subscribe', consumerId: 'c', prefetch: 3 });
  h.run({ type: 'return', consumerId: 'c', deliveryTag: 2 });
  h.run({ type: 'discard', consumerId: 'c', deliveryTag: 1 });
  return h;
}

describe('state functions', () => {
  it('snapshot -> restore round-trips exactly (same hash, same snapshot)', () => {
    const h = busyQueue();
    const restored = restore(snapshot(h.state));
    expect(stateHash(restored)).toBe(stateHash(h.state));
    expect(snapshot(restored)).toEqual(snapshot(h.state));
    expect(stateHash(decodeSnapshot(encodeSnapshot(h.state)))).toBe(stateHash(h.state));
  });

  it('a snapshot is a copy: later applies do not change it', () => {
    const h = busyQueue();
    const taken = snapshot(h.state);
    const text = JSON.stringify(taken);
    h.publish();
    h.run({ type: 'ack', consumerId: 'c', deliveryTag: 3, multiple: true });
    expect(JSON.stringify(taken)).toBe(text);
  });

  it('the state hash differs when the state differs', () => {
    const a = busyQueue();
    const b = busyQueue();
    expect(stateHash(a.state)).toBe(stateHash(b.state));
    b.publish();
    expect(stateHash(a.state)).not.toBe(stateHash(b.state));
  });

  it('lowestLiveIndex tells storage which bodies are still needed', () => {
    const h = new Harness();
    expect(lowestLiveIndex(h.state)).toBeNull();
    const a = h.publish();
    const b = h.publish();
    expect(lowestLiveIndex(h.state)).toBe(a);
    h.run({ type: 'get', ackMode: 'auto' });
    expect(lowestLiveIndex(h.state)).toBe(b);
  });

  it('leaderEffects re-issues pending at-least-once dead-letters and the next tick', () => {
    const h = busyQueue();
    const effects = leaderEffects(h.state, h.now);
    expect(effects.filter((e) => e.type === 'deadLetter')).toMatchObject([{ reason: 'rejected', confirmRequired: true }]);
    expect(effects.filter((e) => e.type === 'scheduleTick')).toEqual([{ type: 'scheduleTick', at: h.now + 500 }]);
  });

  it('spec 7: argumentMismatch names the first differing argument', () => {
    const base = parseQueueArguments({ maxLength: 10 });
    expect(argumentMismatch(base, parseQueueArguments({ maxLength: 10 }))).toBeNull();
    expect(argumentMismatch(base, parseQueueArguments({ maxLength: 11 }))).toBe('maxLength');
  });
});

describe('spec 6: leader time', () => {
  it('a new leader whose clock is behind does not move the machine clock back', () => {
    const h = new Harness();
    h.run({ type: 'subscribe', consumerId: 'c', prefetch: 0 });
    h.now = 10_000;
    h.publish({ delayMs: 500 });
    h.now = 9_000; // the next leader's clock is a second behind
    h.run({ type: 'tick' });
    expect(h.state.clockMs).toBe(10_000);
    h.now = 10_499;
    h.run({ type: 'tick' });
    expect(h.deliveries()).toHaveLength(0);
    h.now = 10_500;
    h.run({ type: 'tick' });
    expect(h.deliveries()).toHaveLength(1);
  });

  it('applying an index at or below the last applied one is an invariant violation', () => {
    const h = new Harness();
    h.publish();
    h.index -= 1;
    expect(() => h.publish()).toThrow(/applied after/);
  });
});

describe('spec 3 and 6: positions, expiry and delays together', () => {
  it('returned messages go back in original order ahead of never-delivered ones', () => {
    const h = new Harness();
    const [a, b, c, d] = [h.publish(), h.publish(), h.publish(), h.publish()];
    h.run({ type: 'subscribe', consumerId: 'x', prefetch: 3 });
    h.run({ type: 'credit', consumerId: 'x', prefetch: 1 });
    h.run({ type: 'return', consumerId: 'x', deliveryTag: 3 });
    h.run({ type: 'return', consumerId: 'x', deliveryTag: 1 });
    h.run({ type: 'cancel', consumerId: 'x' });
    h.run({ type: 'subscribe', consumerId: 'y', prefetch: 0 });
    expect(h.deliveries('y').map((m) => m.messageId)).toEqual([a, b, c, d]);
  });

  it('a delayed message whose TTL runs out first expires without ever being visible', () => {
    const h = new Harness({ deadLetterExchange: 'dlx', deadLetterStrategy: 'at-most-once' });
    h.run({ type: 'subscribe', consumerId: 'c', prefetch: 0 });
    const id = h.publish({ delayMs: 1000, expirationMs: 200 });
    h.advance(200);
    expect(h.ofType('deadLetter')).toMatchObject([{ messageId: id, reason: 'expired' }]);
    h.advance(800);
    expect(h.deliveries()).toHaveLength(0);
  });

  it('a delivered message past its TTL is not requeued on return: it is dead-lettered as expired', () => {
    const h = new Harness({ deadLetterExchange: 'dlx' });
    const id = h.publish({ expirationMs: 100 });
    h.run({ type: 'subscribe', consumerId: 'c', prefetch: 1 });
    h.advance(150);
    expect(h.state.messages.get(id)?.place).toBe('delivered');
    h.run({ type: 'return', consumerId: 'c', deliveryTag: 1 });
    expect(h.ofType('deadLetter')).toMatchObject([{ messageId: id, reason: 'expired' }]);
    expect(h.state.messages.get(id)?.place).toBe('deadLettering');
  });

  it('message TTL 0 expires at once, even with a consumer waiting (an expired message is never delivered)', () => {
    const h = new Harness({ messageTtlMs: 0 });
    h.run({ type: 'subscribe', consumerId: 'c', prefetch: 0 });
    h.publish();
    expect(h.deliveries()).toHaveLength(0);
    expect(h.state.gone.expired).toBe(1);
  });

  it('expiry dead-letters record original_expiration only for a per-message expiration', () => {
    const h = new Harness({ messageTtlMs: 100, deadLetterExchange: 'dlx', deadLetterStrategy: 'at-most-once' });
    h.publish();
    h.publish({ expirationMs: 50 });
    h.advance(100);
    const dead = h.ofType('deadLetter');
    expect(dead.map((d) => d.deaths.records[0]?.originalExpirationMs)).toEqual([50, null]);
  });
});
