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
  encodeSnapshotLater,
  SnapshotScratch,
  type DeliveredMessage,
  type Effect,
  type QueueArguments,
  type QueueState,
  type Reply,
} from '@quorumq/queue';
import type { Entry } from '@quorumq/raft';

import { MessageStoreWriteError, type MessageStoreApi } from '@quorumq/storage';

import type { AdoptedBodies } from './adopted-bodies.js';
import type { GroupMachine, SnapshotBuild } from './raft-group.js';
import { IncomingBodies, type FetchBodies, type PreparedSnapshot, type SnapshotSource } from './snapshot-bodies.js';
import { assembleQueueSnapshotRefs, decodeQueueEntry, decodeQueueSnapshot, PackedDeltas, type DecodedCommand, type DecodedQueueEntry } from './log-format.js';
import { ReplicaBodies, type SnapshotListing } from './replica-bodies.js';
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

/**
 * A snapshot is due once the log grew by this many bytes per live message (and at least
 * by `snapshotLogBytesMin`, and by `snapshotInterval` commands). A snapshot costs time in
 * proportion to the live messages (their metadata and references, not their bytes), so
 * this bounds that cost per logged byte; the log it lets stay in memory is this many bytes
 * per live message. See docs/architecture.md ("The message store") for the figures.
 */
export const SNAPSHOT_LOG_BYTES_PER_MESSAGE = 64;

/** Column values the machine's snapshot encoder handles per unit of its step budget (its chunk). */
const MACHINE_VALUES_PER_STEP_UNIT = 2048;

/**
 * A snapshot is also due once the bytes of messages that left but that the latest snapshot
 * lists (kept on disk for it) reach the live bytes and this: a drained queue lets its disk
 * go at its next command, and a queue's disk stays within about twice its live bytes.
 */
export const SNAPSHOT_PINNED_BYTES_MIN = 1024 * 1024;

/**
 * A snapshot lists record ids, so it puts the messages held as views of log entries into the
 * store first (ReplicaBodies.snapshotBegin). Up to 4 MiB at once blocked the event loop for
 * 50-100 ms; a regular snapshot that is due therefore first puts them a slice per turn, and
 * begins once at most a slice is left.
 */
export const SNAPSHOT_HELD_SLICE_BYTES = 512 * 1024;

/** What the leader's replica asks of its node. Called synchronously inside apply. */
export interface QueueEffectSink {
  onEffects(replica: QueueReplica, effects: readonly Effect[]): void;
}

/** Bugs the simulator plants to prove its checkers catch them. Never set in a real node. */
export interface ReplicaTestOnlyBugs {
  /** Save a snapshot without waiting until the bytes it references are durable. */
  readonly snapshotBeforeBodiesDurable?: boolean;
  /** Install a snapshot the leader sent without fetching the bytes it lists (see prepareSnapshot). */
  readonly installWithoutBodies?: boolean;
}

/** Where a replica's message bytes live, and what it reports. */
export interface QueueReplicaOptions {
  /** The queue's creation time (leader clock): its idle lease starts there. */
  readonly createdAt?: number;
  /** Records adopted at the node's start (see AdoptedBodies): a local snapshot takes its own. */
  readonly adopted?: AdoptedBodies | null;
  /** The log grows by at least this many bytes between snapshots (the node's `snapshotLogBytesMin`). */
  readonly snapshotLogBytesMin?: number;
  /** How a follower fetches the bytes of a snapshot it installs from the member that sent it (see snapshot-bodies.ts). */
  readonly fetchBodies?: FetchBodies;
  /** Messages whose bytes a snapshot references but the store does not have (reported, not thrown). */
  readonly onLostBodies?: (replica: QueueReplica, count: number) => void;
  readonly testOnlyBugs?: ReplicaTestOnlyBugs;
}

export class QueueReplica implements GroupMachine<QueueApplyResult> {
  state: QueueState;
  /** Message id -> its bytes (as the publisher sent them) in the node's message store. */
  readonly bodies: ReplicaBodies;
  /** Commands applied since the last snapshot taken or restored (an entry may hold many). */
  private commandsSinceSnapshot = 0;
  /** Bytes of the entries applied since then: how much the log grew. */
  private logBytesSinceSnapshot = 0;
  /** Commands applied since the replica was made, and as of the node's last idle check. */
  private commandsApplied = 0;
  private commandsAtIdleCheck = 0;
  /** The idle check asked for a snapshot (see idleCheck). */
  private idleSnapshotWanted = false;
  /** Restored from a portable snapshot (the bytes inline): replace it with a local one soon. */
  private restoredPortable = false;
  /** The records of a snapshot received from the leader and being prepared (see prepareSnapshot). */
  private incoming: IncomingBodies | null = null;
  /** What the last snapshot prepared here listed and fetched (for the node's log). */
  lastPrepared: Omit<PreparedSnapshot, 'data'> | null = null;
  /** Memory reused from one snapshot taken in steps to the next (see snapshotSteps). */
  private scratch: {
    readonly machine: SnapshotScratch;
    listing: SnapshotListing | null;
    readonly messageIds: PackedDeltas;
    readonly recordIds: PackedDeltas;
  } | null = null;

