/**
 * An online checker of the safety properties of the Raft paper (Figure 3). The test
 * cluster feeds it every node after every tick, step and advance, and every applied
 * entry; it records violations instead of throwing so that tests with planted bugs can
 * assert that a violation was found.
 */
import type { Entry, NodeId, RaftStatus } from '../src/index.js';

/** The part of RaftNode the checker reads (also implemented by stubs in checker self-tests). */
export interface Observable {
  status(): RaftStatus;
  termAt(index: number): number | undefined;
  entryAt(index: number): Entry | undefined;
}

interface CommittedEntry {
  readonly term: number;
  /** The term of the node that saw it committed: leaders of later terms must have it. */
  readonly inTerm: number;
  readonly by: NodeId;
}

export class SafetyChecker {
  readonly violations: string[] = [];
  /** Every node seen as leader, per term. */
  readonly leadersByTerm = new Map<number, Set<NodeId>>();
  /** Entry terms of each leader's log, per `${id}@${term}`, indexed by log index. */
  private readonly leaderLogs = new Map<string, number[]>();
  /** Nodes currently leading, with their term. */
  private readonly activeLeaders = new Map<NodeId, number>();
  readonly committed = new Map<number, CommittedEntry>();
  private readonly commitSeen = new Map<NodeId, number>();
  private readonly appliedAt = new Map<number, { readonly key: string; readonly by: NodeId }>();

  constructor(private readonly lookup: (id: NodeId) => Observable | undefined = () => undefined) {}

  private violate(message: string): void {
    if (!this.violations.includes(message)) this.violations.push(message);
  }

  observe(node: Observable): void {
    const s = node.status();
    this.observeCommit(node, s);
    if (s.role === 'leader') this.observeLeader(node, s);
    else this.activeLeaders.delete(s.id);
  }

  /** Forgets a node's volatile observations (it crashed). */
  forget(id: NodeId): void {
    this.activeLeaders.delete(id);
  }

  private observeLeader(node: Observable, s: RaftStatus): void {
    let leaders = this.leadersByTerm.get(s.term);
    if (leaders === undefined) {
      leaders = new Set();
      this.leadersByTerm.set(s.term, leaders);
    }
    leaders.add(s.id);
    if (leaders.size > 1) this.violate(`Election Safety: term ${s.term} has leaders ${[...leaders].sort().join(', ')}`);

    const key = `${s.id}@${s.term}`;
    let recorded = this.leaderLogs.get(key);
    if (recorded === undefined) {
      recorded = [];
      this.leaderLogs.set(key, recorded);
      this.activeLeaders.set(s.id, s.term);
      for (const [index, entry] of this.committed) {
        if (entry.inTerm < s.term) this.checkLeaderHas(node, s, index, entry);
      }
    } else {
      if (s.lastIndex < recorded.length - 1) {
        this.violate(`Leader Append-Only: ${s.id} (leader of term ${s.term}) shrank its log from ${recorded.length - 1} to ${s.lastIndex}`);
      }
      for (let index = s.firstIndex; index < recorded.length; index++) {
        const before = recorded[index];
        if (before === undefined) continue;
        const now = node.termAt(index);
        if (now !== undefined && now !== before) {
          this.violate(`Leader Append-Only: ${s.id} (leader of term ${s.term}) changed entry ${index} from term ${before} to ${now}`);
        }
      }
    }
    for (let index = Math.max(recorded.length, s.firstIndex); index <= s.lastIndex; index++) {
      const term = node.termAt(index);
      if (term !== undefined) recorded[index] = term;
    }
  }

  private checkLeaderHas(node: Observable, s: RaftStatus, index: number, entry: CommittedEntry): void {
    if (index < s.firstIndex) return; // covered by the leader's snapshot
    const term = node.termAt(index);
    if (term !== entry.term) {
      this.violate(
        `Leader Completeness: entry ${index} (term ${entry.term}) committed in term ${entry.inTerm} is ` +
          `${term === undefined ? 'missing' : `term ${term}`} in the log of ${s.id}, leader of term ${s.term}`,
      );
    }
  }

  private observeCommit(node: Observable, s: RaftStatus): void {
    const previous = this.commitSeen.get(s.id) ?? 0;
    this.commitSeen.set(s.id, s.commitIndex);
    for (let index = Math.max(previous + 1, s.firstIndex); index <= s.commitIndex; index++) {
      const term = node.termAt(index);
      if (term === undefined) continue;
      const existing = this.committed.get(index);
      if (existing !== undefined) {
        if (existing.term !== term) {
          this.violate(`State Machine Safety: entry ${index} committed with term ${existing.term} on ${existing.by} but term ${term} on ${s.id}`);
        }
        continue;
      }
      const entry = { term, inTerm: s.term, by: s.id };
      this.committed.set(index, entry);
      for (const [leaderId, leaderTerm] of this.activeLeaders) {
        const leader = this.lookup(leaderId);
        if (leaderTerm > s.term && leader !== undefined) this.checkLeaderHas(leader, leader.status(), index, entry);
      }
    }
  }

  /** State Machine Safety: no two nodes apply different entries at the same index. */
  onApply(id: NodeId, entry: Entry): void {
    const key = `${entry.term}/${entry.type}/${Buffer.from(entry.data).toString('hex')}`;
    const existing = this.appliedAt.get(entry.index);
    if (existing === undefined) this.appliedAt.set(entry.index, { key, by: id });
    else if (existing.key !== key) {
      this.violate(`State Machine Safety: ${existing.by} applied ${existing.key} at index ${entry.index} but ${id} applied ${key}`);
    }
  }

  /**
   * Log Matching: if two logs contain an entry with the same index and term, the logs are
   * identical in all entries up through that index (where both still have them).
   */
  checkLogMatching(nodes: readonly Observable[]): void {
    const statuses = nodes.map((n) => n.status());
    for (let a = 0; a < nodes.length; a++) {
      for (let b = a + 1; b < nodes.length; b++) {
        const [na, nb, sa, sb] = [nodes[a]!, nodes[b]!, statuses[a]!, statuses[b]!];
        const low = Math.max(sa.firstIndex, sb.firstIndex);
        let high = Math.min(sa.lastIndex, sb.lastIndex);
        while (high >= low && na.termAt(high) !== nb.termAt(high)) high--;
        for (let index = high; index >= low; index--) {
          const ea = na.entryAt(index);
          const eb = nb.entryAt(index);
          if (ea === undefined || eb === undefined) continue;
          if (ea.term !== eb.term || ea.type !== eb.type || !sameBytes(ea.data, eb.data)) {
            this.violate(`Log Matching: ${sa.id} and ${sb.id} agree on entry ${high} but differ at ${index}`);
            break;
          }
        }
      }
    }
  }
}

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.byteLength !== b.byteLength) return false;
  for (let i = 0; i < a.byteLength; i++) if (a[i] !== b[i]) return false;
  return true;
}
