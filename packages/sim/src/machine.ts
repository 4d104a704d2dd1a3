import type { Entry } from '@quorumq/raft';

const decoder = new TextDecoder();
const encoder = new TextEncoder();

/**
 * The replicated state machine of the simulation: the ordered list of client proposal
 * ids it applied. Small enough to snapshot as JSON, rich enough to compare replicas.
 */
export class ProposalLog {
  private applied: string[] = [];

  apply(entry: Entry): string | null {
    if (entry.type !== 'normal' || entry.data.byteLength === 0) return null;
    const id = decoder.decode(entry.data);
    this.applied.push(id);
    return id;
  }

  snapshot(): Uint8Array {
    return encoder.encode(JSON.stringify(this.applied));
  }

  /**
   * A snapshot of the log as it is now, handed over after a few steps, as a long queue's is
   * (see GroupMachine.snapshotSteps): entries keep being applied, and snapshots installed,
   * while it is taken.
   */
  snapshotSteps(): { step(budget: number): Uint8Array | null } {
    const data = this.snapshot();
    let left = Math.min(20, 1 + Math.floor(this.applied.length / 16));
    return { step: () => (--left > 0 ? null : data) };
  }

  restore(data: Uint8Array): void {
    this.applied = data.byteLength === 0 ? [] : (JSON.parse(decoder.decode(data)) as string[]);
  }

  ids(): readonly string[] {
    return this.applied;
  }
}

export function encodeProposal(id: string): Uint8Array {
  return encoder.encode(id);
}
