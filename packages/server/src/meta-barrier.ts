/**
 * A read barrier on the metadata: catches up with every metadata change committed before
 * the call. Callers share barriers: while one is in flight, later callers wait for the next
 * one, started once it finished (a barrier started before a caller arrived would not cover
 * changes committed in between). Unroutable publishes and dead-letters at any rate thus cost
 * at most one barrier per round trip of the metadata group, not one each.
 */
export class MetaBarrier {
  private inFlight: Promise<void> | null = null;
  private next: Promise<void> | null = null;

  /** @param catchUp one barrier: resolves once this node applied what was committed before it began */
  constructor(private readonly catchUp: () => Promise<void>) {}

  wait(): Promise<void> {
    if (this.inFlight === null) return this.start();
    if (this.next === null) {
      this.next = this.inFlight.then(
        () => this.start(),
        () => this.start(),
      );
      this.next.catch(() => undefined);
    }
    return this.next;
  }

  private start(): Promise<void> {
    this.next = null;
    const barrier = this.catchUp();
    this.inFlight = barrier;
    const done = (): void => {
      if (this.inFlight === barrier) this.inFlight = null;
    };
    barrier.then(done, done);
    return barrier;
  }
}
