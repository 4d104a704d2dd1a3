/**
 * Where a new queue's replicas go: `size` consecutive nodes of the sorted cluster, starting at
 * a hash of the name salted with the number of queues, so the first member (the preferred
 * leader) differs between queues and leaders spread. The proposing node decides and writes
 * the members into the metadata command, so every replica applies the same placement.
 */
import type { NodeId } from '@quorumq/raft';

export function placeMembers(nodes: Iterable<NodeId>, queueCount: number, name: string, size: number): NodeId[] {
  const sorted = [...nodes].sort();
  let hash = queueCount;
  for (let i = 0; i < name.length; i++) hash = (hash * 31 + name.charCodeAt(i)) >>> 0;
  const start = hash % sorted.length;
  const members: NodeId[] = [];
  for (let i = 0; i < Math.min(size, sorted.length); i++) members.push(sorted[(start + i) % sorted.length]!);
  return members;
}
