/**
 * Batching: the commands proposed to one queue within one turn of the event loop (a client's
 * publish batch, several streams' publishes) become one Raft entry (`QueueEntry.batch`, see
 * log-format.ts). Raft, the WAL and the peers then handle one entry, one record and one
 * proposal for all of them, where they handled one per message before; every replica still
 * applies each command on its own, in order. On the queue's leader the entry is proposed there; on
 * another node it is forwarded to the leader as one request.
 *
 * A command alone in its turn is proposed as a plain entry. When the batch's proposal fails
 * before it can have committed (this node stopped leading, or a new leader overwrote it),
 * each command added with `retry` is handed to `fallback` on its own (the general path, which
 * finds the leader and retries); other commands, and every command after any other failure
 * (the outcome is unknown), fail.
 */
import { quorumq } from '@quorumq/proto';
import type { Command } from '@quorumq/queue';

import type { QueueApplyResult } from './queue-replica.js';
import { ENTRY_SPAN } from './queue-replica.js';
import { encodeQueueBatch, encodeQueueEntry, type EntryCommand } from './log-format.js';

import pb = quorumq.v1;

/** A batch is proposed once its messages reach this many bytes (a larger message goes alone). */
export const BATCH_BYTES_MAX = 1024 * 1024;

interface Item extends EntryCommand {
  /** Whether a retriable failure goes to `fallback` (else it fails the command). */
  readonly retry: boolean;
  readonly resolve: (result: QueueApplyResult) => void;
  readonly reject: (error: unknown) => void;
}

export interface EntryBatcherOptions {
  /** The leader clock stamped into each entry (the node's env.now). */
  readonly now: () => number;
  /** Proposes an encoded entry (the batch, or a plain entry for one command). */
  readonly propose: (data: Uint8Array) => Promise<QueueApplyResult>;
  /** Whether a failed proposal is known not to have committed (safe to propose again). */
  readonly retriable: (error: unknown) => boolean;
  /** Proposes one command the general way (after a retriable failure). */
  readonly fallback: (data: Uint8Array) => Promise<QueueApplyResult>;
}

function messageBytes(message: pb.Message.$Properties | Uint8Array | null): number {
  if (message === null) return 0;
  if (message instanceof Uint8Array) return message.byteLength;
  return message.body?.length ?? 0;
}

export class EntryBatcher {
  private items: Item[] = [];
  private bytes = 0;
  private readonly flushNow = (): void => this.flush();

  constructor(private readonly options: EntryBatcherOptions) {}

  /**
   * Adds a command to this turn's batch; resolves with its own result once applied here.
   * With `retry` false, a failure is final whatever it is (the caller handles it).
   */
  add(command: Command, message: pb.Message.$Properties | Uint8Array | null, retry = true, key?: string): Promise<QueueApplyResult> {
    const size = messageBytes(message);
    if (this.items.length > 0 && (this.bytes + size > BATCH_BYTES_MAX || this.items.length >= ENTRY_SPAN)) this.flush();
    return new Promise<QueueApplyResult>((resolve, reject) => {
      if (this.items.length === 0) queueMicrotask(this.flushNow);
      this.items.push({ command, message, key, retry, resolve, reject });
      this.bytes += size;
    });
  }

  /** Proposes what was gathered (also called by the microtask `add` queued). */
  flush(): void {
    const items = this.items;
    if (items.length === 0) return;
    this.items = [];
    this.bytes = 0;
    let data: Uint8Array;
    try {
      data = items.length === 1 ? encodeQueueEntry(items[0]!.command, items[0]!.message, this.options.now(), items[0]!.key) : encodeQueueBatch(items, this.options.now());
    } catch {
      // One command that cannot be encoded fails alone.
      for (const item of items) this.proposeAlone(item);
      return;
    }
    this.options.propose(data).then(
      (result) => {
        if (items.length === 1) {
          items[0]!.resolve(result);
          return;
        }
        // A batch entry the replica could not read replies with one error for all.
        const results = result.batch;
        for (let i = 0; i < items.length; i++) items[i]!.resolve(results?.[i] ?? result);
      },
      (error: unknown) => {
        const retriable = this.options.retriable(error);
        for (const item of items) {
          if (retriable && item.retry) this.proposeAlone(item);
          else item.reject(error);
        }
      },
    );
  }

  /** Proposes one command on its own: the general way, or here without retries. */
  private proposeAlone(item: Item): void {
    let data: Uint8Array;
    try {
      data = encodeQueueEntry(item.command, item.message, this.options.now(), item.key);
    } catch (error) {
      item.reject(error);
      return;
    }
    const proposed = item.retry ? this.options.fallback(data) : this.options.propose(data);
    proposed.then(item.resolve, item.reject);
  }
}
