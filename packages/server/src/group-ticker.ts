/**
 * Ticks only the Raft groups that need it. A quiet group (RaftNode.isQuiet: idle, with
 * nothing pending in its driver) leaves the set at its next tick and is put back by the
 * first thing that wakes it (RaftGroup calls `activate` whenever it has work), so the work
 * of a tick follows the groups that are busy, not the number of groups the node holds.
 *
 * It also rations elections. When thousands of groups need a leader at once (every group
 * of a node that restarted with the whole cluster, every group a dead node led), letting
 * them all campaign together overloads the nodes: the vote requests and answers queue up
 * for longer than an election timeout, every candidate times out before its answers arrive
 * and starts over, and no group ever elects (measured: a full restart of a 10,000-queue
 * cluster had no leader at all after 150 s, 10,000 pre-votes a second per node). So at most
 * `campaignsMax` groups of this node campaign at a time: a group whose election timeout runs
 * out (`campaignDue`) gets a slot or is held back, its timer stopped at the brink, until a
 * slot frees: when an election ends, the next group held back gets the slot and its tick
 * at once, which starts its election. A group keeps its slot while it
 * campaigns, and loses it after `slotTicks` if others wait (a group that cannot win, its
 * majority down, must not keep the slot for good). Safety does not depend on when anyone
 * campaigns; this is liveness, and the simulator runs it with a single slot.
 */
export interface TickedGroup {
  tick(now: number): void;
  /** True when the group needs no more ticks until something wakes it. */
  readonly restful: boolean;
  /** The next tick would start an election (RaftNode.campaignDue). */
  readonly campaignDue?: boolean;
  /** It campaigns now (RaftNode.campaigning); it calls `campaignOver` when it stops. */
  readonly campaigning?: boolean;
  /** A tick for a group held back from campaigning: its Raft timer does not move, its deadlines still expire. */
  tickHeld?(now: number): void;
}

export interface GroupTickerOptions {
  /** Groups of this node campaigning at once, at most (default 128). */
  readonly campaignsMax?: number;
  /** Ticks a group keeps its campaign slot while others wait (default 30: three default election timeouts). */
  readonly slotTicks?: number;
}

export class GroupTicker {
  private readonly active = new Set<TickedGroup>();
  /** Campaigning groups and the tick each got its slot. */
  private readonly slots = new Map<TickedGroup, number>();
  private readonly campaignsMax: number;
  private readonly slotTicks: number;
  private ticks = 0;
  /** Groups held back at the last tick, in order; those before `nextHeld` got a slot since. */
  private held: TickedGroup[] = [];
  private nextHeld = 0;

  constructor(options: GroupTickerOptions = {}) {
    this.campaignsMax = Math.max(1, options.campaignsMax ?? 128);
    this.slotTicks = Math.max(1, options.slotTicks ?? 30);
  }

  /** Ticks the group from the next tick on (idempotent). */
  activate(group: TickedGroup): void {
    this.active.add(group);
  }

  /** Stops ticking a group for good (it was stopped or deleted). */
  remove(group: TickedGroup): void {
    this.active.delete(group);
    this.slots.delete(group);
  }

  /** Ticks every active group; those that went quiet leave the set. */
  tick(now: number): void {
    this.ticks += 1;
    for (const [group, since] of this.slots) {
      const expired = this.held.length > this.nextHeld && this.ticks - since > this.slotTicks;
      if (expired || group.campaigning !== true || !this.active.has(group)) this.slots.delete(group);
    }
    const held: TickedGroup[] = [];
    for (const group of this.active) {
      if (group.campaignDue === true && !this.slots.has(group)) {
        if (this.slots.size >= this.campaignsMax) {
          held.push(group);
          group.tickHeld?.(now);
          continue;
        }
        this.slots.set(group, this.ticks);
      }
      group.tick(now);
      if (group.restful) {
        this.active.delete(group);
        this.slots.delete(group);
      }
    }
    this.held = held;
    this.nextHeld = 0;
  }

  /**
   * A group stopped campaigning (it leads, or follows the member that won): its slot goes
   * at once to the next group held back at the last tick, whose held tick is given now, so
   * that elections follow one another without waiting for the next tick.
   */
  campaignOver(group: TickedGroup, now: number): void {
    if (!this.slots.delete(group)) return;
    while (this.nextHeld < this.held.length && this.slots.size < this.campaignsMax) {
      const next = this.held[this.nextHeld++]!;
      if (!this.active.has(next) || next.campaignDue !== true || this.slots.has(next)) continue;
      this.slots.set(next, this.ticks);
      next.tick(now);
    }
  }

  /** The number of groups ticked now (a metric). */
  get activeCount(): number {
    return this.active.size;
  }

  /** The number of groups campaigning with a slot now, and held back at the last tick. */
  get campaigns(): { readonly running: number; readonly waiting: number } {
    return { running: this.slots.size, waiting: this.held.length - this.nextHeld };
  }
}
