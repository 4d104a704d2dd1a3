/**
 * The commands, replies and effects of the queue state machine. All plain data: commands
 * are Raft log entries, replies go back to the proposer, effects are executed by the
 * server on the leader only and must be safe to execute twice.
 */
import type { QueueArguments } from './arguments.js';
import type { DeadLetterReason, Deaths } from './deaths.js';

/** What the driver tells the machine about the command being applied. */
export interface Meta {
  /**
   * The command's position in the log: increases from one command to the next, and is the id
   * of the message an enqueue stores. The broker passes `log index * ENTRY_SPAN + position in
   * the entry` (server queue-replica.ts); tests may pass the Raft index itself.
   */
  readonly index: number;
  readonly term: number;
  /** The leader's clock when it proposed the entry, in ms: the machine's only clock. */
  readonly now: number;
}

export type ConsumerId = string;

/**
 * The client session a command comes from (spec 7, exclusive queues). Optional on every
 * command that carries it: without it the command is trusted (as before sessions existed).
 */
export type SessionId = string;

export interface EnqueueCommand {
  readonly type: 'enqueue';
  /** Body size in bytes; the body itself lives in the server's message store, under the message id. */
  readonly sizeBytes: number;
  readonly exchange: string;
  readonly routingKeys: readonly string[];
  readonly priority?: number;
  /** Per-message `expiration` property, in ms. */
  readonly expirationMs?: number;
  readonly delayMs?: number;
  /** Absolute leader-clock timestamp before which the message is invisible. */
  readonly notBefore?: number;
  readonly producerId?: string;
  readonly sequence?: number;
  /** Death records the message already carries (republished or dead-lettered here). */
  readonly deaths?: Deaths;
  /**
   * Spec 9: the message's compaction key, read by the server from the header (or routing
   * key) the queue's `compactionKey` names; ignored by a queue without compaction. A
   * message without one is never replaced and replaces nothing.
   */
  readonly compactionKey?: string;
  /** Spec 9: an explicit tombstone (an empty body, sizeBytes 0, is one too). */
  readonly tombstone?: boolean;
}

export type Command =
  | EnqueueCommand
  | {
      readonly type: 'subscribe';
      readonly consumerId: ConsumerId;
      readonly prefetch: number;
      readonly priority?: number;
      readonly sessionId?: SessionId;
    }
  | { readonly type: 'credit'; readonly consumerId: ConsumerId; readonly prefetch: number }
  | { readonly type: 'cancel'; readonly consumerId: ConsumerId }
  /** The consumer's connection or node is gone: same as cancel, but replicated as a fact. */
  | { readonly type: 'consumerDown'; readonly consumerId: ConsumerId }
  | { readonly type: 'ack'; readonly consumerId: ConsumerId; readonly deliveryTag: number; readonly multiple?: boolean }
  | {
      readonly type: 'return';
      readonly consumerId: ConsumerId;
      readonly deliveryTag: number;
      readonly multiple?: boolean;
      /** Back-off before the message becomes visible again (spec 6, nack with delay). */
      readonly delayMs?: number;
    }
  | { readonly type: 'discard'; readonly consumerId: ConsumerId; readonly deliveryTag: number; readonly multiple?: boolean }
  /**
   * basic.get. `manual` hands the message to `consumerId` (non-empty), which must settle it:
   * a subscribed consumer, or else a get holder made for that id (gone once settled).
   */
  | { readonly type: 'get'; readonly ackMode: 'auto' | 'manual'; readonly consumerId?: ConsumerId; readonly sessionId?: SessionId }
  | { readonly type: 'purge'; readonly sessionId?: SessionId }
  | { readonly type: 'tick' }
  /** At-least-once dead-lettering: the targets committed these messages; forget them. */
  | { readonly type: 'deadLetterConfirmed'; readonly messageIds: readonly number[] }
  /** Renews the `expires` lease; an exclusive queue's first declare with a session records its owner. */
  | { readonly type: 'declare'; readonly sessionId?: SessionId }
  | { readonly type: 'delete'; readonly ifUnused?: boolean; readonly ifEmpty?: boolean; readonly sessionId?: SessionId }
  /** A client session ended: an exclusive queue owned by it (or without a known owner) goes. */
  | { readonly type: 'sessionEnded'; readonly sessionId?: SessionId }
  | MoveStartCommand
  /** The destination committed these moving messages: they leave the queue (idempotent). */
  | { readonly type: 'moveConfirmed'; readonly moveId: string; readonly messageIds: readonly number[] }
  /** The destination refused these moving messages: they rejoin the tail of the queue. */
  | { readonly type: 'moveFailed'; readonly moveId: string; readonly messageIds: readonly number[] }
  /** Hand out no more; the move is done once its in-flight messages are settled. */
  | { readonly type: 'moveCancel'; readonly moveId: string };

