/**
 * The total-queue checker: after the cluster healed and every queue was drained,
 * - lost: confirmed values never acked from any queue (the DLQ included) — must be 0;
 * - unexpected: acked values nobody published (or foreign bodies) — must be 0;
 * - duplicated: values acked more than once (at-least-once delivery: reported, not failed);
 * - recovered: values never confirmed that were consumed anyway (reported);
 * - dedupViolations: producer-id values enqueued twice in their queue (two deliveries with
 *   delivery count 0) — must be 0 with producer dedup on.
 */
import type { History } from './history.js';

export interface CheckResult {
  readonly attempted: number;
  readonly confirmed: number;
  readonly unconfirmed: number;
  readonly consumed: number;
  readonly deadLettered: number;
  readonly lost: number;
  readonly unexpected: number;
  readonly duplicated: number;
  readonly duplicateDeliveries: number;
  readonly recovered: number;
  readonly dedupViolations: number;
  /**
   * Publishes answered DUPLICATE the first time they were sent (no re-send, a sequence never
   * used before): the broker says it already holds them. They count as confirmed; `lostDuplicates`
   * of them were never consumed.
   */
  readonly firstSendDuplicates: number;
  readonly lostDuplicates: number;
  readonly ok: boolean;
  /** Up to 50 examples of each anomaly. */
  readonly examples: {
    readonly lost: string[];
    readonly unexpected: string[];
    readonly duplicated: string[];
    readonly dedupViolations: string[];
  };
  /** The first 50 lost values with their publish and delivery history. */
  readonly lostDetail: { value: string; queue: string; confirmedAtMs: number | null; tries: number; failures: number; outcomes: string[]; trace: string[] }[];
}

export function check(history: History, deadLetterQueues: ReadonlySet<string>): CheckResult {
  const lost: string[] = [];
  const unexpected: string[] = [...history.foreign];
  const duplicated: string[] = [];
  const dedupViolations: string[] = [];
  let confirmed = 0;
  let recovered = 0;
  let consumed = 0;
  let deadLettered = 0;
  let duplicateDeliveries = 0;
  let firstSendDuplicates = 0;
  let lostDuplicates = 0;

  for (const attempt of history.attempts.values()) {
    const c = history.consumed.get(attempt.value);
    const acks = c === undefined ? 0 : [...c.acked.values()].reduce((a, b) => a + b, 0);
    const firstDuplicate = attempt.outcomes[0]?.startsWith('duplicate') ?? false;
    if (firstDuplicate) firstSendDuplicates += 1;
    if (attempt.confirmed) {
      confirmed += 1;
      if (acks === 0) lost.push(attempt.value);
      if (acks === 0 && firstDuplicate) lostDuplicates += 1;
    } else if (acks > 0) {
      recovered += 1;
    }
  }
  for (const [value, c] of history.consumed) {
    const acks = [...c.acked.values()].reduce((a, b) => a + b, 0);
    if (acks === 0) continue;
    consumed += 1;
    if ([...c.acked.keys()].some((q) => deadLetterQueues.has(q))) deadLettered += 1;
    const attempt = history.attempts.get(value);
    if (attempt === undefined) {
      unexpected.push(value);
      continue;
    }
    if (acks > 1) {
      duplicated.push(value);
      duplicateDeliveries += acks - 1;
    }
    if (attempt.producerId && c.freshDeliveries > 1) dedupViolations.push(value);
  }
  const sample = (list: string[]): string[] => list.slice(0, 50);
  return {
    attempted: history.attempts.size,
    confirmed,
    unconfirmed: history.attempts.size - confirmed,
    consumed,
    deadLettered,
    lost: lost.length,
    unexpected: unexpected.length,
    duplicated: duplicated.length,
    duplicateDeliveries,
    recovered,
    dedupViolations: dedupViolations.length,
    firstSendDuplicates,
    lostDuplicates,
    ok: lost.length === 0 && unexpected.length === 0 && dedupViolations.length === 0,
    lostDetail: lost.slice(0, 50).map((value) => {
      const a = history.attempts.get(value);
      return {
        value,
        queue: a?.queue ?? '',
        confirmedAtMs: a?.confirmedAt != null ? a.confirmedAt - history.createdAt : null,
        tries: a?.tries ?? 0,
        failures: a?.failures ?? 0,
        outcomes: a?.outcomes ?? [],
        trace: history.consumed.get(value)?.trace ?? [],
      };
    }),
    examples: { lost: sample(lost), unexpected: sample(unexpected), duplicated: sample(duplicated), dedupViolations: sample(dedupViolations) },
  };
}
