/** Spec 7 exclusive: the queue belongs to one session; others get RESOURCE_LOCKED. */
import { describe, expect, it } from 'vitest';
import { decodeSnapshot, encodeSnapshot, restore, snapshot, stateHash, type Command } from '../src/machine/index.js';
import { Harness } from './machine-harness.js';

function owned(): Harness {
  const h = new Harness({ exclusive: true });
  expect(h.run({ type: 'declare', sessionId: 'owner' })).toEqual({ type: 'ok' });
  return h;
}

describe('spec 7: an exclusive queue records its owner on the first declare with a session', () => {
  it('the owner is the first declaring session; later declares by it renew the lease', () => {
    const h = owned();
    expect(h.state.exclusiveOwner).toBe('owner');
    h.now += 500;
    h.run({ type: 'declare', sessionId: 'owner' });
    expect(h.state.exclusiveOwner).toBe('owner');
    expect(h.state.lastUsedAt).toBe(h.now);
  });

  it('a non-exclusive queue records no owner and ignores session ids', () => {
    const h = new Harness();
    h.run({ type: 'declare', sessionId: 's1' });
    expect(h.state.exclusiveOwner).toBeNull();
    expect(h.run({ type: 'subscribe', consumerId: 'c', prefetch: 1, sessionId: 's2' })).toEqual({ type: 'ok' });
    h.run({ type: 'sessionEnded', sessionId: 's1' });
    expect(h.ofType('deleteQueue')).toEqual([]);
  });
});

describe('spec 7: other sessions get RESOURCE_LOCKED and change nothing', () => {
  const others: ReadonlyArray<[string, Command]> = [
    ['declare', { type: 'declare', sessionId: 'intruder' }],
    ['subscribe', { type: 'subscribe', consumerId: 'c', prefetch: 1, sessionId: 'intruder' }],
    ['get', { type: 'get', ackMode: 'auto', sessionId: 'intruder' }],
    ['purge', { type: 'purge', sessionId: 'intruder' }],
    ['delete', { type: 'delete', sessionId: 'intruder' }],
  ];
  it.each(others)('%s from another session', (_what, command) => {
    const h = owned();
    h.publish();
    const before = stateHash(h.state);
    const reply = h.run(command);
    expect(reply.type === 'error' && reply.code).toBe('RESOURCE_LOCKED');
    expect(reply.type === 'error' && reply.message).toContain('exclusive');
    expect(h.effects).toEqual([]);
    expect(stateHash(h.state)).toBe(before);
  });

  it('the owner may do all of it', () => {
    const h = owned();
    h.publish();
    expect(h.run({ type: 'get', ackMode: 'auto', sessionId: 'owner' }).type).toBe('message');
    expect(h.run({ type: 'subscribe', consumerId: 'c', prefetch: 1, sessionId: 'owner' })).toEqual({ type: 'ok' });
    expect(h.run({ type: 'purge', sessionId: 'owner' }).type).toBe('purged');
    expect(h.run({ type: 'delete', sessionId: 'owner' }).type).toBe('deleted');
  });

  it('publishing is not locked (as in RabbitMQ), nor are commands without a session id', () => {
    const h = owned();
    expect(h.publish()).toBeGreaterThan(0);
    expect(h.run({ type: 'subscribe', consumerId: 'server-side', prefetch: 0 })).toEqual({ type: 'ok' });
  });

  it('an empty or non-string session id is INVALID_ARGUMENT', () => {
    const h = owned();
    expect(h.run({ type: 'declare', sessionId: '' })).toMatchObject({ type: 'error', code: 'INVALID_ARGUMENT' });
    expect(h.run({ type: 'sessionEnded', sessionId: '' })).toMatchObject({ type: 'error', code: 'INVALID_ARGUMENT' });
  });
});

describe('spec 7: the queue is deleted when its owner session ends', () => {
  it("the owner's sessionEnded deletes it; another session's end does not", () => {
    const h = owned();
    h.run({ type: 'sessionEnded', sessionId: 'someone-else' });
    expect(h.reply).toEqual({ type: 'ok' });
    expect(h.ofType('deleteQueue')).toEqual([]);
    h.run({ type: 'sessionEnded', sessionId: 'owner' });
    expect(h.ofType('deleteQueue')).toEqual([{ type: 'deleteQueue', reason: 'exclusive' }]);
  });

  it('without a recorded owner, or without a session id, sessionEnded is trusted (as before)', () => {
    const unowned = new Harness({ exclusive: true });
    unowned.run({ type: 'sessionEnded', sessionId: 'any' });
    expect(unowned.ofType('deleteQueue')).toHaveLength(1);
    const h = owned();
    h.run({ type: 'sessionEnded' });
    expect(h.ofType('deleteQueue')).toHaveLength(1);
  });
});

describe('the owner survives snapshots', () => {
  it('plain and binary snapshots keep it; a queue without one snapshots as before', () => {
    const h = owned();
    expect(snapshot(h.state).exclusiveOwner).toBe('owner');
    expect(restore(snapshot(h.state)).exclusiveOwner).toBe('owner');
    const decoded = decodeSnapshot(encodeSnapshot(h.state));
    expect(decoded.exclusiveOwner).toBe('owner');
    expect(stateHash(decoded)).toBe(stateHash(h.state));
    const plain = new Harness({ exclusive: true });
    expect('exclusiveOwner' in snapshot(plain.state)).toBe(false);
    expect(decodeSnapshot(encodeSnapshot(plain.state)).exclusiveOwner).toBeNull();
  });
});