  constructor(
    readonly name: string,
    readonly groupId: string,
    args: QueueArguments,
    private readonly sink: QueueEffectSink,
    store: MessageStoreApi,
    private readonly options: QueueReplicaOptions = {},
  ) {
    this.state = createQueueState(name, args, options.createdAt ?? 0);
    this.bodies = new ReplicaBodies(store);
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

  private applyCommand(index: number, term: number, now: number, { command, message, key }: DecodedCommand, leader: boolean): QueueApplyResult {
    this.commandsSinceSnapshot += 1;
    this.commandsApplied += 1;
    const result = apply({ index, term, now }, command, this.state);
    this.state = result.state;
    const reply = result.reply;
    // A stored message, and also one refused only to be dead-lettered (reject-publish-dlx):
    // its dead-letter carries the publisher's message. Decided from the result alone, so
    // every replica keeps the same bodies; an at-most-once one is swept once it left.
    if (message !== null && (reply.type === 'enqueued' || (reply.type === 'rejected' && deadLettersItself(result.effects, index)))) {
      this.storeBody(index, message, key);
    }
    let stored: pb.Message | undefined;
    if (reply.type === 'message') stored = this.message(reply.message.messageId);
    if (leader && result.effects.length > 0) this.sink.onEffects(this, result.effects);
    return stored === undefined ? { reply } : { reply, stored };
  }

  /**
   * Keeps a message's bytes: held as a view of its entry until the replica holds a few
   * megabytes or snapshots (see ReplicaBodies), or put into the store at once when it is a
   * fan-out's (its key shares one record between the queues). The store refuses only what
   * no node of this version proposes (a message over its size limit) or anything once it is
   * closing: the message then has no bytes here (reported), and apply goes on: no entry
   * makes it throw.
   */
  private storeBody(id: number, message: Uint8Array, key: string | null): void {
    if (key === null) {
      const lost = this.bodies.hold(id, message);
      if (lost > 0) this.options.onLostBodies?.(this, lost);
      return;
    }
    try {
      this.bodies.put(id, message, key);
    } catch {
      this.options.onLostBodies?.(this, 1);
    }
  }

  /** Drops bodies of messages that left the queue. Cheap when the queue is consumed in order. */
  sweep(): void {
    const messages = this.state.messages;
    this.bodies.sweep((id) => messages.has(id), messages.size);
  }

  /** A stored message's bytes (undefined when it has none, or they cannot be read back). */
  encoded(id: number): Uint8Array | undefined {
    return this.bodies.read(id);
  }

  /**
   * A stored message, decoded (only the leader decodes, when it hands a message out).
   * Proposers check that messages decode; bytes that do not (a log from a faulty writer)
   * read as no message, the same on every replica, rather than failing the apply.
   */
  message(id: number): pb.Message | undefined {
    const bytes = this.bodies.read(id);
    return bytes === undefined ? undefined : decodeStored(bytes);
  }

  /**
   * A snapshot holds the live messages' metadata and references, so its cost grows with
   * their number; it waits until the log grew by SNAPSHOT_LOG_BYTES_PER_MESSAGE bytes per
   * live message (at least `snapshotLogBytesMin`) and by `snapshotInterval` commands: each
   * logged byte then pays O(1) snapshot work, and a queue being drained (small acks) is not
   * snapshotted over and over. A portable snapshot restored here is replaced at once, and
   * so is one whose departed messages hold more disk than the live ones (see
   * SNAPSHOT_PINNED_BYTES_MIN), and one taken while a drained queue still pins records.
   */
  snapshotDue(snapshotInterval: number): boolean {
    if (this.commandsSinceSnapshot === 0) return false;
    if (this.restoredPortable || this.idleSnapshotWanted) return true;
    if (this.bodies.pinnedBytes >= Math.max(SNAPSHOT_PINNED_BYTES_MIN, this.bodies.bytes)) return true;
    // A drained queue lets the last records go (and the store its handle slots) at once:
    // cheap, nothing is listed, and at most one such snapshot follows each regular one.
    if (this.bodies.pinnedBytes > 0 && this.bodies.size === 0) return true;
    if (this.commandsSinceSnapshot < snapshotInterval) return false;
    const logBytes = Math.max(this.options.snapshotLogBytesMin ?? 0, SNAPSHOT_LOG_BYTES_PER_MESSAGE * this.state.messages.size);
    if (this.logBytesSinceSnapshot < logBytes) return false;
    const held = this.bodies.heldBytes;
    if (held <= SNAPSHOT_HELD_SLICE_BYTES) return true;
    // Due: first a slice of the held messages into the store (see SNAPSHOT_HELD_SLICE_BYTES).
    const lost = this.bodies.storeHeld(held - SNAPSHOT_HELD_SLICE_BYTES);
    if (lost > 0) this.options.onLostBodies?.(this, lost);
    return false;
  }

  /**
   * The node's periodic check (see IdleMemory). A replica that applied nothing since the
   * last check gives back the memory it keeps for work: the scratch its snapshots reuse
   * (a copy of the machine's columns at their peak size), and, when `logMayGo` allows it,
   * the entries since its last snapshot, which the Raft log keeps in memory until the next
   * one, by asking for a snapshot once they hold `snapshotLogBytesMin` or more (the node's
   * least log between snapshots, 4 MiB by default; the group takes it: RaftGroup.snapshotIfDue).
   * Returns whether the replica was idle.
   */
  /** The idle check asked for a snapshot that has not begun yet. */
  get idleSnapshotPending(): boolean {
    return this.idleSnapshotWanted;
  }

  idleCheck(logMayGo: () => boolean): boolean {
    const idle = this.commandsApplied === this.commandsAtIdleCheck;
    this.commandsAtIdleCheck = this.commandsApplied;
    if (!idle) return false;
    this.scratch = null;
    if (this.logBytesSinceSnapshot >= (this.options.snapshotLogBytesMin ?? 0) && this.logBytesSinceSnapshot > 0 && logMayGo()) this.idleSnapshotWanted = true;
    return true;
  }

  /** The local form: the machine and references into this node's message store. */
  snapshot(): Uint8Array {
    const build = this.snapshotSteps(false);
    for (;;) {
      const data = build.step(Number.MAX_SAFE_INTEGER);
      if (data !== null) return data;
    }
  }

  /**
   * The local form of a snapshot of the queue as it is now, built a step at a time while
   * the replica goes on applying entries: a copy of the machine's state is encoded (see
   * encodeSnapshotLater), then the messages it holds are listed with their records (see
   * ReplicaBodies.snapshotBegin). A step does about `budget` messages' worth of work.
   */
  snapshotSteps(reuse = true): SnapshotBuild {
    this.commandsSinceSnapshot = 0;
    this.logBytesSinceSnapshot = 0;
    this.restoredPortable = false;
    // The memory of the last snapshot taken in steps is reused (one is taken at a time,
    // see RaftGroup; a snapshot taken at once uses its own), except by the one an idle
    // replica asked for: that memory is what it gives back.
    if (this.idleSnapshotWanted) reuse = false;
    this.idleSnapshotWanted = false;
    const scratch = reuse ? (this.scratch ??= { machine: new SnapshotScratch(), listing: null, messageIds: new PackedDeltas(), recordIds: new PackedDeltas() }) : null;
    const encoding = encodeSnapshotLater(this.state, scratch?.machine ?? null);
    const held = encoding.state.messages;
    const { listing, lost } = this.bodies.snapshotBegin((id) => held.has(id), scratch?.listing);
    if (lost > 0) this.options.onLostBodies?.(this, lost);
    const storeId = this.bodies.store.storeId;
    let messageIds: PackedDeltas;
    let recordIds: PackedDeltas;
    if (scratch !== null) {
      scratch.listing = listing;
      messageIds = scratch.messageIds;
      recordIds = scratch.recordIds;
      messageIds.reset();
      recordIds.reset();
    } else {
      messageIds = new PackedDeltas(held.size);
      recordIds = new PackedDeltas(held.size);
    }
    const list = (id: number, recordId: number): void => {
      messageIds.push(id);
      recordIds.push(recordId);
    };
    let machine: Uint8Array | null = null;
    let listed = false;
    return {
      step: (budget) => {
        // The machine's encoder counts in chunks of column values (a message has several).
        if (machine === null) {
          machine = encoding.step(Math.ceil(budget / MACHINE_VALUES_PER_STEP_UNIT));
          return null;
        }
        if (!listed) {
          listed = listing.step(budget, list);
          if (!listed) return null;
        }
        return assembleQueueSnapshotRefs(machine, storeId, messageIds, recordIds);
      },
    };
  }

  /**
   * Whether everything a snapshot about to be saved references is durable in the store:
   * false when a write was refused (a full disk; the store retries, and the next snapshot
   * will). A fatal store error rejects: the node must restart from its WAL.
   */
  async snapshotDurable(): Promise<boolean> {
    if (this.options.testOnlyBugs?.snapshotBeforeBodiesDurable === true) return true;
    try {
      await this.bodies.store.sync();
      return true;
    } catch (error) {
      if (error instanceof MessageStoreWriteError) return false;
      throw error;
    }
  }

  snapshotSaved(): void {
    this.bodies.snapshotSaved();
  }

  /**
   * A snapshot the leader (`source.from`) sent, held by the Raft core until this resolves
   * with the data to install: the same state with references into this node's message
   * store, once every message it lists has its bytes here, durable (taken from this
   * replica's records or fetched from the sender: see IncomingBodies). A portable snapshot
   * (the bytes inline, from a release before the message store) needs nothing and comes
   * back as it is. Rejects when the data does not decode, a fetch fails or the store refuses
   * a write: the core drops it, and the leader sends one again.
   */
  async prepareSnapshot(data: Uint8Array, source: SnapshotSource): Promise<Uint8Array> {
    const snapshot = decodeQueueSnapshot(data);
    if (snapshot.refs === null || this.options.testOnlyBugs?.installWithoutBodies === true) return data;
    this.incoming ??= new IncomingBodies(this.bodies.store, this.options.fetchBodies ?? noFetch);
    const prepared = await this.incoming.prepare(snapshot, source, this.bodies);
    if (prepared.lost > 0) this.options.onLostBodies?.(this, prepared.lost);
    const { lost, listed, fetched, fetchedBytes } = prepared;
    this.lastPrepared = { lost, listed, fetched, fetchedBytes };
    return prepared.data;
  }

  /** Records held for a snapshot being prepared (see prepareSnapshot). */
  get incomingRecords(): number {
    return this.incoming?.size ?? 0;
  }

  restore(data: Uint8Array): void {
    this.commandsSinceSnapshot = 0;
    this.logBytesSinceSnapshot = 0;
    this.idleSnapshotWanted = false;
    const adopted = this.options.adopted?.take(this.groupId) ?? null;
    // The snapshot the node adopted records for at its start is this one: decoded already.
    const snapshot = adopted !== null && adopted.data === data ? adopted.snapshot : decodeQueueSnapshot(data);
    this.state = decodeSnapshot(snapshot.machine);
    this.bodies.clear();
    // A snapshot prepared here (see prepareSnapshot): its records are held for it.
    const prepared = this.incoming?.take(data) ?? null;
    this.incoming?.release();
    if (snapshot.refs === null) {
      // Portable (saved by a release before the message store).
      adopted?.releaseRest();
      for (const [id, message] of snapshot.messages) this.bodies.put(id, message);
      this.restoredPortable = true;
      return;
    }
    this.restoredPortable = false;
    const { storeId, messageIds, recordIds } = snapshot.refs;
    if (prepared !== null) {
      adopted?.releaseRest();
      this.bodies.reserve(messageIds.length + (messageIds.length >>> 2));
      for (let i = 0; i < messageIds.length; i++) this.bodies.adopt(messageIds[i]!, prepared[i]!);
      this.bodies.restoredFromRefs(messageIds);
      return;
    }
    const ours = storeId === this.bodies.store.storeId ? adopted : null;
    const sameList = ours !== null && ours.snapshot === snapshot;
    let lost = 0;
    // Room for the log since the snapshot too (replayed next): a quarter more.
    this.bodies.reserve(messageIds.length + (messageIds.length >>> 2));
    for (let i = 0; i < messageIds.length; i++) {
      const handle = ours === null ? undefined : sameList ? ours.take(i) : ours.takeRecord(recordIds[i]!);
      if (handle === undefined) lost++;
      else this.bodies.adopt(messageIds[i]!, handle);
    }
    adopted?.releaseRest();
    this.bodies.restoredFromRefs(messageIds);
    if (lost > 0) this.options.onLostBodies?.(this, lost);
  }

  /** The replica is gone (its queue deleted): its records are released. */
  close(): void {
    this.bodies.clear();
    this.incoming?.release();
    this.incoming = null;
  }
}

/** Without peers (a replica on its own, in tests), nothing can be fetched. */
function noFetch(): Promise<never> {
  return Promise.reject(new Error('this replica has no peers to fetch message bytes from'));
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
