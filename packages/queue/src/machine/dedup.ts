/**
 * Publisher dedup (spec 2): per producer, the highest stored sequence and a bitmap of which
 * of the `DEDUP_REORDER_WINDOW` sequences up to it were stored.
 *
 * Why a bitmap: a producer's messages can reach a queue's leader out of order (a node retries
 * a forwarded publish after a leader change, and a later one lands first). With only the
 * highest sequence, the late one would be answered DUPLICATE although it was never stored,
 * and a client that counts DUPLICATE as confirmed would lose it. So within the window a
 * sequence is a duplicate only if its bit is set; this holds from a producer's first message
 * on (a new producer's earlier sequences are simply unseen) and across jumps (sparse
 * sequences are allowed: the bitmap shifts).
 *
 * Below the window the queue cannot tell, and says so (`'unknown'`, refused with
 * SEQUENCE_TOO_OLD) rather than answer DUPLICATE: a message held up long enough (on a node
 * that lost its leadership while the producer's later messages went on through the new
 * leader) arrives that far behind, was never stored, and a DUPLICATE would have confirmed it
 * (a 10M-message run lost 52 that way). The SDK keeps a producer's sequences in flight within
 * the window of its oldest unconfirmed one, so it never meets the refusal.
 */
import type { QueueState } from './state.js';

/** How far out of order a producer's messages may arrive and still be told apart. */
export const DEDUP_REORDER_WINDOW = 1024;
const WORDS = DEDUP_REORDER_WINDOW / 32;

export interface ProducerRecord {
  readonly sequence: number;
  readonly lastSeenAt: number;
  /**
   * Bit d (word d >> 5, bit d & 31) set when `sequence - d` was stored; `WORDS` unsigned
   * 32-bit words.
   */
  readonly seen: readonly number[];
}

/** Spec 2: producers idle longer than the dedup window are forgotten (oldest first). */
export function forgetIdleProducers(state: QueueState, now: number): void {
  for (const [producerId, producer] of state.producers) {
    if (producer.lastSeenAt + state.args.dedupWindowMs >= now) return;
    state.producers.delete(producerId);
  }
}

function bitSet(seen: readonly number[], offset: number): boolean {
  return (((seen[offset >> 5] ?? 0) >>> (offset & 31)) & 1) === 1;
}

/** Whether a producer's `sequence` is new, was stored, or is too far below the window to tell. */
export type SequenceStatus = 'new' | 'stored' | 'unknown';

export function sequenceStatus(record: ProducerRecord | undefined, sequence: number): SequenceStatus {
  if (record === undefined || sequence > record.sequence) return 'new';
  const offset = record.sequence - sequence;
  if (offset >= DEDUP_REORDER_WINDOW) return 'unknown';
  return bitSet(record.seen, offset) ? 'stored' : 'new';
}

/** The bitmap moved `shift` offsets up (toward older), bits past the window dropped. */
function shifted(seen: readonly number[], shift: number): number[] {
  const out = new Array<number>(WORDS).fill(0);
  if (shift >= DEDUP_REORDER_WINDOW) return out;
  const words = shift >> 5;
  const bits = shift & 31;
  for (let w = WORDS - 1; w >= words; w -= 1) {
    const low = seen[w - words] ?? 0;
    const below = w - words - 1 >= 0 ? (seen[w - words - 1] ?? 0) : 0;
    out[w] = bits === 0 ? low >>> 0 : ((low << bits) | (below >>> (32 - bits))) >>> 0;
  }
  return out;
}

/** The record after storing `sequence` (which `sequenceStatus` said is new). */
export function rememberSequence(record: ProducerRecord | undefined, sequence: number, now: number): ProducerRecord {
  let highest: number;
  let seen: number[];
  if (record === undefined) {
    highest = sequence;
    seen = new Array<number>(WORDS).fill(0);
  } else if (sequence > record.sequence) {
    highest = sequence;
    seen = shifted(record.seen, sequence - record.sequence);
  } else {
    highest = record.sequence;
    seen = [...record.seen];
  }
  const offset = highest - sequence;
  if (offset < DEDUP_REORDER_WINDOW) seen[offset >> 5] = ((seen[offset >> 5] ?? 0) | (1 << (offset & 31))) >>> 0;
  return { sequence: highest, lastSeenAt: now, seen };
}
