/**
 * The data types of the Raft core: log entries, persistent state, messages and the
 * Ready batch that tells the driver what to persist, send and apply.
 *
 * Everything here is plain data so that the driver can encode it for the WAL and the
 * wire, and the simulator can copy, drop, duplicate and reorder it.
 */

/** A node's identity inside a Raft group. Stable across restarts. */
export type NodeId = string;

/** `normal` entries carry state-machine commands (empty data = the leader's no-op). */
export type EntryType = 'normal' | 'config';

export interface Entry {
  readonly index: number;
  readonly term: number;
  readonly type: EntryType;
  readonly data: Uint8Array;
}

/** What must be durable before any message that depends on it is sent. */
export interface HardState {
  readonly term: number;
  /** The candidate this node voted for in `term`, or null. */
  readonly vote: NodeId | null;
  /** Highest log index known committed. Invariant: commit <= last durable index. */
  readonly commit: number;
}

/** Group membership. Learners receive the log but do not vote and do not count. */
export interface ClusterConfig {
  readonly voters: readonly NodeId[];
  readonly learners: readonly NodeId[];
}

export interface SnapshotMeta {
  /** Index of the last entry the snapshot covers. */
  readonly index: number;
  /** Term of that entry. */
  readonly term: number;
  /** Membership as of `index`. */
  readonly config: ClusterConfig;
}

export interface Snapshot {
  readonly meta: SnapshotMeta;
  /** The state machine's serialized state at `meta.index`. */
  readonly data: Uint8Array;
}

/** One-server-at-a-time membership changes (Raft dissertation, section 4.1). */
export type ConfChange =
  | { readonly type: 'addLearner'; readonly nodeId: NodeId }
  | { readonly type: 'promote'; readonly nodeId: NodeId }
  | { readonly type: 'remove'; readonly nodeId: NodeId };

interface Envelope {
  readonly from: NodeId;
  readonly to: NodeId;
  /** The sender's term (for a pre-vote request: the term it would campaign in). */
  readonly term: number;
}

export interface PreVoteMessage extends Envelope {
  readonly type: 'preVote';
  readonly lastLogIndex: number;
  readonly lastLogTerm: number;
}
export interface PreVoteResponse extends Envelope {
  readonly type: 'preVoteResp';
  readonly reject: boolean;
}
export interface VoteMessage extends Envelope {
  readonly type: 'vote';
  readonly lastLogIndex: number;
  readonly lastLogTerm: number;
  /** Set when campaigning because of TimeoutNow: voters then ignore their leader lease. */
  readonly leaderTransfer: boolean;
}
export interface VoteResponse extends Envelope {
  readonly type: 'voteResp';
  readonly reject: boolean;
}
export interface AppendMessage extends Envelope {
  readonly type: 'append';
  readonly prevLogIndex: number;
  readonly prevLogTerm: number;
  readonly entries: readonly Entry[];
  readonly commit: number;
}
export interface AppendResponse extends Envelope {
  readonly type: 'appendResp';
  readonly reject: boolean;
  /** On success: the highest index now known to match the leader. On reject: the rejected prevLogIndex. */
  readonly index: number;
  /** On reject: where the leader should probe next (fast back-tracking). */
  readonly hintIndex: number;
  /** On reject: the follower's term at hintIndex. */
  readonly hintTerm: number;
}
export interface HeartbeatMessage extends Envelope {
  readonly type: 'heartbeat';
  readonly commit: number;
  /** Highest read-index request sequence outstanding on the leader (0 = none). */
  readonly readSeq: number;
  /**
   * The group goes quiet (see RaftNode.isQuiet): the leader sends no more heartbeats until
   * there is work, and a follower holding everything up to `commit` stops its election timer.
   */
  readonly quiesce: boolean;
}
export interface HeartbeatResponse extends Envelope {
  readonly type: 'heartbeatResp';
  readonly readSeq: number;
  /**
   * The follower asks a quiet leader to heartbeat again: it woke (and must not campaign
   * against a healthy leader), or it answers a quiesce heartbeat without going quiet. A quiet
   * leader stays quiet on any other answer: it answers a heartbeat sent before the leader
   * went quiet, and the quiesce heartbeat that follows it on the same link is answered too.
   */
  readonly wake: boolean;
}
export interface SnapshotChunkMessage extends Envelope {
  readonly type: 'snapshot';
  readonly meta: SnapshotMeta;
  readonly offset: number;
  readonly totalBytes: number;
  readonly chunk: Uint8Array;
  readonly done: boolean;
}
export interface SnapshotChunkResponse extends Envelope {
  readonly type: 'snapshotResp';
  /** Snapshot being transferred (its index), so stale responses are recognised. */
  readonly snapshotIndex: number;
  /** The next byte offset the follower expects. */
  readonly nextOffset: number;
  readonly reject: boolean;
}
export interface TimeoutNowMessage extends Envelope {
  readonly type: 'timeoutNow';
}

