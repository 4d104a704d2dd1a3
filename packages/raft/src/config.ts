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

/**
 * The largest index that a majority of voters has, given each voter's match index.
 * Returns 0 when there are no voters.
 */
export function quorumMatchIndex(config: ClusterConfig, matchOf: (id: NodeId) => number): number {
  if (config.voters.length === 0) return 0;
  const matches = config.voters.map(matchOf).sort((x, y) => y - x);
  const index = matches[quorumSize(config) - 1];
  assert(index !== undefined, 'quorum index out of range');
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
