/**
 * Ticks only the Raft groups that need it. A quiet group (RaftNode.isQuiet: idle, with
 * nothing pending in its driver) leaves the set at its next tick and is put back by the
 * first thing that wakes it (RaftGroup calls `activate` whenever it has work), so the work
 * of a tick follows the groups that are busy, not the number of groups the node holds.
 */
export interface TickedGroup {
  tick(now: number): void;
  /** True when the group needs no more ticks until something wakes it. */
  readonly restful: boolean;
}

export class GroupTicker {
  private readonly active = new Set<TickedGroup>();

  /** Ticks the group from the next tick on (idempotent). */
  activate(group: TickedGroup): void {
    this.active.add(group);
  }

  /** Stops ticking a group for good (it was stopped or deleted). */
  remove(group: TickedGroup): void {
    this.active.delete(group);
  }

  /** Ticks every active group; those that went quiet leave the set. */
  tick(now: number): void {
    for (const group of this.active) {
      group.tick(now);
      if (group.restful) this.active.delete(group);
    }
  }

  /** The number of groups ticked now (a metric). */
  get activeCount(): number {
    return this.active.size;
  }
}
