/** Public API of the quorum-queue state machine. */
export { apply } from './machine.js';
export {
  parseQueueArguments,
  argumentWarnings,
  argumentMismatch,
  DEFAULT_ARGUMENTS,
  DELIVERY_LIMIT_DEFAULT,
  DEDUP_WINDOW_DEFAULT_MS,
  CONSUMER_TIMEOUT_DEFAULT_MS,
  MAX_PRIORITY_MAX,
  COMPACTION_TOMBSTONE_RETENTION_DEFAULT_MS,
  COMPACTION_KEY_ROUTING_KEY,
} from './arguments.js';
export { liveKeyCount } from './compaction.js';
export type { CompactionState, KeyRecord, KeyedMessage } from './compaction.js';
export type { QueueArguments, QueueArgumentsInput, Overflow, DeadLetterStrategy } from './arguments.js';
export { recordDeath, isDeadLetterCycle } from './deaths.js';
export type { Death, DeadLetterReason, DeathRecord, DeathSummary, Deaths } from './deaths.js';
export { QueueArgumentError, QueueInvariantError } from './errors.js';
export { createQueueState } from './state.js';
export type { QueueState, MessageHeader, ConsumerState, DeliveryHolder, GetHolderState, Place, GoneReason, MoveState } from './state.js';
export { moveProgress, MOVE_WINDOW_MAX } from './move.js';
export type { MoveProgress } from './move.js';
export { commandTypeProblem, validateDeaths } from './validate.js';
export { pendingDeadLetterEffects } from './deadletter.js';
export { leaderEffects } from './tick.js';
export { DELIVERIES_PER_APPLY_MAX } from './delivery.js';
export { snapshot, restore, encodeSnapshot, encodeSnapshotLater, cloneState, SnapshotScratch, decodeSnapshot, stateHash, lowestLiveIndex, SNAPSHOT_VERSION } from './snapshot.js';
export type { QueueSnapshot, SnapshotEncoding } from './snapshot.js';
export type {
  Meta,
  Command,
  CommandType,
  EnqueueCommand,
  ConsumerId,
  SessionId,
  MoveStartCommand,
  Reply,
  ErrorReply,
  ErrorCode,
  Effect,
  ApplyResult,
  DeliveredMessage,
} from './types.js';
