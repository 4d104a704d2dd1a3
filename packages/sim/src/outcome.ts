import { RaftInvariantError } from '@quorumq/raft';

import { SafetyViolation, type Property } from './checker.js';
import { CrashedProcess } from './fake-disk.js';

/** A run's trace folded into a hash (two 32-bit FNV-style lanes): equal runs, equal hashes. */
export class TraceHash {
  private a = 0x811c9dc5;
  private b = 0x01000193;

  add(line: string): void {
    for (let i = 0; i < line.length; i++) {
      const c = line.charCodeAt(i);
      this.a = Math.imul(this.a ^ c, 0x01000193) >>> 0;
      this.b = Math.imul(this.b ^ c, 0x5bd1e995) >>> 0;
    }
  }

  get hex(): string {
    return this.a.toString(16).padStart(8, '0') + this.b.toString(16).padStart(8, '0');
  }
}

/** What a run's first failure says: a checker's property, or an invariant the code asserted. */
export function violationOf(failure: unknown): { readonly property: Property; readonly message: string } | null {
  if (failure === null) return null;
  if (failure instanceof SafetyViolation) return { property: failure.property, message: failure.message };
  if (failure instanceof RaftInvariantError) return { property: 'Invariant', message: failure.message };
  return { property: 'Invariant', message: failure instanceof Error ? `${failure.name}: ${failure.message}` : String(failure) };
}

/** A run's first failure: later ones are consequences. A crashed process's errors are not failures. */
export class FirstFailure {
  failure: unknown = null;

  fail(error: unknown): void {
    if (error instanceof CrashedProcess) return;
    if (this.failure === null) this.failure = error;
  }

  /** Runs a check; what it throws is the run's failure (if it is the first). */
  guard(check: () => void): void {
    try {
      check();
    } catch (error) {
      this.fail(error);
    }
  }
}
