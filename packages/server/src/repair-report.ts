/**
 * Logs and metrics of storage repair (see @quorumq/storage repair.ts): what the storage found
 * damaged and repaired when the node started, and each repaired replica's catch-up, with
 * the leader it caught up from and the bytes it received.
 */
import type { StorageRepair } from '@quorumq/storage';
import type { Logger } from 'pino';

import type { NodeMetrics } from './metrics.js';
import type { RecoveryReport } from './raft-group.js';

/** The storage's repairs at start: one warning each (what, where, what was dropped), counted by kind. */
export function reportRepairs(repairs: readonly StorageRepair[], metrics: NodeMetrics | undefined, logger: Logger): void {
  for (const repair of repairs) {
    metrics?.repairs.inc({ kind: repair.damage });
    logger.warn(
      { group: repair.groupId, damage: repair.damage, detail: repair.detail, term: repair.term, snapshotIndex: repair.snapshotIndex, droppedEntries: repair.droppedEntries },
      `storage damage repaired: group ${repair.groupId} restarts from ${repair.snapshotIndex === null ? 'an empty log' : `its snapshot at ${repair.snapshotIndex}`} ` +
        `in term ${repair.term}; it does not vote until a leader of that term refills it (${repair.detail})`,
    );
  }
}

/** A repaired replica caught up: it votes again. */
export function recoveryReporter(metrics: NodeMetrics | undefined, logger: Logger): (report: RecoveryReport) => void {
  return (report) => {
    metrics?.repairs.inc({ kind: 'recovered' });
    metrics?.repairBytes.inc(report.bytes);
    logger.info(
      { group: report.groupId, leader: report.leaderId, term: report.term, entries: report.entries, bytes: report.bytes, snapshots: report.snapshots, ms: report.ms },
      `repaired group ${report.groupId} caught up from ${report.leaderId ?? 'its leader'}: ${report.entries} entries` +
        `${report.snapshots > 0 ? ` and ${report.snapshots} snapshot(s)` : ''}, ${report.bytes} bytes, in ${report.ms} ms; it votes again`,
    );
  };
}
