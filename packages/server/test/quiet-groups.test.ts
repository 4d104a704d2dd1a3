/** The node's side of quiet groups: the ticker, node-level failure detection, messages held for groups not created yet. */
import type { Message } from '@quorumq/raft';
import { describe, expect, it } from 'vitest';
import { EarlyMessages } from '../src/early-messages.js';
import { GroupTicker, type TickedGroup } from '../src/group-ticker.js';
import { PeerLiveness } from '../src/peer-liveness.js';

class FakeGroup implements TickedGroup {
  ticks = 0;
  restful = false;
  tick(): void {
    this.ticks += 1;
  }
}

describe('GroupTicker', () => {
  it('ticks active groups only; a restful one leaves at its next tick and comes back when activated', () => {
    const ticker = new GroupTicker();
    const busy = new FakeGroup();
    const idle = new FakeGroup();
    ticker.activate(busy);
    ticker.activate(idle);
    idle.restful = true;
    ticker.tick(0);
    ticker.tick(1);
    ticker.tick(2);
    expect(busy.ticks).toBe(3);
    expect(idle.ticks).toBe(1);
    expect(ticker.activeCount).toBe(1);
    idle.restful = false;
    ticker.activate(idle);
    ticker.activate(idle);
    ticker.tick(3);
    expect(idle.ticks).toBe(2);
    ticker.remove(busy);
    ticker.tick(4);
    expect(busy.ticks).toBe(4);
  });

  it('ticks 10,000 quiet groups no more than once each', () => {
    const ticker = new GroupTicker();
    const groups = Array.from({ length: 10_000 }, () => new FakeGroup());
    for (const group of groups) {
      group.restful = true;
      ticker.activate(group);
    }
    for (let t = 0; t < 100; t++) ticker.tick(t);
    expect(groups.reduce((sum, g) => sum + g.ticks, 0)).toBe(10_000);
    expect(ticker.activeCount).toBe(0);
  });
});

describe('PeerLiveness', () => {
  it('reports a peer silent once, after an election timeout without a batch, and forgets it when heard again', () => {
    const liveness = new PeerLiveness(['n2', 'n3'], 500, 0);
    for (let now = 50; now < 500; now += 50) {
      liveness.heard('n2', now);
      liveness.heard('n3', now);
      expect(liveness.check(now)).toEqual([]);
    }
    // n3 stops.
    let reported: string[] = [];
    for (let now = 500; now <= 1_100; now += 50) {
      liveness.heard('n2', now);
      reported = reported.concat(liveness.check(now));
    }
    expect(reported).toEqual(['n3']);
    expect(liveness.isSilent('n3')).toBe(true);
    liveness.heard('n3', 1_150);
    expect(liveness.isSilent('n3')).toBe(false);
    expect(liveness.check(1_150)).toEqual([]);
  });

  it('after a stall of this node (a late check) reports nobody: its peers\' beats wait unread', () => {
    const liveness = new PeerLiveness(['n2', 'n3'], 500, 0);
    expect(liveness.check(50)).toEqual([]);
    expect(liveness.check(3_050)).toEqual([]);
    expect(liveness.check(3_100)).toEqual([]);
    // Still silent an election timeout after the stall: now they are.
    const later: string[] = [];
    for (let now = 3_150; now <= 3_700; now += 50) later.push(...liveness.check(now));
    expect(later.sort()).toEqual(['n2', 'n3']);
  });

  it('ignores batches from nodes that are not peers', () => {
    const liveness = new PeerLiveness(['n2'], 500, 0);
    liveness.heard('intruder', 10);
    expect(liveness.isSilent('intruder')).toBe(false);
    for (let now = 50; now <= 600; now += 50) liveness.check(now);
    expect(liveness.isSilent('n2')).toBe(true);
  });
});

describe('EarlyMessages', () => {
  const vote = (groupId: string, term: number): { groupId: string; message: Message } => ({
    groupId,
    message: { type: 'vote', from: 'n2', to: 'n1', term, lastLogIndex: 0, lastLogTerm: 0, leaderTransfer: false },
  });

  it('holds messages for a group until it is created, in order, then not again', () => {
    const early = new EarlyMessages(1_000);
    expect(early.hold(vote('q/7/a', 1), 0)).toBe(true);
    expect(early.hold(vote('q/7/a', 2), 1)).toBe(true);
    expect(early.hold(vote('q/8/b', 1), 2)).toBe(true);
    expect(early.take('q/7/a').map((e) => e.message.term)).toEqual([1, 2]);
    expect(early.take('q/7/a')).toEqual([]);
    expect(early.take('q/8/b')).toHaveLength(1);
  });

  it('drops what it held longer than its hold time, and holds at most 10,000 messages', () => {
    const early = new EarlyMessages(1_000);
    early.hold(vote('q/1/old', 1), 0);
    early.hold(vote('q/2/young', 1), 900);
    early.expire(1_100);
    expect(early.take('q/1/old')).toEqual([]);
    expect(early.take('q/2/young')).toHaveLength(1);
    let held = 0;
    for (let i = 0; i < 10_050; i++) if (early.hold(vote(`q/${i}/x`, 1), 2_000)) held += 1;
    expect(held).toBe(10_000);
  });
});
