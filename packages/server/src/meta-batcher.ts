/**
 * Batching of metadata proposals on the metadata group's leader, as EntryBatcher does for a
 * queue: the commands proposed within one turn of the event loop (this node's declares,
 * deletes and bindings, and those other nodes forwarded here) become one Raft entry,
 * `{ type: 'batch', commands }`, which every replica applies command by command, each with
 * its own reply (MetaMachine.apply). Raft, the WAL and the peers then handle one entry for
 * them all. A command alone in its turn is proposed as a plain entry.
 *
 * Two commands naming the same queue never share a batch (the second starts the next one):
 * a queue created by an entry is named by that entry's index, and a queue deleted and
 * declared again in one entry would reuse the old group's id (the machine refuses that).
 *
 * When the entry fails, every command of it fails with that error: the caller (the router's
 * retry loop) treats it as the failure of its own proposal, as before batching.
 */
import { encodeJson } from './json-codec.js';
import type { MetaCommand, MetaReply } from './meta-machine.js';

/** Commands per batch entry at most (well under META_BATCH_MAX, which replicas enforce). */
export const META_BATCH_COMMANDS = 256;

interface Item {
  readonly command: MetaCommand;
  readonly deadline: number;
  readonly resolve: (reply: MetaReply) => void;
  readonly reject: (error: unknown) => void;
}

/** The queue a command declares or deletes, if any. */
function queueNamed(command: MetaCommand): string | null {
  return command.type === 'declareQueue' || command.type === 'deleteQueue' ? command.name : null;
}

export class MetaBatcher {
  private items: Item[] = [];
  private readonly names = new Set<string>();
  private readonly flushNow = (): void => this.flush();

  /** @param propose proposes an encoded entry on the local metadata group (its leader), failing after `deadline` */
  constructor(private readonly propose: (data: Uint8Array, deadline: number) => Promise<MetaReply>) {}

  /** Adds a checked command to this turn's entry; resolves with its own reply once applied here. */
  add(command: MetaCommand, deadline: number): Promise<MetaReply> {
    const name = queueNamed(command);
    if (this.items.length >= META_BATCH_COMMANDS || (name !== null && this.names.has(name))) this.flush();
    return new Promise<MetaReply>((resolve, reject) => {
      if (this.items.length === 0) queueMicrotask(this.flushNow);
      this.items.push({ command, deadline, resolve, reject });
      if (name !== null) this.names.add(name);
    });
  }

  /** Proposes what was gathered (also called by the microtask `add` queued). */
  flush(): void {
    const items = this.items;
    if (items.length === 0) return;
    this.items = [];
    this.names.clear();
    const only = items.length === 1 ? items[0]! : null;
    let data: Uint8Array;
    try {
      data = encodeJson(only !== null ? only.command : { type: 'batch', commands: items.map((item) => item.command) });
    } catch (error) {
      for (const item of items) item.reject(error);
      return;
    }
    // The entry gives up when the first of its callers would.
    const deadline = Math.min(...items.map((item) => item.deadline));
    this.propose(data, deadline).then(
      (reply) => {
        if (only !== null) {
          only.resolve(reply);
          return;
        }
        // An entry the machine could not read as a batch replies with one error for all.
        for (let i = 0; i < items.length; i++) items[i]!.resolve(reply.batch?.[i] ?? reply);
      },
      (error: unknown) => {
        for (const item of items) item.reject(error);
      },
    );
  }
}
