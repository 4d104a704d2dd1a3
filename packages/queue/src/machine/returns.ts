import { isSuperseded } from './compaction.js';
import { compact, deadLetter, isExpired } from './deadletter.js';
import { requeue, type MessageHeader, type QueueState } from './state.js';
import type { Effect } from './types.js';

/**
 * Spec 3 and 4: a delivery ended without an ack. The delivery count goes up; over the
 * limit the message is dead-lettered (`delivery_limit`); expired, it is dead-lettered
 * (`expired`); otherwise it goes back to its position, or waits out its back-off. On a
 * compacting queue (spec 9) a message a newer one of its key followed is replaced instead.
 */
export function returnMessage(state: QueueState, message: MessageHeader, notBefore: number, now: number, effects: Effect[]): void {
  message.deliveryCount += 1;
  const limit = state.args.deliveryLimit;
  if (limit !== -1 && message.deliveryCount > limit) {
    deadLetter(state, message, 'delivery_limit', now, effects);
  } else if (isExpired(message, now)) {
    deadLetter(state, message, 'expired', now, effects);
  } else if (isSuperseded(state, message, now)) {
    compact(state, message, now, effects);
  } else {
    requeue(state, message, notBefore, now);
  }
}

