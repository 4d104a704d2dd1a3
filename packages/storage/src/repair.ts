/**
 * Repair of a node's damaged durable state, decided when NodeStorage opens.
 *
 * What counts as damage (each found by a checksum or a reference that does not resolve):
 * - `wal`: a record before the WAL's tail fails its CRC or cannot be framed (a flipped bit,
 *   a truncated or zero-filled segment that is not the last one). The damaged bytes cannot
 *   be attributed to a group, and records after them may have overwritten the log or the
 *   hard state of any group, so every group of the node is repaired.
 * - `log`: a group's entries have a hole no later record explains (a lost segment).
 * - `snapshot`: the snapshot file the KV store points at is missing, short or fails its CRC.
 *
 * The repair of a group, in one synced KV batch before anything is restored:
 * 1. Its log restarts after its own snapshot if that is intact (else empty): a floor at a
 *    WAL position past every record makes replay ignore all of its older records. Every
 *    entry after the snapshot is dropped, intact or not; a leader sends them again. (The
 *    snapshot is committed state, CRC-checked: trusting it needs no argument about which
 *    records the damage may have hidden.) With `wal` damage the WAL itself restarts in a
 *    fresh segment after that floor and the old segments are deleted.
 * 2. Its hard state becomes (term T, no vote, commit = snapshot index), with T one above
 *    the group's term bound: the bound is kept in the KV store and raised before any hard
 *    state passes it (see NodeStorage.persist), so the replica never voted or acknowledged
 *    anything in T or later. A leader of a term below T that still counts this replica's
 *    old acknowledgements hears of term T at its next message and steps down: every leader
 *    this replica answers from now on learnt its match index from the repaired log only.
 * 3. A recovery mark (term T) is kept until the group's durable log holds an entry of term
 *    T or later. Meanwhile the replica neither votes nor campaigns (RecoveryMark in the Raft
 *    core): its log may lack entries committed with its own acknowledgement, so its vote
 *    could elect a leader missing them. A leader of term >= T was elected without it, so a
 *    majority of the others elected it and it holds every committed entry; once this replica
 *    holds one of its entries, its log matches that leader's up to there and holds them too.
 *
 * What this relies on: at most a minority of a group's replicas are damaged at once (a
 * recovering replica counts toward no election, so the others must still make a majority
 * for the group to elect), and the KV store (LevelDB, with its own checksums) is intact:
 * a node whose KV store fails to open refuses to start (see the node's start-up message).
 */
import type { HardState, Snapshot } from '@quorumq/raft';
import type { WalCorruption } from './errors.js';
import type { GroupState } from './group-state.js';
import type { KvOp } from './kv.js';
import { encodeJson, kvKey, type Checkpoint, type RecoveringMark } from './kv-layout.js';
import type { WalPosition } from './wal.js';

/** A group's term bound is raised this far ahead of its term: one KV write per this many terms. */
export const TERM_BOUND_STEP = 16;
/**
 * For a group of a store written before term bounds were kept: the repair's term is this far
 * above the highest term left on disk (its lost hard state may have been later than that).
 */
export const LEGACY_TERM_MARGIN = 1024;

export type DamageKind = 'wal' | 'log' | 'snapshot';

/** One group's repair, for logs and metrics. */
export interface StorageRepair {
  readonly groupId: string;
  readonly damage: DamageKind;
  readonly detail: string;
  /** The term the group restarts in; it recovers until its log holds an entry of it. */
  readonly term: number;
  /** The snapshot kept, or null when the group restarts empty. */
  readonly snapshotIndex: number | null;
  /** Entries dropped after the snapshot (the leader sends them again). */
  readonly droppedEntries: number;
}

export interface RepairPlan {
  /** The KV writes, to be made durable in one batch before `apply`. */
  readonly ops: readonly KvOp[];
  /** Applies the repairs to the in-memory group states (after `ops` are durable). */
  readonly apply: () => void;
  readonly repairs: readonly StorageRepair[];
  readonly warnings: readonly string[];
}

