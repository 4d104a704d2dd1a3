/**
 * Where a proposal goes: into this turn's batch entry of a queue this node leads, or to the
 * group's leader elsewhere (forwarded, as one batch entry per queue and turn), retried while
 * the leader is unknown or moves, until the request timeout. Also the receiving end of
 * forwarded proposals (Peer.Propose), metadata proposals, and the metadata read barrier.
 */
import { replicaNodes } from './queue-membership.js';
import type { ClusterDirectory } from './cluster-directory.js';
import { quorumq } from '@quorumq/proto';
import { REASON_TRAILER } from '@quorumq/proto/errors';
import type { Command, Reply } from '@quorumq/queue';
import type { NodeId } from '@quorumq/raft';

import type { NodeConfig } from './config.js';
import { withCompactionKey } from './compaction-key.js';
import { EntryBatcher } from './entry-batcher.js';
import { BrokerError, Status, invalidArgument, isServiceError, notFound, unavailable, Reason } from './errors.js';
import { decodeJson, encodeJson } from './json-codec.js';
import { META_GROUP, queueGroupId, type LocalQueue } from './local-queue.js';
import { MetaBarrier } from './meta-barrier.js';
import { MetaBatcher } from './meta-batcher.js';
import { decodeMetaCommand, parseMetaCommand, type ParsedMetaCommand } from './meta-command.js';
import { malformedCommand, type MetaCommand, type MetaMachine, type MetaReply, type QueueDefinition } from './meta-machine.js';
import type { NodeMetrics } from './metrics.js';
import { sleep, type NodeEnv, type Timer } from './node-env.js';
import type { PeerLink } from './peer-link.js';
import { forwardedEntryProblem, type QueueApplyResult } from './queue-replica.js';
import type { RaftGroup } from './raft-group.js';
import { ForwardError } from './transport.js';
import { decodeQueueEntry, stampEntry } from './wire.js';

import pb = quorumq.v1;

/** Forwarding batchers kept at most (one per queue name; a batcher in use survives a reset). */
const FORWARDING_BATCHERS_MAX = 10_000;

export interface RouterParts {
  readonly env: NodeEnv;
  readonly config: Pick<NodeConfig, 'nodeId' | 'requestTimeoutMs' | 'electionTicks' | 'tickMs'>;
  /** The cluster's nodes now (cluster-directory.ts). */
  readonly directory: Pick<ClusterDirectory, 'ids' | 'has' | 'names' | 'peerAddress'>;
  readonly link: Pick<PeerLink, 'propose'>;
  readonly metrics: NodeMetrics;
  readonly meta: MetaMachine;
  readonly metaGroup: RaftGroup<MetaReply>;
  /** The queue replica this node runs for `name`, if any. */
  localQueue(name: string): LocalQueue | undefined;
  /** The group this node runs with this id, if any. */
  groupById(groupId: string): RaftGroup<unknown> | null;
  isStopping(): boolean;
}

type Located<G> = { groupId: string; local: G | null; members: readonly NodeId[] };
type Leading = Pick<RaftGroup<unknown>, 'isLeader' | 'leaderId' | 'isMember' | 'whenLeaderOtherThan'>;

export class ProposalRouter {
  /** Batches of commands to queues this node does not lead, by queue name. */
  private readonly forwarding = new Map<string, EntryBatcher>();
  readonly barrier: MetaBarrier;
  /** This turn's metadata commands, proposed as one entry while this node leads the metadata group. */
  private readonly metaBatcher: MetaBatcher;
  /** Callers waiting for the metadata to be applied here up to an index. */
  private metaWaiters: Array<{ readonly index: number; readonly resolve: () => void; readonly timer: Timer }> = [];

  constructor(private readonly parts: RouterParts) {
    this.barrier = new MetaBarrier(() => this.proposeMeta({ type: 'barrier' }).then(() => undefined));
    this.metaBatcher = new MetaBatcher((data, deadline) => parts.metaGroup.propose(data, deadline, 'the metadata group'));
  }

  private get nodeId(): NodeId {
    return this.parts.config.nodeId;
  }

  /** The batcher of a queue this node leads: proposes there, falls back to the general path. */
  batcherFor(definition: QueueDefinition, group: RaftGroup<QueueApplyResult>): EntryBatcher {
    const what = `queue ${JSON.stringify(definition.name)}`;
    const { env, config } = this.parts;
    return new EntryBatcher({
      now: () => env.now(),
      propose: (data) => group.propose(data, env.now() + config.requestTimeoutMs, what),
      retriable: (error) => retriable(error) && !this.parts.isStopping(),
      fallback: (data) => this.proposeQueueAnywhere(definition.name, data),
    });
  }

