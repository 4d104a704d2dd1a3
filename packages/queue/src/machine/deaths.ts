/**
 * Death records (spec 5): one record per (queue, reason), newest first, folded with a
 * count; `first` is set once and never changes, `last` follows every dead-lettering.
 */
/** `compacted` (spec 9): replaced by a newer message of its key, on a queue with `compaction_dead_letter`. */
export type DeadLetterReason = 'rejected' | 'expired' | 'maxlen' | 'delivery_limit' | 'compacted';

export interface DeathRecord {
  readonly queue: string;
  readonly reason: DeadLetterReason;
  readonly count: number;
  readonly exchange: string;
  readonly routingKeys: readonly string[];
  readonly firstTime: number;
  readonly lastTime: number;
  /** The message's own `expiration` property, removed when it expired (spec 5). */
  readonly originalExpirationMs: number | null;
}

export interface DeathSummary {
  readonly reason: DeadLetterReason;
  readonly queue: string;
  readonly exchange: string;
}

export interface Deaths {
  readonly records: readonly DeathRecord[];
  readonly first: DeathSummary;
  readonly last: DeathSummary;
}

export interface Death {
  readonly queue: string;
  readonly reason: DeadLetterReason;
  readonly exchange: string;
  readonly routingKeys: readonly string[];
  readonly time: number;
  readonly originalExpirationMs: number | null;
}

/** Folds one more death into a message's records without mutating the old ones. */
export function recordDeath(previous: Deaths | null, death: Death): Deaths {
  const records = previous?.records ?? [];
  const existing = records.find((r) => r.queue === death.queue && r.reason === death.reason);
  const others = records.filter((r) => r !== existing);
  const record: DeathRecord = {
    queue: death.queue,
    reason: death.reason,
    count: (existing?.count ?? 0) + 1,
    exchange: death.exchange,
    routingKeys: [...death.routingKeys],
    firstTime: existing?.firstTime ?? death.time,
    lastTime: death.time,
    originalExpirationMs: death.originalExpirationMs ?? existing?.originalExpirationMs ?? null,
  };
  const summary: DeathSummary = { reason: death.reason, queue: death.queue, exchange: death.exchange };
  return { records: [record, ...others], first: previous?.first ?? summary, last: summary };
}

/**
 * Spec 5 cycles: dead-lettering into `targetQueue` is a cycle (the message is dropped
 * for that target) when the target already has a death record with the latest reason
 * and no `rejected` death lies between (a rejection is a client's decision, so a
 * reject -> retry loop is allowed, as in RabbitMQ). The router calls this per target.
 */
export function isDeadLetterCycle(deaths: Deaths, targetQueue: string): boolean {
  const reason = deaths.last.reason;
  for (const record of deaths.records) {
    if (record.reason === 'rejected') return false;
    if (record.queue === targetQueue && record.reason === reason) return true;
  }
  return false;
}
