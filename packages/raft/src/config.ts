import { assert } from './assert.js';
import type { ClusterConfig, ConfChange, NodeId } from './types.js';

export const EMPTY_CONFIG: ClusterConfig = { voters: [], learners: [] };

export function isVoter(config: ClusterConfig, id: NodeId): boolean {
  return config.voters.includes(id);
}

export function isMember(config: ClusterConfig, id: NodeId): boolean {
  return config.voters.includes(id) || config.learners.includes(id);
}

export function members(config: ClusterConfig): NodeId[] {
  return [...config.voters, ...config.learners];
}

/** The number of votes (or acknowledgements) that make a majority of the voters. */
export function quorumSize(config: ClusterConfig): number {
  return Math.floor(config.voters.length / 2) + 1;
}

/** The voters' match indexes of the latest quorumMatchIndex call (reused: it runs on every append response). */
let matchScratch: number[] = [];

/**
 * The largest index that a majority of voters has, given each voter's match index: the
 * largest match that a majority's matches reach. Returns 0 when there are no voters.
 * Without sorting (a sort of three numbers allocated about 1 KB per call, and this runs for
 * every append response a leader takes): a handful of voters, so the count is quadratic.
 */
export function quorumMatchIndex(config: ClusterConfig, matchOf: (id: NodeId) => number): number {
  const voters = config.voters;
  const n = voters.length;
  if (n === 0) return 0;
  if (matchScratch.length < n) matchScratch = new Array<number>(n).fill(0);
  const matches = matchScratch;
  for (let i = 0; i < n; i++) matches[i] = matchOf(voters[i]!);
  const majority = quorumSize(config);
  let index = 0;
  for (let i = 0; i < n; i++) {
    const candidate = matches[i]!;
    if (candidate <= index) continue;
    let reached = 0;
    for (let j = 0; j < n; j++) if (matches[j]! >= candidate) reached += 1;
    if (reached >= majority) index = candidate;
  }
  return index;
}

/** Why a change cannot be applied to a configuration, or null if it can. */
export function validateConfChange(config: ClusterConfig, change: ConfChange): string | null {
  switch (change.type) {
    case 'addLearner':
      return isMember(config, change.nodeId) ? `${change.nodeId} is already a member` : null;
    case 'promote':
      return config.learners.includes(change.nodeId) ? null : `${change.nodeId} is not a learner`;
    case 'remove':
      if (!isMember(config, change.nodeId)) return `${change.nodeId} is not a member`;
      if (config.voters.length === 1 && isVoter(config, change.nodeId)) {
        return `cannot remove ${change.nodeId}: it is the last voter`;
      }
      return null;
  }
}

export function applyConfChange(config: ClusterConfig, change: ConfChange): ClusterConfig {
  const problem = validateConfChange(config, change);
  assert(problem === null, () => `invalid configuration change: ${problem}`);
  switch (change.type) {
    case 'addLearner':
      return { voters: [...config.voters], learners: [...config.learners, change.nodeId] };
    case 'promote':
      return {
        voters: [...config.voters, change.nodeId],
        learners: config.learners.filter((id) => id !== change.nodeId),
      };
    case 'remove':
      return {
        voters: config.voters.filter((id) => id !== change.nodeId),
        learners: config.learners.filter((id) => id !== change.nodeId),
      };
  }
}

const textEncoder = new TextEncoder();
const textDecoder = new TextDecoder();

/** A configuration entry carries the whole resulting configuration plus the change. */
export interface ConfigEntryPayload {
  readonly change: ConfChange;
  readonly config: ClusterConfig;
}

export function encodeConfigEntry(payload: ConfigEntryPayload): Uint8Array {
  return textEncoder.encode(JSON.stringify(payload));
}

export function decodeConfigEntry(data: Uint8Array): ConfigEntryPayload {
  const parsed: unknown = JSON.parse(textDecoder.decode(data));
  assert(isConfigEntryPayload(parsed), 'malformed configuration entry');
  return parsed;
}

function isConfigEntryPayload(value: unknown): value is ConfigEntryPayload {
  if (typeof value !== 'object' || value === null) return false;
  const candidate = value as { change?: { type?: unknown; nodeId?: unknown }; config?: ClusterConfig };
  return (
    typeof candidate.change?.nodeId === 'string' &&
    ['addLearner', 'promote', 'remove'].includes(String(candidate.change.type)) &&
    Array.isArray(candidate.config?.voters) &&
    Array.isArray(candidate.config?.learners)
  );
}