/**
 * Decides the repairs of the member groups: all of them with `corruption` (the WAL's), else
 * those with a hole in their log or a damaged snapshot. `floor` is past every WAL record.
 * Also gives every member group without a term bound one (stores written before bounds were
 * kept), and drops the recovery marks of groups whose log got past them before a crash.
 */
export function planRepairs(groups: readonly GroupState[], corruption: WalCorruption | null, floor: WalPosition): RepairPlan {
  const ops: KvOp[] = [];
  const appliers: Array<() => void> = [];
  const repairs: StorageRepair[] = [];
  const warnings: string[] = [];
  for (const group of groups) {
    if (!group.member) continue;
    const damage = damageOf(group, corruption);
    if (damage === null) {
      planUpkeep(group, ops, appliers);
      continue;
    }
    let bound = group.termBound;
    if (bound === 0) {
      bound = Math.max(group.hardState.term, group.lastTerm()) + LEGACY_TERM_MARGIN;
      warnings.push(`REPAIR: group ${group.id} has no term bound (a store from an older version): assuming ${bound}`);
    }
    const term = Math.max(bound, group.hardState.term, group.lastTerm()) + 1;
    const snapshot: Snapshot | null = group.lostSnapshot === null ? group.snapshot : null;
    const hardState: HardState = { term, vote: null, commit: snapshot?.meta.index ?? 0 };
    const checkpoint: Checkpoint = { hardState, position: null };
    const mark: RecoveringMark = { term, reason: `${damage.kind}: ${damage.detail}` };
    const termBound = term + TERM_BOUND_STEP;
    ops.push(
      { type: 'put', key: kvKey('floor', group.id), value: encodeJson(floor) },
      { type: 'put', key: kvKey('checkpoint', group.id), value: encodeJson(checkpoint) },
      { type: 'del', key: kvKey('overwrites', group.id) },
      { type: 'put', key: kvKey('recovering', group.id), value: encodeJson(mark) },
      { type: 'put', key: kvKey('termBound', group.id), value: encodeJson(termBound) },
    );
    if (snapshot === null) {
      ops.push(
        { type: 'del', key: kvKey('snapshotMeta', group.id) },
        { type: 'del', key: kvKey('snapshotFile', group.id) },
        { type: 'del', key: kvKey('snapshotData', group.id) },
      );
    }
    repairs.push({
      groupId: group.id,
      damage: damage.kind,
      detail: damage.detail,
      term,
      snapshotIndex: snapshot?.meta.index ?? null,
      droppedEntries: group.entries.length,
    });
    appliers.push(() => group.restartAfterDamage(snapshot, floor, checkpoint, mark, termBound));
  }
  return { ops, apply: () => appliers.forEach((apply) => apply()), repairs, warnings };
}

function damageOf(group: GroupState, corruption: WalCorruption | null): { kind: DamageKind; detail: string } | null {
  if (group.lostSnapshot !== null) return { kind: 'snapshot', detail: group.lostSnapshot };
  if (corruption !== null) {
    return {
      kind: 'wal',
      detail: `WAL corrupt in segment ${corruption.segment} (${corruption.file}) at offset ${corruption.offset}: ${corruption.reason}`,
    };
  }
  if (group.damage !== null) return { kind: 'log', detail: group.damage.reason };
  return null;
}

/** A term bound for a group that has none; a recovery mark dropped once the log got past it. */
function planUpkeep(group: GroupState, ops: KvOp[], appliers: Array<() => void>): void {
  if (group.termBound < group.hardState.term) {
    const bound = group.hardState.term + TERM_BOUND_STEP;
    ops.push({ type: 'put', key: kvKey('termBound', group.id), value: encodeJson(bound) });
    appliers.push(() => {
      group.termBound = bound;
      group.termBoundSubmitted = Math.max(group.termBoundSubmitted, bound);
    });
  }
  const recovering = group.recovering;
  if (recovering !== null && group.lastTerm() >= recovering.term) {
    ops.push({ type: 'del', key: kvKey('recovering', group.id) });
    appliers.push(() => {
      group.recovering = null;
    });
  }
}
