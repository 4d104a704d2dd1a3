/**
 * IdleMemory: the node's periodic check asks every replica whether it was idle, lets idle
 * groups snapshot, and releases the heap only once the whole node is idle and settled,
 * after work, a bounded number of times per idle stretch.
 */
import { describe, expect, it } from 'vitest';

import { IDLE_RELEASES, IdleMemory } from '../src/idle-memory.js';
import type { LocalQueue } from '../src/local-queue.js';

/** A stand-in for a LocalQueue: what IdleMemory reads of its replica and group. */
interface FakeQueue {
  busy: boolean;
  snapshotting: boolean;
  membersApplied: boolean;
  /** What each idle check was told about the log (logMayGo). */
  readonly asked: boolean[];
  snapshotRequests: number;
  /** What the replica's idleSnapshotPending answers. */
  wantsSnapshot: boolean;
}

function fakeQueue(): FakeQueue & Pick<LocalQueue, never> {
  const queue = { busy: false, snapshotting: false, membersApplied: true, asked: [] as boolean[], snapshotRequests: 0, wantsSnapshot: false };
  return Object.assign(queue, {
    replica: {
      idleCheck: (logMayGo: () => boolean): boolean => {
        if (queue.busy) return false;
        queue.asked.push(logMayGo());
        return true;
      },
      get idleSnapshotPending(): boolean {
        return queue.wantsSnapshot;
      },
    },
    group: {
      membersHaveApplied: (): boolean => queue.membersApplied,
      snapshotIfDue: (): void => {
        queue.snapshotRequests += 1;
      },
      get snapshotInProgress(): boolean {
        return queue.snapshotting;
      },
    },
  });
}

function setup(queues: FakeQueue[]): { memory: IdleMemory; releases: () => number } {
  let released = 0;
  const memory = new IdleMemory(() => queues as unknown as LocalQueue[], { release: () => void (released += 1) });
  return { memory, releases: () => released };
}

describe('IdleMemory', () => {
  it('releases nothing before the node did any work', () => {
    const fake = fakeQueue();
    const { memory, releases } = setup([fake]);
    for (let i = 0; i < 5; i++) expect(memory.check()).toBe(false);
    expect(releases()).toBe(0);
    // Idle replicas are still told.
    expect(fake.asked.length).toBe(5);
  });

  it('asks the group to snapshot only for a replica that wants one', () => {
    const fake = fakeQueue();
    const { memory } = setup([fake]);
    memory.check();
    expect(fake.snapshotRequests).toBe(0);
    fake.wantsSnapshot = true;
    memory.check();
    expect(fake.snapshotRequests).toBe(1);
  });

  it('after work, releases at the next idle checks, a bounded number of times, then again only after more work', () => {
    const fake = fakeQueue();
    const other = fakeQueue();
    const { memory, releases } = setup([fake, other]);
    fake.busy = true;
    expect(memory.check()).toBe(false);
    fake.busy = false;
    other.busy = true; // one busy replica keeps the node busy
    expect(memory.check()).toBe(false);
    other.busy = false;
    for (let i = 0; i < IDLE_RELEASES; i++) expect(memory.check()).toBe(true);
    expect(memory.check()).toBe(false);
    expect(releases()).toBe(IDLE_RELEASES);
    fake.busy = true;
    memory.check();
    fake.busy = false;
    expect(memory.check()).toBe(true);
    expect(releases()).toBe(IDLE_RELEASES + 1);
  });

  it('waits while an idle group is still taking its snapshot', () => {
    const fake = fakeQueue();
    const { memory, releases } = setup([fake]);
    fake.busy = true;
    memory.check();
    fake.busy = false;
    fake.snapshotting = true;
    expect(memory.check()).toBe(false);
    expect(memory.check()).toBe(false);
    fake.snapshotting = false;
    expect(memory.check()).toBe(true);
    expect(releases()).toBe(1);
  });

  it("passes the group's answer on whether its log may go", () => {
    const fake = fakeQueue();
    const { memory } = setup([fake]);
    fake.membersApplied = false;
    memory.check();
    fake.membersApplied = true;
    memory.check();
    expect(fake.asked).toEqual([false, true]);
  });
});
