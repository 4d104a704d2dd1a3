/** Trailer: the stable, machine-readable reason of an error status, e.g. "QUEUE_NOT_FOUND". */
export declare const REASON_TRAILER: 'quorumq-reason';
/** Trailer: the address (host:port) of the queue's leader, on an UNAVAILABLE the client should retry there. */
export declare const LEADER_TRAILER: 'quorumq-leader';
/** Request metadata: the SDK client's session id, sent on every call (exclusive queues, spec 7). */
export declare const SESSION_METADATA: 'quorumq-session';
/** Request metadata of peer calls: the calling node's id. */
export declare const PEER_NODE_ID_METADATA: 'quorumq-node-id';
/** Request metadata of peer calls: the cluster secret. */
export declare const PEER_SECRET_METADATA: 'quorumq-cluster-secret';
/** Request metadata: the caller's credentials, `Basic base64(user:password)` (RFC 7617), as HTTP sends them. */
export declare const AUTHORIZATION_METADATA: 'authorization';

/** The reasons a node sends in the quorumq-reason trailer, grouped by the gRPC status they come with. */
export declare const Reason: {
  // INVALID_ARGUMENT: the request is wrong; retrying it cannot help.
  /** A field's value is out of range or malformed (the message says which). */
  readonly INVALID_ARGUMENT: 'INVALID_ARGUMENT';
  /** The request's bytes do not decode. */
  readonly MALFORMED_REQUEST: 'MALFORMED_REQUEST';
  /** A metadata command or a forwarded entry that no node of this version proposes. */
  readonly MALFORMED_COMMAND: 'MALFORMED_COMMAND';
  readonly INVALID_QUEUE_NAME: 'INVALID_QUEUE_NAME';
  readonly INVALID_QUEUE_ARGUMENT: 'INVALID_QUEUE_ARGUMENT';
  /** A queue declared with no replica. */
  readonly NO_MEMBERS: 'NO_MEMBERS';
  /** A queue declared with durable = false: every queue is durable. */
  readonly DURABLE_REQUIRED: 'DURABLE_REQUIRED';
  /** An exclusive queue declared without a session (spec 7). */
  readonly SESSION_REQUIRED: 'SESSION_REQUIRED';

  // NOT_FOUND
  /** A user RPC naming a user that does not exist. */
  readonly USER_NOT_FOUND: 'USER_NOT_FOUND';
  readonly QUEUE_NOT_FOUND: 'QUEUE_NOT_FOUND';
  readonly NODE_NOT_FOUND: 'NODE_NOT_FOUND';
  readonly EXCHANGE_NOT_FOUND: 'EXCHANGE_NOT_FOUND';
  /** A move followed by id that no longer exists (spec 8). */
  readonly MOVE_NOT_FOUND: 'MOVE_NOT_FOUND';
  /** Ends the consume streams of a queue that was deleted. */
  readonly QUEUE_DELETED: 'QUEUE_DELETED';

  // FAILED_PRECONDITION: the request does not fit the current state.
  readonly PRECONDITION_FAILED: 'PRECONDITION_FAILED';
  /** A redeclare whose type or arguments differ from the existing ones. */
  readonly ARGUMENT_MISMATCH: 'ARGUMENT_MISMATCH';
  readonly CONSUMER_EXISTS: 'CONSUMER_EXISTS';
  readonly UNKNOWN_CONSUMER: 'UNKNOWN_CONSUMER';
  readonly UNKNOWN_DELIVERY_TAG: 'UNKNOWN_DELIVERY_TAG';
  /** An exclusive queue used by a session that does not own it (spec 7). */
  readonly RESOURCE_LOCKED: 'RESOURCE_LOCKED';
  /** Another move of the queue replaced this one (spec 8). */
  readonly MOVE_REPLACED: 'MOVE_REPLACED';
  /** A producer's sequence too far below the highest one stored to tell whether it was (spec 2). */
  readonly SEQUENCE_TOO_OLD: 'SEQUENCE_TOO_OLD';
  readonly MEMBERSHIP_REFUSED: 'MEMBERSHIP_REFUSED';

  // PERMISSION_DENIED: e.g. declaring or deleting a built-in exchange.
  readonly PERMISSION_DENIED: 'PERMISSION_DENIED';
  /** The user lacks the permission the call needs (the message names it: configure, write or read on a resource, or the administrator tag). */
  readonly ACCESS_REFUSED: 'ACCESS_REFUSED';

  // UNAUTHENTICATED: no credentials, or wrong ones (the message never says which, nor whether the user exists).
  readonly UNAUTHENTICATED: 'UNAUTHENTICATED';

  // RESOURCE_EXHAUSTED
  /** The node is low on disk space; publishes are refused until it is freed (retriable). */
  readonly DISK_ALARM: 'DISK_ALARM';
  /** The node's resident memory is above its high watermark; publishes are refused until it falls (retriable). */
  readonly MEMORY_ALARM: 'MEMORY_ALARM';
  readonly TOO_MANY_HEADERS: 'TOO_MANY_HEADERS';
  readonly HEADERS_TOO_DEEP: 'HEADERS_TOO_DEEP';
  readonly HEADERS_TOO_LARGE: 'HEADERS_TOO_LARGE';
  readonly BATCH_TOO_LARGE: 'BATCH_TOO_LARGE';
  /** A topology limit (exchanges, queues, bindings) is reached. */
  readonly RESOURCE_EXHAUSTED: 'RESOURCE_EXHAUSTED';
  /** Too many password checks are waiting on this node (each costs a memory-hard hash); retry later. */
  readonly AUTHENTICATION_BUSY: 'AUTHENTICATION_BUSY';

  // UNAVAILABLE: retry, possibly on another node (the quorumq-leader trailer names one).
  /** This node does not lead the queue (or group). */
  readonly NOT_LEADER: 'NOT_LEADER';
  /** No leader of the queue is known (an election is under way, or there is no quorum). */
  readonly NO_LEADER: 'NO_LEADER';
  /** The leadership moved during the call (a consumer resubscribes, a move goes on elsewhere). */
  readonly LEADER_MOVED: 'LEADER_MOVED';
  /** No leader answered within the request timeout. */
  readonly NO_QUORUM: 'NO_QUORUM';
  /** A proposal was accepted but not seen applied in time: it may still commit. */
  readonly OUTCOME_UNKNOWN: 'OUTCOME_UNKNOWN';
  /** A proposal was overwritten by a new leader: it did not commit. */
  readonly NOT_COMMITTED: 'NOT_COMMITTED';
  /** This node's copy of the metadata did not catch up in time. */
  readonly METADATA_BEHIND: 'METADATA_BEHIND';
  /** The queue's Raft group on this node is stopping. */
  readonly GROUP_STOPPED: 'GROUP_STOPPED';
  /** This node has no replica of the group a peer forwarded to. */
  readonly UNKNOWN_GROUP: 'UNKNOWN_GROUP';
  readonly SHUTTING_DOWN: 'SHUTTING_DOWN';
  /** This node was removed from the cluster (docs/operations.md, "Membership"): it serves nothing; use another node. */
  readonly NODE_REMOVED: 'NODE_REMOVED';

  // INTERNAL: a bug; the message says more.
  readonly INTERNAL: 'INTERNAL';
};

/** One of the reasons a node sends. */
export type ReasonName = (typeof Reason)[keyof typeof Reason];
