/**
 * What the workload did, as the checker needs it: every value a publisher tried (and whether
 * its publish was confirmed), every delivery consumers received and every value they acked.
 */
export interface Attempt {
  readonly value: string;
  /** The queue the value was published to. */
  readonly queue: string;
  /** Published by a publisher with a producer id (broker-side dedup on). */
  readonly producerId: boolean;
  confirmed: boolean;
  confirmedAt: number | null;
  /** Publish calls for this value (a publisher without a producer id retries a failed one). */
  tries: number;
  failures: number;
  /** Outcomes and errors of the tries, in order (for reports). */
  readonly outcomes: string[];
}

export interface Consumption {
  /** Acks, per queue the value was acked from. */
  readonly acked: Map<string, number>;
  /** Deliveries with delivery count 0 from the queue the value was published to. */
  freshDeliveries: number;
  deliveries: number;
  /** What happened to the value, for reports: d(elivered)/a(cked)/r(ejected)/n(acked)/h(eld) with queue, count and time. */
  readonly trace: string[];
}

export class History {
  readonly attempts = new Map<string, Attempt>();
  readonly consumed = new Map<string, Consumption>();
  /** Bodies consumers received that are not values of this run's format. */
  readonly foreign: string[] = [];
  /** Times (ms since epoch) of every confirm, in order. */
  readonly confirmTimes: number[] = [];

  readonly createdAt = Date.now();

  constructor(readonly tag: string) {}

  attempt(value: string, queue: string, producerId: boolean): Attempt {
    let attempt = this.attempts.get(value);
    if (attempt === undefined) {
      attempt = { value, queue, producerId, confirmed: false, confirmedAt: null, tries: 0, failures: 0, outcomes: [] };
      this.attempts.set(value, attempt);
    }
    attempt.tries += 1;
    return attempt;
  }

  confirm(attempt: Attempt, now = Date.now()): void {
    if (!attempt.confirmed) {
      attempt.confirmed = true;
      attempt.confirmedAt = now;
    }
    this.confirmTimes.push(now);
  }

  private consumption(value: string): Consumption {
    let c = this.consumed.get(value);
    if (c === undefined) {
      c = { acked: new Map(), freshDeliveries: 0, deliveries: 0, trace: [] };
      this.consumed.set(value, c);
    }
    return c;
  }

  /** A consumer received `body` from `queue`. Returns the value, or null for a foreign body. */
  delivered(queue: string, body: string, deliveryCount: number, deadLettered: boolean): string | null {
    if (!body.startsWith(`${this.tag}/`)) {
      if (this.foreign.length < 1000) this.foreign.push(body);
      return null;
    }
    const c = this.consumption(body);
    c.deliveries += 1;
    this.note(c, `d ${queue} #${deliveryCount}${deadLettered ? ' dead' : ''}`);
    if (deliveryCount === 0 && !deadLettered && this.attempts.get(body)?.queue === queue) c.freshDeliveries += 1;
    return body;
  }

  /** A consumer acked `value` from `queue`: it is consumed. */
  acked(queue: string, value: string): void {
    const c = this.consumption(value);
    c.acked.set(queue, (c.acked.get(queue) ?? 0) + 1);
    this.note(c, `a ${queue}`);
  }

  /** A consumer settled `value` without an ack: r(ejected), n(acked), h(eld by a crashing consumer). */
  settled(queue: string, value: string, how: 'r' | 'n' | 'h'): void {
    this.note(this.consumption(value), `${how} ${queue}`);
  }

  private note(c: Consumption, event: string): void {
    if (c.trace.length < 30) c.trace.push(`${event} @${Date.now() - this.createdAt}`);
  }
}