  /**
   * Proposes to a queue group this node leads, in this turn's batch entry; fails (no retry
   * elsewhere) when this node does not lead it or the entry does not commit in time.
   */
  proposeLocal(queue: LocalQueue, command: Command, message: pb.Message.$Properties | Uint8Array | null = null): Promise<QueueApplyResult> {
    return queue.batcher.add(command, message, false);
  }

  /**
   * Proposes a command to a queue's group wherever its leader is, and waits until it is
   * applied there (committed on a majority). Retries while the leader is unknown or moves,
   * until the request timeout.
   */
  proposeQueue(name: string, command: Command, message: pb.Message.$Properties | Uint8Array | null = null, key?: string): Promise<Reply> {
    return this.proposeQueueFull(name, command, message, key).then((result) => result.reply);
  }

  /** As proposeQueue, with the whole result; `key` is the fan-out key of a message routed to several queues. */
  proposeQueueFull(name: string, command: Command, message: pb.Message.$Properties | Uint8Array | null = null, key?: string): Promise<QueueApplyResult> {
    // Spec 9: an enqueue to a compacting queue carries the message's key (per target queue).
    command = withCompactionKey(this.parts.meta.queues.get(name)?.args, command, message);
    const local = this.parts.localQueue(name);
    // The common case: this node leads the queue. The command joins this turn's batch entry
    // (see EntryBatcher, which also retries the general way when leadership just moved).
    if (local !== undefined && local.group.isLeader && !this.parts.isStopping() && this.parts.meta.queues.has(name)) return local.batcher.add(command, message, true, key);
    // Elsewhere: this turn's commands to the queue go to its leader as one batch entry
    // (proposeQueueAnywhere finds the leader and retries; its failures are final).
    let batcher = this.forwarding.get(name);
    if (batcher === undefined) {
      if (this.forwarding.size >= FORWARDING_BATCHERS_MAX) this.forwarding.clear();
      batcher = new EntryBatcher({
        now: () => this.parts.env.now(),
        propose: (data) => this.proposeQueueAnywhere(name, data),
        retriable: () => false,
        fallback: (data) => this.proposeQueueAnywhere(name, data),
      });
      this.forwarding.set(name, batcher);
    }
    return batcher.add(command, message, true, key);
  }

  /** The queue's definition; when this node does not know it, after catching up with the metadata. */
  async queueDefinition(name: string): Promise<QueueDefinition> {
    let definition = this.parts.meta.queues.get(name);
    if (definition === undefined) {
      await this.barrier.wait();
      definition = this.parts.meta.queues.get(name);
    }
    if (definition === undefined) throw notFound(Reason.QUEUE_NOT_FOUND, `queue ${JSON.stringify(name)} does not exist`);
    return definition;
  }

  /** Proposes an encoded queue entry on the queue's leader, wherever it is (see withLeader). */
  private async proposeQueueAnywhere(name: string, data: Uint8Array): Promise<QueueApplyResult> {
    const { meta, env } = this.parts;
    if (!meta.queues.has(name)) await this.queueDefinition(name);
    const what = `queue ${JSON.stringify(name)}`;
    return this.withLeader(
      () => {
        const definition = meta.queues.get(name);
        if (definition === undefined) throw notFound(Reason.QUEUE_NOT_FOUND, `queue ${JSON.stringify(name)} does not exist`);
        return { groupId: queueGroupId(definition), local: this.parts.localQueue(name)?.group ?? null, members: replicaNodes(definition) };
      },
      async (group, deadline) => {
        // A copy for each proposal: an earlier attempt's entry may still be in this node's
        // log (proposed, then leadership moved), and stamping its bytes in place would change
        // an entry already written and sent (its replicas would then differ).
        const entry = new Uint8Array(data);
        stampEntry(entry, env.now());
        return group.propose(entry, deadline, what);
      },
      data,
      what,
      () => isDeduplicated(data),
    );
  }

  /**
   * Proposes a metadata command and waits until this node has applied it too, so that the
   * next request this node serves (a publish right after a declare) sees the change (not on
   * a joining node, below).
   */
  async proposeMeta(command: MetaCommand): Promise<MetaReply> {
    const checked = this.checkMetaCommand(parseMetaCommand(command));
    if (!checked.ok) return malformedCommand(checked.problem);
    // A node that is no member of the metadata group (a joining node not added yet, or a
    // removed one) knows nothing of the cluster's metadata: it places and checks nothing.
    // Only its own addition may be made through it ("add it from anywhere").
    if (!this.parts.metaGroup.isMember && command.type !== 'addNode') {
      throw unavailable(
        Reason.METADATA_BEHIND,
        'this node is not a member of the cluster (a node started with --join and not added yet, or a removed one): it has no metadata; ask another node',
        null,
      );
    }
    const data = encodeJson(command);
    const reply = await this.withLeader(
      () => ({ groupId: META_GROUP, local: this.parts.metaGroup, members: this.parts.directory.ids() }),
      // On the leader, this turn's commands share one entry.
      async (_group, deadline) => this.metaBatcher.add(checked.command, deadline),
      data,
      'the metadata group',
      () => command.type === 'barrier',
    );
    // A joining node's replica applies nothing until the node is added: its own addition
    // does not wait for a change it may not apply in time.
    if (reply.index !== undefined && this.parts.metaGroup.isMember) await this.metaApplied(reply.index);
    return reply;
  }

