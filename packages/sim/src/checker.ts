import type { Entry, NodeId } from '@quorumq/raft';

export type Property =
  | 'ElectionSafety'
  | 'LogMatching'
  | 'LeaderCompleteness'
  | 'StateMachineSafety'
  | 'AcknowledgedNotLost'
  | 'LinearizableRead'
  | 'ConfirmedNotLost'
  | 'DeathRecorded'
  | 'ReplicasAgree'
  | 'Liveness'
  | 'Invariant';

export class SafetyViolation extends Error {
  override readonly name = 'SafetyViolation';
  constructor(
    readonly property: Property,
    detail: string,
  ) {
    super(`${property}: ${detail}`);
  }
}

/** A view of one node's log, for the Leader Completeness check. */
export interface LogView {
  readonly id: NodeId;
  readonly term: number;
  /** Index of the newest snapshot or compaction point: everything at or below it is in the snapshot. */
  readonly snapshotIndex: number;
  termAt(index: number): number | undefined;
}

/**
 * Checks the safety properties of the Raft paper over everything the simulated nodes do.
 * Each check is incremental, so it runs after every simulator step.
 */
export class SafetyChecker {
  private readonly leaderOfTerm = new Map<number, NodeId>();
  /** Every (index, term) ever appended anywhere: its content and its predecessor's term. */
  private readonly appended = new Map<string, { content: string; prevTerm: number }>();
  /** Every applied entry by index: the one committed entry at that index. */
  private readonly committed = new Map<number, { term: number; content: string }>();
  private highestCommitted = 0;
  checks = 0;

  /** Election Safety: at most one leader per term. */
  observeLeader(id: NodeId, term: number): boolean {
    this.checks++;
    const known = this.leaderOfTerm.get(term);
    if (known === undefined) {
      this.leaderOfTerm.set(term, id);
      return true;
    }
    if (known !== id) throw new SafetyViolation('ElectionSafety', `two leaders in term ${term}: ${known} and ${id}`);
    return false;
  }

  /**
   * Log Matching, by induction: an (index, term) pair always names the same entry with the
   * same predecessor, so two logs that share it agree on everything before it.
   */
  observeAppended(node: NodeId, entries: readonly Entry[], termBefore: (index: number) => number | undefined): void {
    let prevTerm = entries.length > 0 ? termBefore(entries[0]!.index - 1) : undefined;
    for (const entry of entries) {
      this.checks++;
      const key = `${entry.index}/${entry.term}`;
      const content = entryContent(entry);
      const known = this.appended.get(key);
      const prev = prevTerm ?? -1;
      if (known === undefined) {
        this.appended.set(key, { content, prevTerm: prev });
      } else if (known.content !== content || (prev !== -1 && known.prevTerm !== -1 && known.prevTerm !== prev)) {
        throw new SafetyViolation(
          'LogMatching',
          `${node} appended ${key} as ${content} after term ${prev}; elsewhere it is ${known.content} after term ${known.prevTerm}`,
        );
      }
      prevTerm = entry.term;
    }
  }

  /** State Machine Safety: no two nodes apply different entries at the same index. */
  observeApplied(node: NodeId, entry: Entry): void {
    this.checks++;
    const content = entryContent(entry);
    const known = this.committed.get(entry.index);
    if (known === undefined) {
      this.committed.set(entry.index, { term: entry.term, content });
      this.highestCommitted = Math.max(this.highestCommitted, entry.index);
      return;
    }
    if (known.term !== entry.term || known.content !== content) {
      throw new SafetyViolation(
        'StateMachineSafety',
        `${node} applied ${entry.index}/${entry.term} ${content}; another node applied ${entry.index}/${known.term} ${known.content}`,
      );
    }
  }

  /** Leader Completeness: a new leader holds every entry committed before its term. */
  checkLeaderCompleteness(leader: LogView): void {
    for (let index = leader.snapshotIndex + 1; index <= this.highestCommitted; index++) {
      this.checks++;
      const entry = this.committed.get(index);
      if (entry === undefined || entry.term >= leader.term) continue;
      const term = leader.termAt(index);
      if (term !== entry.term) {
        throw new SafetyViolation(
          'LeaderCompleteness',
          `leader ${leader.id} of term ${leader.term} has ${term === undefined ? 'no entry' : `term ${term}`} at committed index ${index} (term ${entry.term})`,
        );
      }
    }
  }

  committedTermAt(index: number): number | undefined {
    return this.committed.get(index)?.term;
  }

  get committedCount(): number {
    return this.committed.size;
  }

  get leaderTerms(): number {
    return this.leaderOfTerm.size;
  }
}

function entryContent(entry: Entry): string {
  return `${entry.type}:${Buffer.from(entry.data.buffer, entry.data.byteOffset, entry.data.byteLength).toString('base64')}`;
}
