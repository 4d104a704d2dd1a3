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
