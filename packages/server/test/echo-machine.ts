/** A group machine for RaftGroup tests: applies an entry as its text, and keeps nothing. */
import type { Entry } from '@quorumq/raft';
import type { GroupMachine } from '../src/raft-group.js';

export class Echo implements GroupMachine<string> {
  apply(entry: Entry): string {
    return Buffer.from(entry.data).toString();
  }
  snapshot(): Uint8Array {
    return new Uint8Array(0);
  }
  restore(): void {}
}
