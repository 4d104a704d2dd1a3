/** Publisher dedup (spec 2): the highest stored sequence per producer, within a window. */
import type { QueueState } from './state.js';

/** Spec 2: producers idle longer than the dedup window are forgotten (oldest first). */
export function forgetIdleProducers(state: QueueState, now: number): void {
  for (const [producerId, producer] of state.producers) {
    if (producer.lastSeenAt + state.args.dedupWindowMs >= now) return;
    state.producers.delete(producerId);
  }
}

