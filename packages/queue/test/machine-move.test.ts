/** Spec 8: moving messages (DLQ replay) one by one, at least once, bounded by the start count. */
import { describe, expect, it } from 'vitest';
import {
  decodeSnapshot, encodeSnapshot, leaderEffects, moveProgress, restore, snapshot, stateHash, type Command, type Effect,
} from '../src/machine/index.js';
import { Harness } from './machine-harness.js';
import { checkInvariants } from './machine-invariants.js';

type MoveEffect = Extract<Effect, { type: 'move' }>;

function withMessages(n: number, args = {}): { h: Harness; ids: number[] } {
  const h = new Harness(args, 'dlq');
  const ids: number[] = [];
  for (let i = 0; i < n; i++) ids.push(h.publish({ routingKeys: [`rk${i}`] }));
  return { h, ids };
}

const start = (extra: Partial<Extract<Command, { type: 'moveStart' }>> = {}): Command => ({ type: 'moveStart', moveId: 'm1', exchange: 'work', ...extra });

describe('spec 8: a move hands messages out one by one and removes each only once the destination committed it', () => {
  it('moves the ready messages in delivery order, one in flight at a time', () => {
    const { h, ids } = withMessages(3);
    expect(h.run(start())).toEqual({ type: 'moveStarted', moveId: 'm1', count: 3 });
    const moved: number[] = [];
    for (let i = 0; i < 3; i++) {
      const [effect] = h.ofType('move');
      expect(h.ofType('move')).toHaveLength(1);
      expect(effect).toMatchObject({ moveId: 'm1', exchange: 'work', routingKeys: [`rk${i}`], sizeBytes: 10, deaths: null });
      expect(h.state.messages.get(effect!.messageId)?.place).toBe('moving');
      expect(h.state.totals.moving.count).toBe(1);
      moved.push(effect!.messageId);
      h.run({ type: 'moveConfirmed', moveId: 'm1', messageIds: [effect!.messageId] });
      expect(h.state.messages.has(effect!.messageId)).toBe(false);
      checkInvariants(h.state);
    }
    expect(moved).toEqual(ids);
    expect(h.ofType('moveDone')).toEqual([{ type: 'moveDone', moveId: 'm1', outcome: 'count', count: 3, moved: 3, failed: 0 }]);
    expect(h.state.gone.moved).toBe(3);
    expect(h.state.messages.size).toBe(0);
  });

  it('stops after the number of messages the queue held when it started (new arrivals stay)', () => {
    const { h, ids } = withMessages(2);
    h.run(start());
    const late = h.publish();
    for (const id of ids) h.run({ type: 'moveConfirmed', moveId: 'm1', messageIds: [id] });
    expect(h.ofType('moveDone')[0]).toMatchObject({ outcome: 'count', moved: 2 });
    expect(h.state.messages.get(late)?.place).toBe('ready');
    expect(h.ofType('move')).toEqual([]);
  });

  it('a limit caps the count; a window hands several out at once', () => {
    const { h } = withMessages(10);
    expect(h.run(start({ limit: 4, window: 3 }))).toEqual({ type: 'moveStarted', moveId: 'm1', count: 4 });
    const first = h.ofType('move').map((e) => e.messageId);
    expect(first).toHaveLength(3);
    h.run({ type: 'moveConfirmed', moveId: 'm1', messageIds: first });
    expect(h.ofType('move')).toHaveLength(1);
    expect(moveProgress(h.state)).toEqual({ moveId: 'm1', count: 4, handedOut: 4, moved: 3, failed: 0, inFlight: 1, cancelled: false, done: false });
  });

  it('a routing key replaces the messages\' own; exchange "" with a queue name moves to that queue', () => {
    const { h } = withMessages(1);
    h.run(start({ exchange: '', routingKey: 'work-queue' }));
    expect(h.ofType('move')[0]).toMatchObject({ exchange: '', routingKeys: ['work-queue'] });
  });

  it('the moving message is not delivered to consumers, not purged and not expired', () => {
    const { h, ids } = withMessages(2, { messageTtlMs: 1_000 });
    h.run(start());
    h.run({ type: 'subscribe', consumerId: 'c', prefetch: 0 });
    expect(h.deliveries().map((d) => d.messageId)).toEqual([ids[1]]);
    h.run({ type: 'purge' });
    h.advance(5_000);
    expect(h.state.messages.get(ids[0]!)?.place).toBe('moving');
  });

  it('deaths travel with the message', () => {
    const h = new Harness({ deadLetterExchange: 'dlx', deadLetterStrategy: 'at-most-once' }, 'work');
    h.run({ type: 'subscribe', consumerId: 'c', prefetch: 1 });
    h.publish();
    h.run({ type: 'discard', consumerId: 'c', deliveryTag: 1 });
    const deaths = h.ofType('deadLetter')[0]!.deaths;
    h.run({ type: 'cancel', consumerId: 'c' });
    h.publish({ deaths });
    h.run(start());
    expect(h.ofType('move')[0]?.deaths).toEqual(deaths);
  });
});