/**
 * Spec 8: move up to the ready count at this point (capped by `limit`) to `exchange`, one
 * window of messages at a time. For a destination queue use exchange "" and routingKey =
 * the queue's name. Repeating the start of the current move (same id) changes nothing.
 */
export interface MoveStartCommand {
  readonly type: 'moveStart';
  readonly moveId: string;
  readonly exchange: string;
  /** Publish with this routing key; omitted or null keeps each message's own routing keys. */
  readonly routingKey?: string | null;
  readonly limit?: number;
  /** Messages in flight at once, 1 (the default: one by one) to MOVE_WINDOW_MAX. */
  readonly window?: number;
}

export type CommandType = Command['type'];

export type ErrorCode =
  | 'INVALID_ARGUMENT'
  | 'UNKNOWN_CONSUMER'
  | 'CONSUMER_EXISTS'
  | 'UNKNOWN_DELIVERY_TAG'
  | 'FAILED_PRECONDITION'
  | 'QUEUE_DELETED'
  /** Spec 7: an exclusive queue used by a session that does not own it. */
  | 'RESOURCE_LOCKED'
  /** Spec 2: a producer's sequence too far below its highest stored one to tell whether it was stored. */
  | 'SEQUENCE_TOO_OLD';

export interface ErrorReply {
  readonly type: 'error';
  readonly code: ErrorCode;
  readonly message: string;
}

export interface DeliveredMessage {
  readonly messageId: number;
  readonly deliveryTag: number;
  readonly deliveryCount: number;
  readonly redelivered: boolean;
  readonly sizeBytes: number;
  readonly exchange: string;
  readonly routingKeys: readonly string[];
  readonly deaths: Deaths | null;
}

export type Reply =
  | { readonly type: 'ok' }
  | { readonly type: 'enqueued'; readonly messageId: number }
  | { readonly type: 'duplicate'; readonly producerId: string; readonly sequence: number }
  | { readonly type: 'rejected'; readonly reason: 'maxlen' }
  | { readonly type: 'message'; readonly message: DeliveredMessage }
  | { readonly type: 'empty' }
  | { readonly type: 'purged'; readonly messagesDropped: number }
  | { readonly type: 'deleted'; readonly messagesDropped: number }
  | { readonly type: 'moveStarted'; readonly moveId: string; readonly count: number }
  | ErrorReply;

export type Effect =
  | ({ readonly type: 'deliver'; readonly consumerId: ConsumerId } & DeliveredMessage)
  | {
      readonly type: 'deadLetter';
      readonly messageId: number;
      readonly reason: DeadLetterReason;
      readonly exchange: string;
      readonly routingKeys: readonly string[];
      readonly deaths: Deaths;
      /** at-least-once: send `deadLetterConfirmed` once the targets committed it. */
      readonly confirmRequired: boolean;
    }
  /** The message left the queue without a dead-letter target; counted in metrics. */
  | { readonly type: 'drop'; readonly messageId: number; readonly reason: DeadLetterReason }
  /** Every waiting (ready or delayed) message left at once (a purge, a delete); counted in metrics. */
  | { readonly type: 'dropWaiting'; readonly reason: 'purged' | 'deleted'; readonly count: number }
  | { readonly type: 'consumerTimedOut'; readonly consumerId: ConsumerId; readonly deliveryTag: number }
  /** Propose a `tick` command at (or soon after) this leader time. */
  | { readonly type: 'scheduleTick'; readonly at: number }
  | { readonly type: 'deleteQueue'; readonly reason: 'auto_delete' | 'expires' | 'exclusive' | 'delete' }
  /**
   * Spec 8: publish a copy of the message (body under `messageId`) to `exchange` with
   * `routingKeys` and its `deaths`, then propose `moveConfirmed` (or `moveFailed` if the
   * destination refused it). Re-issued by `leaderEffects` until settled: at least once.
   */
  | {
      readonly type: 'move';
      readonly moveId: string;
      readonly messageId: number;
      readonly exchange: string;
      readonly routingKeys: readonly string[];
      readonly sizeBytes: number;
      readonly deaths: Deaths | null;
    }
  /** The move is over: `outcome` says why; the counts are its final progress. */
  | {
      readonly type: 'moveDone';
      readonly moveId: string;
      readonly outcome: 'count' | 'empty' | 'cancelled';
      readonly count: number;
      readonly moved: number;
      readonly failed: number;
    };

export interface ApplyResult<S> {
  readonly state: S;
  readonly reply: Reply;
  readonly effects: Effect[];
}

export type { QueueArguments };
