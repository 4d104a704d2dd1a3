/**
 * One replica of a queue: the pure queue machine's state plus the message store (bodies,
 * properties and headers by message id). Every replica applies every committed entry; only
 * the leader's replica hands effects to the node.
 *
 * An entry holds one command or a batch of them (see log-format.ts). The machine sees each
 * command as applied at its own position, `log index * ENTRY_SPAN + position in the entry`,
 * which is also the id of the message it enqueues: ids grow with the log, as the machine
 * requires.
 */
import { quorumq } from '@quorumq/proto';
import { deathsToWire, xDeathHeaders } from '@quorumq/proto/deaths';
import {
  apply,
  commandTypeProblem,
  createQueueState,
  decodeSnapshot,
  encodeSnapshot,
  type DeliveredMessage,
  type Effect,
  type QueueArguments,
  type QueueState,
  type Reply,
} from '@quorumq/queue';
import type { Entry } from '@quorumq/raft';

import type { GroupMachine } from './raft-group.js';
import { decodeQueueEntry, decodeQueueSnapshot, encodeQueueSnapshot, type DecodedCommand, type DecodedQueueEntry } from './log-format.js';
import type { OutgoingDelivery } from './wire.js';

import pb = quorumq.v1;

export interface QueueApplyResult {
  readonly reply: Reply;
  /** For `get`: the message handed out (read at apply time, before it may leave). */
  readonly stored?: pb.Message;
  /** For a batch entry: each command's result, in order (`reply` is then 'ok'). */
  readonly batch?: readonly QueueApplyResult[];
}

/** Positions per log entry: a batch holds at most this many commands. */
export const ENTRY_SPAN = 4096;

/** A leader clock beyond this (the year 2200) is not a time but a forged or corrupt entry. */
const CLOCK_MAX_MS = 7_258_118_400_000;

const OK: Reply = { type: 'ok' };

/** What the leader's replica asks of its node. Called synchronously inside apply. */
export interface QueueEffectSink {
  onEffects(replica: QueueReplica, effects: readonly Effect[]): void;
}

export class QueueReplica implements GroupMachine<QueueApplyResult> {
  state: QueueState;
  /** Message id -> the encoded message (as the publisher sent it), in id (= insertion) order. */
  readonly bodies = new Map<number, Uint8Array>();
  bodyBytes = 0;
  /** Commands applied since the last snapshot taken or restored (an entry may hold many). */
  private commandsSinceSnapshot = 0;
  /** Bytes of the entries applied since then: how much the log grew. */
  private logBytesSinceSnapshot = 0;

  constructor(
    readonly name: string,
    readonly groupId: string,
    args: QueueArguments,
    private readonly sink: QueueEffectSink,
    /** The queue's creation time (leader clock): its idle lease starts there. */
    createdAt = 0,
  ) {
    this.state = createQueueState(name, args, createdAt);
  }

  /**
   * Applies one committed entry. An entry it cannot decode (bad protobuf, bad JSON, a format
   * this node does not know, a nested or oversized batch, a clock that is not a time) changes
   * nothing and gets an INVALID_ARGUMENT error reply; a command the machine refuses gets the
   * machine's error reply. Both are the same on every replica: no entry makes apply throw.
   */
  apply(entry: Entry, leader: boolean): QueueApplyResult {
    this.logBytesSinceSnapshot += entry.data.byteLength;
    const decoded = checkQueueEntry(entry.data);
    if (typeof decoded === 'string') return { reply: { type: 'error', code: 'INVALID_ARGUMENT', message: `malformed queue entry: ${decoded}` } };
    const { commands, now } = decoded;
    const base = entry.index * ENTRY_SPAN;
    if (!decoded.batch) return this.applyCommand(base, entry.term, now, commands[0]!, leader);
    const batch = new Array<QueueApplyResult>(commands.length);
    for (let i = 0; i < commands.length; i++) batch[i] = this.applyCommand(base + i, entry.term, now, commands[i]!, leader);
    return { reply: OK, batch };
  }

  private applyCommand(index: number, term: number, now: number, { command, message }: DecodedCommand, leader: boolean): QueueApplyResult {
    this.commandsSinceSnapshot += 1;
    const result = apply({ index, term, now }, command, this.state);
    this.state = result.state;
    const reply = result.reply;
    // A stored message, and also one refused only to be dead-lettered (reject-publish-dlx):
    // its dead-letter carries the publisher's message. Decided from the result alone, so
    // every replica keeps the same bodies; an at-most-once one is swept once it left.
    if (message !== null && (reply.type === 'enqueued' || (reply.type === 'rejected' && deadLettersItself(result.effects, index)))) {
      this.bodies.set(index, message);
      this.bodyBytes += message.byteLength;
    }
    let stored: pb.Message | undefined;
    if (reply.type === 'message') stored = this.message(reply.message.messageId);
    if (leader && result.effects.length > 0) this.sink.onEffects(this, result.effects);
    return stored === undefined ? { reply } : { reply, stored };
  }

  /** Drops bodies of messages that left the queue. Cheap when the queue is consumed in order. */
  sweep(): void {
    const messages = this.state.messages;
    if (this.bodies.size <= messages.size) return;
    for (const id of this.bodies.keys()) {
      if (messages.has(id)) break;
      this.deleteBody(id);
    }
    if (this.bodies.size > 2 * messages.size + 1024) {
      for (const id of [...this.bodies.keys()]) if (!messages.has(id)) this.deleteBody(id);
    }
  }

  /**
   * A stored message, decoded (only the leader decodes, when it hands a message out).
   * Proposers check that messages decode; bytes that do not (a log from a faulty writer)
   * read as no message, the same on every replica, rather than failing the apply.
   */
  message(id: number): pb.Message | undefined {
    const bytes = this.bodies.get(id);
    return bytes === undefined ? undefined : decodeStored(bytes);
  }

