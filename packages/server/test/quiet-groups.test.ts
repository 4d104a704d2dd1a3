/** The node's side of quiet groups: the ticker, node-level failure detection, messages held for groups not created yet. */
import type { Message } from '@quorumq/raft';
import { describe, expect, it } from 'vitest';
import { EarlyMessages } from '../src/early-messages.js';
import { GroupTicker, type TickedGroup } from '../src/group-ticker.js';
import { PeerLiveness } from '../src/peer-liveness.js';
import { queueGroupId } from '../src/local-queue.js';
import { placeMembers } from '../src/placement.js';
import { firstCandidate } from '../src/raft-group.js';

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

/** A group whose election timeout is due until it gets a tick; then it campaigns for `rounds` ticks and wins (or never, with Infinity). */
class ElectingGroup implements TickedGroup {
  restful = false;
  campaigning = false;
  won = false;
  held = 0;
  private left = 0;
  constructor(private readonly rounds: number) {}
  get campaignDue(): boolean {
    return !this.won && (!this.campaigning || this.left === 0);
  }
  tick(): void {
    if (this.won) return;
    if (!this.campaigning) {
      this.campaigning = true;
      this.left = this.rounds;
      return;
    }
    this.left -= 1;
    if (this.left <= 0 && this.rounds !== Infinity) {
      this.campaigning = false;
      this.won = true;
    }
  }
  tickHeld(): void {
    this.held += 1;
  }
}

