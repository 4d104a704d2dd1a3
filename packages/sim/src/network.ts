import type { NodeId, Random } from '@quorumq/raft';
import type { Scheduler } from './scheduler.js';
import type { GroupMessage } from './sim-node.js';

export interface NetworkFaults {
  /** Probability that a message is dropped. */
  dropRate: number;
  /** Probability that a message is delivered twice. */
  duplicateRate: number;
  /** Base one-way latency and random extra latency (which also reorders messages). */
  latencyMs: number;
  jitterMs: number;
}

export const HEALTHY_NETWORK: NetworkFaults = { dropRate: 0, duplicateRate: 0, latencyMs: 1, jitterMs: 2 };

export interface NetworkStats {
  sent: number;
  dropped: number;
  duplicated: number;
  cut: number;
}

/**
 * A fake network between simulated nodes: per-message latency with jitter (reordering),
 * drops, duplicates and directed link cuts (so partitions may be asymmetric).
 */
export class SimNetwork {
  faults: NetworkFaults = HEALTHY_NETWORK;
  private readonly cutLinks = new Set<string>();
  readonly stats: NetworkStats = { sent: 0, dropped: 0, duplicated: 0, cut: 0 };

  constructor(
    private readonly scheduler: Scheduler,
    private readonly random: Random,
    private readonly deliver: (envelope: GroupMessage) => void,
    private readonly trace: (line: string) => void,
  ) {}

  send(envelope: GroupMessage): void {
    const { message } = envelope;
    this.stats.sent++;
    if (this.isCut(message.from, message.to)) {
      this.stats.cut++;
      return;
    }
    if (chance(this.random, this.faults.dropRate)) {
      this.stats.dropped++;
      this.trace(`drop ${describe(envelope)}`);
      return;
    }
    const copies = chance(this.random, this.faults.duplicateRate) ? 2 : 1;
    if (copies === 2) this.stats.duplicated++;
    for (let copy = 0; copy < copies; copy++) {
      const delay = this.faults.latencyMs + this.random.nextInt(this.faults.jitterMs + 1);
      this.scheduler.after(delay, `deliver ${describe(envelope)}`, () => {
        // A partition that started while the message was in flight also stops it.
        if (this.isCut(message.from, message.to)) {
          this.stats.cut++;
          return;
        }
        this.deliver(envelope);
      });
    }
  }

  cut(from: NodeId, to: NodeId): void {
    this.cutLinks.add(`${from}>${to}`);
  }

  isCut(from: NodeId, to: NodeId): boolean {
    return this.cutLinks.has(`${from}>${to}`);
  }

  heal(): void {
    this.cutLinks.clear();
  }

  describeCuts(): string {
    return [...this.cutLinks].sort().join(',');
  }
}

export function chance(random: Random, probability: number): boolean {
  if (probability <= 0) return false;
  return random.nextInt(1_000_000) < probability * 1_000_000;
}

export function describe(envelope: GroupMessage): string {
  const { message } = envelope;
  const base = `${envelope.groupId} ${message.type} ${message.from}->${message.to} t${message.term}`;
  switch (message.type) {
    case 'append':
      return `${base} prev=${message.prevLogIndex}/${message.prevLogTerm} n=${message.entries.length} c=${message.commit}`;
    case 'appendResp':
      return `${base} ${message.reject ? 'reject' : 'ok'} i=${message.index}`;
    case 'snapshot':
      return `${base} s=${message.meta.index} off=${message.offset}`;
    case 'voteResp':
    case 'preVoteResp':
      return `${base} ${message.reject ? 'reject' : 'grant'}`;
    default:
      return base;
  }
}
