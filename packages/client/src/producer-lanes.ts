import { randomUUID } from 'node:crypto';

/** A producer id and the next sequence for it; used by one unary publish at a time. */
export interface ProducerLane {
  readonly producerId: string;
  nextSequence: number;
}

/**
 * The producer ids of a client's unary publishes without a `producerId` (publisher dedup
 * by default, as Kafka's idempotent producer): a retry after a broken call re-sends the same
 * producer id and sequence, and the broker answers DUPLICATE instead of storing it twice.
 *
 * A queue tells a producer's sequences apart only within a window below the highest one
 * stored (1024, `DEDUP_REORDER_WINDOW`); an older sequence is refused. Concurrent unary
 * calls are not bounded and may reach a queue in any order (they can go to different nodes),
 * so one producer id for all of them could have a late publish fall below the window. Each
 * publish therefore takes a lane no other publish in flight holds, and gives it back when it
 * has its final answer: a lane's sequences are used one after the other. A client needs as many lanes as it has unary publishes in flight at once, and a
 * queue remembers at most that many producers of this client (for its dedup window).
 * An attempt of a call that already failed (e.g. DEADLINE_EXCEEDED: outcome unknown) may
 * still reach the broker late, and be stored once, as with any call whose answer was lost;
 * its sequence is its own, so it never makes a newer publish of the lane a DUPLICATE.
 */
export class ProducerLanes {
  private readonly prefix = `sdk-${randomUUID()}`;
  private readonly idle: ProducerLane[] = [];
  private created = 0;

  /** A lane no publish in flight holds. */
  acquire(): ProducerLane {
    const lane = this.idle.pop();
    if (lane !== undefined) return lane;
    this.created += 1;
    return { producerId: `${this.prefix}-${this.created}`, nextSequence: 1 };
  }

  /** Gives a lane back once its publish has its final answer (or failed for good). */
  release(lane: ProducerLane): void {
    this.idle.push(lane);
  }
}