describe('GroupTicker rations elections', () => {
  it('lets at most campaignsMax groups campaign at once; the others wait with their timers held, and all elect in turn', () => {
    const ticker = new GroupTicker({ campaignsMax: 2 });
    const groups = Array.from({ length: 7 }, () => new ElectingGroup(3));
    for (const group of groups) ticker.activate(group);
    let most = 0;
    for (let t = 0; t < 40; t++) {
      ticker.tick(t);
      most = Math.max(most, groups.filter((g) => g.campaigning).length);
    }
    expect(most).toBe(2);
    expect(groups.every((g) => g.won)).toBe(true);
    expect(groups.filter((g) => g.held > 0).length).toBeGreaterThanOrEqual(5);
    expect(ticker.campaigns).toEqual({ running: 0, waiting: 0 });
  });

  it('takes the slot from a group that cannot win once others have waited slotTicks, so they elect too', () => {
    const ticker = new GroupTicker({ campaignsMax: 1, slotTicks: 5 });
    const hopeless = new ElectingGroup(Infinity);
    const others = [new ElectingGroup(2), new ElectingGroup(2)];
    ticker.activate(hopeless);
    for (const group of others) ticker.activate(group);
    for (let t = 0; t < 40; t++) ticker.tick(t);
    expect(others.every((g) => g.won)).toBe(true);
  });

  it('gives a freed slot and a tick at once to the next group held back when an election ends', () => {
    const ticker = new GroupTicker({ campaignsMax: 1 });
    const first = new ElectingGroup(Infinity);
    const second = new ElectingGroup(Infinity);
    ticker.activate(first);
    ticker.activate(second);
    ticker.tick(0);
    expect([first.campaigning, second.campaigning]).toEqual([true, false]);
    expect(ticker.campaigns).toEqual({ running: 1, waiting: 1 });
    first.campaigning = false;
    first.won = true;
    ticker.campaignOver(first, 1);
    expect(second.campaigning).toBe(true);
    expect(ticker.campaigns).toEqual({ running: 1, waiting: 0 });
    // A group that held no slot frees nothing.
    ticker.campaignOver(new ElectingGroup(1), 2);
    expect(ticker.campaigns.running).toBe(1);
  });

  it('never holds back a group that does not ask (no campaignDue): leaders and followers tick as before', () => {
    const ticker = new GroupTicker({ campaignsMax: 1 });
    const plain = new FakeGroup();
    const electing = [new ElectingGroup(Infinity), new ElectingGroup(Infinity)];
    for (const group of [...electing, plain]) ticker.activate(group);
    for (let t = 0; t < 10; t++) ticker.tick(t);
    expect(plain.ticks).toBe(10);
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

  it('says a peer is back when its first batch after a gap of a quarter election timeout arrives, not for regular beats', () => {
    const liveness = new PeerLiveness(['n2'], 500, 0);
    for (let now = 50; now <= 300; now += 50) expect(liveness.heard('n2', now)).toBe(false);
    // 200 ms without a beat (125 ms is a quarter of the timeout): out of reach, then back.
    expect(liveness.heard('n2', 500)).toBe(true);
    expect(liveness.heard('n2', 550)).toBe(false);
    expect(liveness.heard('unknown', 2_000)).toBe(false);
  });

  it('does not count a stall of this node (a late check) against its peers: their beats wait unread', () => {
    const liveness = new PeerLiveness(['n2', 'n3'], 500, 0);
    expect(liveness.check(50)).toEqual([]);
    expect(liveness.check(3_050)).toEqual([]);
    // Read right after the stall: a batch of n2's that waited in the socket.
    liveness.heard('n2', 3_060);
    const found: string[] = [];
    let now = 3_050;
    while (found.length === 0) {
      now += 50;
      found.push(...liveness.check(now));
      expect(now).toBeLessThanOrEqual(3_500);
    }
    // n3 is found after an election timeout of running time in all (50 ms before, 125 ms of the stall, the rest after).
    expect(found).toEqual(['n3']);
    expect(now).toBe(3_400);
    expect(liveness.isSilent('n2')).toBe(false);
  });

  it('finds a dead peer even when every check comes late', () => {
    const liveness = new PeerLiveness(['n2'], 500, 0);
    let found: string[] = [];
    let now = 0;
    while (found.length === 0) {
      now += 200;
      found = liveness.check(now);
      expect(now).toBeLessThanOrEqual(1_000);
    }
    expect(found).toEqual(['n2']);
    expect(now).toBe(800);
  });

  it('confirms a peer silent at a member\'s vote request once nothing came from it for an election timeout, stalls included', () => {
    const liveness = new PeerLiveness(['n2', 'n3'], 500, 0);
    liveness.heard('n2', 100);
    liveness.heard('n3', 100);
    // A stall: the check does not count it, so neither peer is found silent by it.
    expect(liveness.check(700)).toEqual([]);
    expect(liveness.confirmSilent('n2', 599)).toBe(false);
    expect(liveness.isSilent('n2')).toBe(false);
    expect(liveness.confirmSilent('n2', 600)).toBe(true);
    expect(liveness.isSilent('n2')).toBe(true);
    expect(liveness.confirmSilent('n2', 700)).toBe(false); // reported once
    expect(liveness.check(750)).toEqual([]);
    expect(liveness.confirmSilent('nobody', 10_000)).toBe(false);
    liveness.heard('n2', 800);
    expect(liveness.isSilent('n2')).toBe(false);
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

describe('firstCandidate', () => {
  const names = Array.from({ length: 3_000 }, (_, i) => `orders-${i}`);

  it('picks the same live voter whatever order the voters are listed in, never a silent one', () => {
    const silent = (id: string): boolean => id === 'n3';
    for (const name of names.slice(0, 200)) {
      const picked = firstCandidate(name, 7, ['n1', 'n2', 'n3'], silent);
      expect(picked).toBe(firstCandidate(name, 7, ['n3', 'n2', 'n1'], silent));
      expect(['n1', 'n2']).toContain(picked);
    }
    expect(firstCandidate('q', 1, ['n1', 'n2', 'n3'], () => true)).toBe(null);
  });

  it('picks another member now and then as the group\'s term moves on', () => {
    const picks = new Set<string | null>();
    for (let term = 1; term <= 20; term++) picks.add(firstCandidate('q/2/orders', term, ['n1', 'n2', 'n3'], (id) => id === 'n3'));
    expect([...picks].sort()).toEqual(['n1', 'n2']);
  });

  it('spreads the groups of a dead node evenly over the survivors, with queues placed as the metadata places them', () => {
    for (const dead of ['n1', 'n2', 'n3']) {
      const counts = new Map<string | null, number>();
      let led = 0;
      for (let i = 0; i < 6_000; i++) {
        const name = `q-${String(i).padStart(6, '0')}`;
        const members = placeMembers(['n1', 'n2', 'n3'], i, name, 3);
        if (members[0] !== dead) continue;
        led += 1;
        const picked = firstCandidate(queueGroupId({ createdIndex: i + 2, name }), 1, members, (id) => id === dead);
        counts.set(picked, (counts.get(picked) ?? 0) + 1);
      }
      expect(counts.has(dead)).toBe(false);
      expect(counts.size).toBe(2);
      for (const count of counts.values()) expect(Math.abs(count - led / 2)).toBeLessThan(led * 0.05);
    }
  });
});