  private deleteBody(id: number): void {
    const message = this.bodies.get(id);
    if (message === undefined) return;
    this.bodies.delete(id);
    this.bodyBytes -= message.byteLength;
  }

  /**
   * A snapshot carries the live messages, so it waits until the log grew by twice their
   * bytes (and by `snapshotInterval` commands): each logged byte then pays O(1) snapshot
   * work, and the log stays within about three times the live data. Acks and other small
   * commands grow the log little, so a queue being drained is not snapshotted over and over.
   */
  snapshotDue(snapshotInterval: number): boolean {
    return this.commandsSinceSnapshot >= snapshotInterval && this.logBytesSinceSnapshot >= 2 * this.bodyBytes;
  }

  snapshot(): Uint8Array {
    this.commandsSinceSnapshot = 0;
    this.logBytesSinceSnapshot = 0;
    this.sweep();
    const live = [...this.bodies].filter(([id]) => this.state.messages.has(id));
    return encodeQueueSnapshot(encodeSnapshot(this.state), live);
  }

  restore(data: Uint8Array): void {
    this.commandsSinceSnapshot = 0;
    this.logBytesSinceSnapshot = 0;
    const snapshot = decodeQueueSnapshot(data);
    this.state = decodeSnapshot(snapshot.machine);
    this.bodies.clear();
    this.bodyBytes = 0;
    for (const [id, message] of snapshot.messages) {
      this.bodies.set(id, message);
      this.bodyBytes += message.byteLength;
    }
  }
}

/** Whether the effects dead-letter the message the command itself enqueued (id = its position). */
function deadLettersItself(effects: readonly Effect[], id: number): boolean {
  for (const effect of effects) if (effect.type === 'deadLetter' && effect.messageId === id) return true;
  return false;
}

/**
 * Decodes an entry for apply, or says why it cannot be applied: undecodable bytes, a batch
 * of more than ENTRY_SPAN commands (their positions would overlap the next entry's), or a
 * leader clock that is not a time.
 */
export function checkQueueEntry(data: Uint8Array): DecodedQueueEntry | string {
  let decoded: DecodedQueueEntry;
  try {
    decoded = decodeQueueEntry(data);
  } catch (error) {
    return error instanceof Error ? error.message : String(error);
  }
  if (decoded.commands.length > ENTRY_SPAN) return `a batch of ${decoded.commands.length} commands (at most ${ENTRY_SPAN})`;
  if (!Number.isFinite(decoded.now) || decoded.now < 0 || decoded.now > CLOCK_MAX_MS) return `the leader clock ${decoded.now} is not a time`;
  return decoded;
}

/**
 * Checks an entry a peer forwarded before it is proposed: everything `checkQueueEntry`
 * checks, plus that each command is one of the machine's types and each message decodes
 * (no node of this version proposes anything else). Returns the problem, or null. A
 * command's own fields are the machine's to check: a bad one gets its error reply without
 * failing the other commands of its batch (other clients' publishes).
 */
export function forwardedEntryProblem(data: Uint8Array): string | null {
  const decoded = checkQueueEntry(data);
  if (typeof decoded === 'string') return decoded;
  for (const [i, { command, message }] of decoded.commands.entries()) {
    const problem = commandTypeProblem(command);
    const where = decoded.batch ? `command ${i}: ` : '';
    if (problem !== null) return `${where}${problem.message}`;
    if (message === null) continue;
    try {
      pb.Message.decode(message);
    } catch (error) {
      return `${where}the message does not decode (${error instanceof Error ? error.message : String(error)})`;
    }
  }
  return null;
}

/** A stored message's bytes decoded, or undefined when they do not decode (see QueueReplica.message). */
function decodeStored(bytes: Uint8Array): pb.Message | undefined {
  try {
    return pb.Message.decode(bytes);
  } catch {
    return undefined;
  }
}

/** The broker-set fields of a delivery. */
function deliveryFields(queue: string, consumerTag: string, delivered: DeliveredMessage): pb.Delivery.$Properties {
  return {
    queue,
    consumerTag,
    deliveryTag: delivered.deliveryTag,
    deliveryCount: delivered.deliveryCount,
    redelivered: delivered.redelivered,
    exchange: delivered.exchange,
    routingKeys: [...delivered.routingKeys],
  };
}

/**
 * A delivery on a consume stream: the stored bytes go out unchanged (see wire.ts) unless
 * the message has death records, which are added to a decoded copy.
 */
export function streamDeliveryOf(queue: string, consumerTag: string, delivered: DeliveredMessage, stored: Uint8Array | undefined): OutgoingDelivery {
  if (delivered.deaths === null && stored !== undefined) return { ...deliveryFields(queue, consumerTag, delivered), encodedMessage: stored };
  return deliveryOf(queue, consumerTag, delivered, stored === undefined ? undefined : decodeStored(stored));
}

/**
 * The delivery a consumer receives: the stored message with the broker-set fields, its death
 * records (the machine's, not any the stored copy had) and their x-death headers (spec 5).
 */
export function deliveryOf(
  queue: string,
  consumerTag: string,
  delivered: DeliveredMessage,
  stored: pb.Message.$Properties | undefined,
): pb.Delivery.$Properties {
  const message: pb.Message.$Properties = { ...(stored ?? { body: new Uint8Array(0) }), ...deathsToWire(delivered.deaths) };
  if (delivered.deaths !== null) message.headers = { ...(stored?.headers ?? {}), ...xDeathHeaders(delivered.deaths) };
  return { ...deliveryFields(queue, consumerTag, delivered), message };
}
