/**
 * Death records a client sends with a publish (spec 5: a consumer republishing a received
 * message keeps its history, so its deaths keep counting). The wire mapping is
 * `@quorumq/proto/deaths`, shared with the SDK (and used for deliveries in queue-replica.ts);
 * this adds the node's check of the reasons, so the queue machine only ever sees its own.
 */
import type { quorumq } from '@quorumq/proto';
import { DEAD_LETTER_REASONS, deathsFromWire } from '@quorumq/proto/deaths';
import type { Deaths } from '@quorumq/queue';

import { invalidArgument } from './errors.js';

const REASONS: readonly string[] = DEAD_LETTER_REASONS;

function checkReason(reason: string, where: string): void {
  if (!REASONS.includes(reason)) throw invalidArgument(`${where}: reason must be one of ${REASONS.join(', ')}`);
}

/** The death records of a published message, or undefined when it has none; INVALID_ARGUMENT for an unknown reason. */
export function publishedDeaths(message: quorumq.v1.Message.$Properties): Deaths | undefined {
  const deaths = deathsFromWire(message);
  if (deaths === null) return undefined;
  deaths.records.forEach((record, i) => checkReason(record.reason, `deaths[${i}]`));
  checkReason(deaths.first.reason, 'first_death');
  checkReason(deaths.last.reason, 'last_death');
  // Every reason was checked against DEAD_LETTER_REASONS just above.
  return deaths as Deaths;
}