export type Message =
  | PreVoteMessage
  | PreVoteResponse
  | VoteMessage
  | VoteResponse
  | AppendMessage
  | AppendResponse
  | HeartbeatMessage
  | HeartbeatResponse
  | SnapshotChunkMessage
  | SnapshotChunkResponse
  | TimeoutNowMessage;

export type MessageType = Message['type'];

export type Role = 'follower' | 'preCandidate' | 'candidate' | 'leader';

/** Volatile state the driver may want to observe; not persisted. */
export interface SoftState {
  readonly leaderId: NodeId | null;
  readonly role: Role;
}

/** A linearizable read is safe to serve once `applied >= index`. */
export interface ReadState {
  readonly requestId: string;
  readonly index: number;
}

/**
 * One batch of work for the driver. The driver must, in this order:
 * 1. durably persist `snapshot`, `hardState` and `entries` (entries may overwrite a suffix
 *    of the persisted log: the first entry's index can be at or below the last one stored);
 * 2. send `messages`;
 * 3. apply `committedEntries` in order (they are always already durable);
 * 4. call `advance()`.
 * The node may be stepped and ticked between `ready()` and `advance()`.
 *
 * Exception to the order: a leader's requests to its followers (`sendableBeforePersist`)
 * may be sent before step 1 finishes, so followers write in parallel with the leader (Raft
 * dissertation 10.2.1). That is safe because the leader counts its own entries toward
 * commit only after `advance()`, and its term and vote were durable before it led.
 */
export interface Ready {
  readonly softState: SoftState | null;
  readonly hardState: HardState | null;
  readonly entries: readonly Entry[];
  readonly snapshot: Snapshot | null;
  readonly committedEntries: readonly Entry[];
  readonly messages: readonly Message[];
  readonly readStates: readonly ReadState[];
  /** True when hardState (term or vote) or entries or snapshot changed: fdatasync needed. */
  readonly mustSync: boolean;
}

/**
 * True for the messages a driver may send before the Ready that holds them is durable:
 * a leader's appends, heartbeats, snapshot chunks and TimeoutNow. Votes and every response
 * promise something about local durable state and must wait.
 */
export function sendableBeforePersist(message: Message): boolean {
  switch (message.type) {
    case 'append':
    case 'heartbeat':
    case 'snapshot':
    case 'timeoutNow':
      return true;
    case 'preVote':
    case 'preVoteResp':
    case 'vote':
    case 'voteResp':
    case 'appendResp':
    case 'heartbeatResp':
    case 'snapshotResp':
      return false;
  }
}

/** What the driver restores a node from after a restart (or a fresh start). */
export interface RestoredState {
  readonly hardState: HardState;
  /** The newest durable snapshot, or null if the group never snapshotted. */
  readonly snapshot: Snapshot | null;
  /** Durable entries after the snapshot, contiguous and in order. */
  readonly entries: readonly Entry[];
  /**
   * Set when the storage found this replica's durable state damaged and repaired it by
   * dropping what it could not trust (see RecoveryMark). Absent or null: intact.
   */
  readonly recovering?: RecoveryMark | null;
}

/**
 * A replica that lost durable state (log entries it may have acknowledged, a vote it may
 * have cast) restarts with a term above every term it could have acted in (`term`, from a
 * durably kept bound) and this mark. Until its durable log holds an entry of term >= `term`
 * it neither grants votes (nor pre-votes) nor campaigns: its log may lack entries that
 * were committed with its own acknowledgement, so its vote could elect a leader missing
 * them. An entry of term >= `term` can only come from a leader elected without it, whose
 * log holds every committed entry; once this replica matches that leader's log that far,
 * it holds everything it ever acknowledged that counted, and is an intact replica again.
 */
export interface RecoveryMark {
  readonly term: number;
}

export type ProposeResult =
  | { readonly ok: true; readonly index: number; readonly term: number }
  | { readonly ok: false; readonly reason: ProposeRejection; readonly leaderId: NodeId | null };

export type ProposeRejection =
  | 'notLeader'
  | 'leadershipTransfer'
  | 'configChangePending'
  | 'invalidConfigChange';

/** A source of randomness injected by the driver so the core stays deterministic. */
export interface Random {
  /** A uniformly distributed integer in [0, maxExclusive). */
  nextInt(maxExclusive: number): number;
}
