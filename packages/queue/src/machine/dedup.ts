/**
 * Publisher dedup (spec 2): per producer, the highest stored sequence, plus the sequences
 * below it that were skipped and not stored yet ("gaps"), within a reorder window.
 *
 * Why gaps: a producer's messages can reach a queue's leader out of order (a publish
 * retried by a node after a leader change can land after a later one). With only the
 * highest sequence, the late one would be answered DUPLICATE although it was never stored,
 * and a client that counts DUPLICATE as confirmed would lose it. So a sequence below the
 * highest is a duplicate only if it is not a recorded gap. A jump larger than the window
 * records no gaps (sparse sequences are allowed); gaps more than a window below the highest
 * are dropped, so the record per producer stays bounded.
 */
import type { QueueState } from './state.js';

/** How far out of order a producer's messages may arrive and still be told apart. */
export const DEDUP_REORDER_WINDOW = 1024;

export interface ProducerRecord {
  readonly sequence: number;
  readonly lastSeenAt: number;
  /** Ascending sequences below `sequence`, skipped and not stored; omitted when none. */
  readonly gaps?: readonly number[];
}

/** Spec 2: producers idle longer than the dedup window are forgotten (oldest first). */
export function forgetIdleProducers(state: QueueState, now: number): void {
  for (const [producerId, producer] of state.producers) {
    if (producer.lastSeenAt + state.args.dedupWindowMs >= now) return;
    state.producers.delete(producerId);
  }
}

export function isDuplicateSequence(record: ProducerRecord | undefined, sequence: number): boolean {
  if (record === undefined || sequence > record.sequence) return false;
  return !(record.gaps?.includes(sequence) ?? false);
}

/** The record after storing `sequence` (which `isDuplicateSequence` said is new). */
export function rememberSequence(record: ProducerRecord | undefined, sequence: number, now: number): ProducerRecord {
  if (record === undefined) return { sequence, lastSeenAt: now };
  let gaps: readonly number[] = record.gaps ?? [];
  let highest = record.sequence;
  if (sequence > highest) {
    const jump = sequence - highest;
    if (jump > 1 && jump <= DEDUP_REORDER_WINDOW) {
      const grown = [...gaps];
      for (let s = highest + 1; s < sequence; s++) grown.push(s);
      gaps = grown;
    }
    highest = sequence;
  } else {
    gaps = gaps.filter((s) => s !== sequence);
  }
  const floor = highest - DEDUP_REORDER_WINDOW;
  if (gaps.length > 0 && (gaps[0] ?? 0) <= floor) gaps = gaps.filter((s) => s > floor);
  return gaps.length === 0 ? { sequence: highest, lastSeenAt: now } : { sequence: highest, lastSeenAt: now, gaps };
}