describe('spec 8: a failing message does not loop', () => {
  it('moveFailed puts it back at the tail; the count is not given back, so it is tried once', () => {
    const { h, ids } = withMessages(3);
    h.run(start());
    const poison = h.ofType('move')[0]!.messageId;
    expect(poison).toBe(ids[0]);
    h.run({ type: 'moveFailed', moveId: 'm1', messageIds: [poison] });
    expect(h.state.messages.get(poison)?.place).toBe('ready');
    expect(h.ofType('move')[0]?.messageId).toBe(ids[1]);
    h.run({ type: 'moveConfirmed', moveId: 'm1', messageIds: [ids[1]!] });
    expect(h.ofType('move')[0]?.messageId).toBe(ids[2]);
    h.run({ type: 'moveConfirmed', moveId: 'm1', messageIds: [ids[2]!] });
    expect(h.ofType('moveDone')).toEqual([{ type: 'moveDone', moveId: 'm1', outcome: 'count', count: 3, moved: 2, failed: 1 }]);
    expect(h.state.messages.keys()).toEqual([poison]);
    checkInvariants(h.state);
  });

  it('a failed message whose TTL ended on the way is dead-lettered as expired', () => {
    const { h, ids } = withMessages(1, { messageTtlMs: 1_000, deadLetterExchange: 'dlx' });
    h.run(start());
    h.now += 2_000;
    h.run({ type: 'moveFailed', moveId: 'm1', messageIds: [ids[0]!] });
    expect(h.ofType('deadLetter')[0]).toMatchObject({ messageId: ids[0], reason: 'expired' });
    expect(h.ofType('moveDone')[0]).toMatchObject({ moved: 0, failed: 1 });
  });
});

describe('spec 8: settling, cancelling and ending', () => {
  it('confirms are idempotent; a confirm for another move or a message not moving changes nothing', () => {
    const { h, ids } = withMessages(2);
    h.run(start());
    h.run({ type: 'moveConfirmed', moveId: 'other', messageIds: [ids[0]!] });
    h.run({ type: 'moveConfirmed', moveId: 'm1', messageIds: [ids[1]!] });
    h.run({ type: 'moveFailed', moveId: 'other', messageIds: [ids[0]!] });
    expect(h.state.messages.get(ids[0]!)?.place).toBe('moving');
    expect(h.state.messages.get(ids[1]!)?.place).toBe('ready');
    expect(moveProgress(h.state)).toMatchObject({ moved: 0, failed: 0, inFlight: 1 });
    h.run({ type: 'moveConfirmed', moveId: 'm1', messageIds: [ids[0]!] });
    h.run({ type: 'moveConfirmed', moveId: 'm1', messageIds: [ids[0]!] });
    expect(h.state.gone.moved).toBe(1);
  });

  it('a second move while one runs is FAILED_PRECONDITION; the same start again changes nothing', () => {
    const { h } = withMessages(2);
    h.run(start());
    const before = stateHash(h.state);
    expect(h.run(start({ moveId: 'm2' }))).toMatchObject({ type: 'error', code: 'FAILED_PRECONDITION' });
    expect(stateHash(h.state)).toBe(before);
    expect(h.run(start())).toEqual({ type: 'moveStarted', moveId: 'm1', count: 2 });
    expect(h.ofType('move')).toEqual([]);
  });

  it('cancel hands out nothing more; the move ends once its in-flight messages are settled', () => {
    const { h, ids } = withMessages(3);
    h.run(start());
    h.run({ type: 'moveCancel', moveId: 'm1' });
    expect(h.ofType('moveDone')).toEqual([]);
    h.run({ type: 'moveConfirmed', moveId: 'm1', messageIds: [ids[0]!] });
    expect(h.ofType('move')).toEqual([]);
    expect(h.ofType('moveDone')).toEqual([{ type: 'moveDone', moveId: 'm1', outcome: 'cancelled', count: 3, moved: 1, failed: 0 }]);
    expect(h.run(start({ moveId: 'm2' }))).toEqual({ type: 'moveStarted', moveId: 'm2', count: 2 });
  });

  it('ends as "empty" when it needs a message and none is ready (a consumer took it)', () => {
    const { h, ids } = withMessages(2);
    h.run(start());
    h.run({ type: 'subscribe', consumerId: 'c', prefetch: 0 });
    expect(h.deliveries().map((d) => d.messageId)).toEqual([ids[1]]);
    h.run({ type: 'moveConfirmed', moveId: 'm1', messageIds: [ids[0]!] });
    expect(h.ofType('moveDone')).toEqual([{ type: 'moveDone', moveId: 'm1', outcome: 'empty', count: 2, moved: 1, failed: 0 }]);
  });

  it('a move of an empty queue is done at once', () => {
    const h = new Harness();
    expect(h.run(start())).toEqual({ type: 'moveStarted', moveId: 'm1', count: 0 });
    expect(h.ofType('moveDone')).toEqual([{ type: 'moveDone', moveId: 'm1', outcome: 'count', count: 0, moved: 0, failed: 0 }]);
    expect(moveProgress(h.state)).toMatchObject({ done: true, inFlight: 0 });
  });

  it('bad move commands are INVALID_ARGUMENT and change nothing', () => {
    const { h } = withMessages(1);
    const before = stateHash(h.state);
    const bad: Command[] = [
      start({ moveId: '' }),
      start({ window: 0 }),
      start({ window: 1.5 }),
      start({ window: 100_000 }),
      start({ limit: -1 }),
      { type: 'moveConfirmed', moveId: 'm1', messageIds: [-1] },
      { type: 'moveCancel', moveId: '' },
    ];
    for (const command of bad) expect(h.run(command)).toMatchObject({ type: 'error', code: 'INVALID_ARGUMENT' });
    expect(stateHash(h.state)).toBe(before);
  });

  it('deleting the queue drops the moving messages too', () => {
    const { h } = withMessages(2);
    h.run(start());
    expect(h.run({ type: 'delete' })).toEqual({ type: 'deleted', messagesDropped: 2 });
    expect(h.state.totals.moving.count).toBe(0);
  });
});

