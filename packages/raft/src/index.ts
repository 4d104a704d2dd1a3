export type * from './types.js';
export { sendableBeforePersist } from './types.js';
export { RaftNode } from './raft.js';
export type { RaftOptions, RaftStatus, PlantedBug, ReadIndexResult, TransferResult } from './raft.js';
export { RaftInvariantError } from './assert.js';
export { createRandom } from './random.js';
export { encodeConfigEntry, decodeConfigEntry, quorumSize, isVoter, applyConfChange } from './config.js';
export type { ConfigEntryPayload } from './config.js';