  /**
   * A metadata command's shape (meta-command.ts), and what only the proposer can check
   * against its configuration: a new queue's replicas are nodes of this cluster.
   */
  private checkMetaCommand(parsed: ParsedMetaCommand): ParsedMetaCommand {
    if (!parsed.ok) return parsed;
    const command = parsed.command;
    if (command.type !== 'declareQueue' || command.passive) return parsed;
    const stranger = command.members.find((member) => !this.parts.directory.names(member));
    return stranger === undefined ? parsed : { ok: false, problem: `declareQueue: ${stranger} is not a node of this cluster` };
  }

  /** Resolves once this node applied the metadata up to `index` (bounded by the request timeout). */
  private metaApplied(index: number): Promise<void> {
    if (this.parts.metaGroup.appliedIndex >= index) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const timer = this.parts.env.after(this.parts.config.requestTimeoutMs, () => {
        this.metaWaiters = this.metaWaiters.filter((w) => w.resolve !== resolve);
        reject(unavailable(Reason.METADATA_BEHIND, `this node has not caught up with the metadata (index ${index}) in time`));
      });
      this.metaWaiters.push({ index, resolve, timer });
    });
  }

  /** The metadata group applied entries here: wakes whoever waits for them. */
  onMetaApplied(): void {
    if (this.metaWaiters.length === 0) return;
    const applied = this.parts.metaGroup.appliedIndex;
    const ready = this.metaWaiters.filter((w) => w.index <= applied);
    if (ready.length === 0) return;
    this.metaWaiters = this.metaWaiters.filter((w) => w.index > applied);
    for (const waiter of ready) {
      waiter.timer.cancel();
      waiter.resolve();
    }
  }

  /**
   * Peer.Propose: a forwarded command for a group this node should lead. The bytes come
   * from another node: they are checked (INVALID_ARGUMENT, nothing proposed) before they
   * can reach the log.
   */
  async handleForwarded(groupId: string, command: Uint8Array): Promise<Uint8Array> {
    const group = this.parts.groupById(groupId);
    if (group === null) throw new BrokerError(Status.UNAVAILABLE, Reason.UNKNOWN_GROUP, `this node has no replica of ${groupId}`);
    if (!group.isLeader) {
      throw new ForwardError(Status.UNAVAILABLE, Reason.NOT_LEADER, `this node does not lead ${groupId}`, group.leaderId);
    }
    const now = this.parts.env.now();
    if (groupId === META_GROUP) {
      const checked = this.checkMetaCommand(decodeMetaCommand(command));
      if (!checked.ok) throw invalidArgument(`refused a forwarded metadata command: ${checked.problem}`, Reason.MALFORMED_COMMAND);
      return encodeJson(await this.metaBatcher.add(checked.command, now + this.parts.config.requestTimeoutMs));
    }
    const problem = forwardedEntryProblem(command);
    if (problem !== null) throw invalidArgument(`refused a forwarded entry for ${groupId}: ${problem}`, Reason.MALFORMED_COMMAND);
    stampEntry(command, now);
    const reply = await group.propose(command, now + this.parts.config.requestTimeoutMs);
    return encodeJson(reply);
  }

  /**
   * How long a forwarded request that cannot be re-sent safely still waits for its old
   * leader's answer after another node was elected: a few election timeouts, time for a
   * deposed leader that still runs to learn whether the entry committed.
   */
  private leaderMovedGraceMs(): number {
    return 4 * this.parts.config.electionTicks * this.parts.config.tickMs;
  }

  /** The shared retry loop of proposals: local when this node leads, else forwarded. */
  private async withLeader<R, G extends Leading>(
    locate: () => Located<G>,
    /** Proposes on the local leader; the proposal fails as OUTCOME_UNKNOWN after `deadline`. */
    proposeHere: (group: G, deadline: number) => Promise<R>,
    forwardData: Uint8Array,
    what: string,
    /** Whether `forwardData` may be sent to a new leader while the old one may still commit it. */
    resendable: () => boolean,
  ): Promise<R> {
    const { env, config } = this.parts;
    const deadline = env.now() + config.requestTimeoutMs;
    let hint: NodeId | null = null;
    let attempt = 0;
    let lastError: unknown = null;
    while (env.now() < deadline && !this.parts.isStopping()) {
      const { groupId, local, members } = locate();
      try {
        if (local?.isLeader) return await proposeHere(local, deadline);
        // Without a replica here, or with one that is no member yet (a joining node's: it hears
        // from no leader), the members are asked in turn; one that does not lead names its leader.
        const leader = local?.leaderId ?? hint ?? (local === null || !local.isMember ? (members[attempt % members.length] ?? null) : null);
        if (leader !== null && leader !== this.nodeId) {
          const remaining = Math.max(100, deadline - env.now());
          const forwarded = this.parts.link.propose(leader, groupId, forwardData, remaining);
          const reply = local === null ? await forwarded : await this.untilLeaderMoves(forwarded, local, leader, resendable);
          if (reply !== LEADER_MOVED) return decodeJson<R>(reply);
          // Another node was elected while the old leader held the request (it may be paused
          // or cut off). What it was sent may still commit there, so a request whose
          // re-sending is deduplicated goes to the new leader at once; any other waited a
          // grace period for the old leader's own answer (a deposed leader that runs soon
          // learns the entry's fate) and fails now, its outcome unknown.
          if (!resendable()) {
            throw new BrokerError(
              Status.UNAVAILABLE,
              Reason.OUTCOME_UNKNOWN,
              `${what}: leadership moved from ${leader} while it held this request; the outcome is unknown (publishes with a producer id are re-sent safely)`,
            );
          }
          this.parts.metrics.forwardsRerouted.inc();
          hint = local?.leaderId ?? null;
          attempt += 1;
          continue;
        }
      } catch (error) {
        lastError = error;
        if (isServiceError(error) && error.code === Status.DEADLINE_EXCEEDED) {
          throw new BrokerError(Status.UNAVAILABLE, Reason.OUTCOME_UNKNOWN, `${what} did not answer within the request timeout; the outcome is unknown`);
        }
        if (!retriable(error)) {
          if (error instanceof ForwardError) throw new BrokerError(error.code, error.reason, error.message);
          throw error;
        }
        hint = error instanceof ForwardError && error.leaderId !== this.nodeId ? error.leaderId : null;
      }
      attempt += 1;
      await sleep(env, Math.min(200, 20 * attempt));
    }
    const known = locate().local?.leaderId ?? null;
    const detail = lastError instanceof Error ? `: ${lastError.message}` : isServiceError(lastError) ? `: ${lastError.details}` : '';
    throw unavailable(Reason.NO_QUORUM, `no leader of ${what} answered within ${config.requestTimeoutMs} ms${detail}`, known === null ? null : (this.parts.directory.peerAddress(known) ?? null));
  }

  /**
   * The forwarded request's reply, or LEADER_MOVED once `group` knows a leader other than
   * `leader`: at once for a resendable request, a grace period later for any other (if the
   * old leader has not answered by then).
   */
  private async untilLeaderMoves(
    forwarded: Promise<Uint8Array>,
    group: Leading,
    leader: NodeId,
    resendable: () => boolean,
  ): Promise<Uint8Array | typeof LEADER_MOVED> {
    const watch = group.whenLeaderOtherThan(leader);
    let timer: Timer | undefined;
    try {
      const moved = watch.moved.then(async (yes): Promise<Uint8Array | typeof LEADER_MOVED> => {
        if (!yes) return forwarded;
        if (resendable()) return LEADER_MOVED;
        await new Promise<void>((resolve) => (timer = this.parts.env.after(this.leaderMovedGraceMs(), resolve)));
        return LEADER_MOVED;
      });
      return await Promise.race<Uint8Array | typeof LEADER_MOVED>([forwarded, moved]);
    } finally {
      watch.cancel();
      timer?.cancel();
      forwarded.catch(() => {}); // a late failure of the abandoned forward is not this request's
    }
  }
}

const LEADER_MOVED = Symbol('leader moved');

/** Whether every command of a queue entry is an enqueue the queue deduplicates (producer id and sequence). */
function isDeduplicated(data: Uint8Array): boolean {
  let commands: ReturnType<typeof decodeQueueEntry>['commands'];
  try {
    commands = decodeQueueEntry(data).commands;
  } catch {
    return false;
  }
  return commands.length > 0 && commands.every(({ command }) => command.type === 'enqueue' && command.producerId !== undefined && command.sequence !== undefined);
}

/** Whether a failed proposal is known not to have committed, so it may be proposed again. */
export function retriable(error: unknown): boolean {
  if (error instanceof BrokerError || error instanceof ForwardError) return error.code === Status.UNAVAILABLE && error.reason !== Reason.OUTCOME_UNKNOWN;
  if (isServiceError(error) && error.code === Status.UNAVAILABLE) return error.metadata.get(REASON_TRAILER)[0] !== Reason.OUTCOME_UNKNOWN;
  return false;
}