describe('spec 8: a new leader resumes the move', () => {
  it('leaderEffects re-issues the move effects of the messages in flight, and confirms then continue', () => {
    const { h, ids } = withMessages(4);
    h.run(start({ window: 2 }));
    const issued = h.ofType('move');
    const again = leaderEffects(h.state, h.now).filter((e): e is MoveEffect => e.type === 'move');
    expect(again).toEqual(issued);
    h.run({ type: 'moveConfirmed', moveId: 'm1', messageIds: [ids[1]!] });
    expect(leaderEffects(h.state, h.now).filter((e) => e.type === 'move').map((e) => (e as MoveEffect).messageId)).toEqual([ids[0], ids[2]]);
  });

  it('a snapshot mid-move (plain and binary) restores the move and its in-flight messages exactly', () => {
    const { h, ids } = withMessages(5, { maxPriority: 2 });
    h.run(start({ window: 2, routingKey: 'k', limit: 4 }));
    h.run({ type: 'moveFailed', moveId: 'm1', messageIds: [ids[0]!] });
    for (const restored of [restore(snapshot(h.state)), decodeSnapshot(encodeSnapshot(h.state))]) {
      expect(stateHash(restored)).toBe(stateHash(h.state));
      expect(moveProgress(restored)).toEqual(moveProgress(h.state));
      expect(leaderEffects(restored, h.now)).toEqual(leaderEffects(h.state, h.now));
      checkInvariants(restored);
    }
    const twin = new Harness({ maxPriority: 2 }, 'dlq');
    twin.state = decodeSnapshot(encodeSnapshot(h.state));
    twin.index = h.index;
    const inFlight = h.state.messages.values().filter((m) => m.place === 'moving').map((m) => m.id);
    for (const run of [h, twin]) run.run({ type: 'moveConfirmed', moveId: 'm1', messageIds: inFlight });
    expect(twin.effects).toEqual(h.effects);
    expect(stateHash(twin.state)).toBe(stateHash(h.state));
  });

  it('a snapshot without a move restores with none, and has no move field', () => {
    const { h } = withMessages(1);
    expect('move' in snapshot(h.state)).toBe(false);
    expect(decodeSnapshot(encodeSnapshot(h.state)).move).toBeNull();
  });
});

describe('snapshots written before moves existed', () => {
  it('restore without the moving totals and the moved count, as zeros', () => {
    const { h } = withMessages(2);
    const plain = snapshot(h.state);
    const { moving: _moving, ...totals } = plain.totals;
    const { moved: _moved, ...gone } = plain.gone;
    const old = { ...plain, totals: totals as typeof plain.totals, gone: gone as typeof plain.gone };
    const restored = restore(old);
    expect(restored.totals.moving).toEqual({ count: 0, bytes: 0 });
    expect(restored.gone.moved).toBe(0);
    expect(restored.move).toBeNull();
    checkInvariants(restored);
  });
});
