/**
 * What a queue's leader does besides applying entries: it proposes the machine's ticks when
 * they are due (the `scheduleTick` effect), and once per term, after its first entry of the
 * term applied (the state is then complete), it releases consumers attached to the old
 * leader (`consumerDown`), re-issues the work the previous leader may not have finished
 * (dead-letters, moves: `leaderEffects`) and hands leadership to the queue's preferred
 * leader when nothing is consuming here. When it stops leading, it ends its consumers.
 */
import { leaderEffects } from '@quorumq/queue';
import type { SoftState } from '@quorumq/raft';
import type { Logger } from 'pino';

import type { ConsumerRegistry } from './consumers.js';
import type { DeadLetterWorker } from './dead-letter-worker.js';
import type { EffectRunner } from './effect-runner.js';
import { unavailable, Reason } from './errors.js';
import type { LocalQueue } from './local-queue.js';
import type { MemberChanges } from './member-changes.js';
import type { NodeMetrics } from './metrics.js';
import type { MoveWorker } from './move-worker.js';
import type { NodeEnv, Timer } from './node-env.js';
import type { PeerLink } from './peer-link.js';
import type { ProposalRouter } from './proposal-router.js';

export interface LeaderDutiesParts {
  readonly env: NodeEnv;
  readonly logger: Logger;
  readonly metrics: NodeMetrics;
  readonly nodeId: string;
  readonly consumers: ConsumerRegistry;
  readonly router: ProposalRouter;
  readonly effects: EffectRunner;
  readonly deadLetters: DeadLetterWorker;
  readonly moves: MoveWorker;
  /** Makes a led group's configuration follow the queue's members (member-changes.ts). */
  readonly memberChanges: MemberChanges;
  readonly link: Pick<PeerLink, 'isConnected'>;
  addressOf(node: string | null): string | null;
  isStopping(): boolean;
}

interface Duties {
  tick: Timer | null;
  tickAt: number;
  /** The term whose duties ran (0: none yet). */
  readyTerm: number;
}

/** How long after a term starts its leader may hand leadership to the preferred leader. */
const REBALANCE_AFTER_MS = 1000;

export class LeaderDuties {
  private readonly duties = new WeakMap<LocalQueue, Duties>();

  constructor(private readonly parts: LeaderDutiesParts) {}

  private of(queue: LocalQueue): Duties {
    let duties = this.duties.get(queue);
    if (duties === undefined) {
      duties = { tick: null, tickAt: 0, readyTerm: 0 };
      this.duties.set(queue, duties);
    }
    return duties;
  }

  /** Proposes a `tick` at (or soon after) leader time `at`; an earlier one already set stays. */
  scheduleTick(queue: LocalQueue, at: number): void {
    const duties = this.of(queue);
    if (duties.tick !== null && duties.tickAt <= at) return;
    duties.tick?.cancel();
    duties.tickAt = at;
    duties.tick = this.parts.env.after(at - this.parts.env.now(), () => {
      duties.tick = null;
      if (!queue.group.isLeader || this.parts.isStopping()) return;
      this.parts.router.proposeLocal(queue, { type: 'tick' }).catch(() => {
        // Not leader any more, or the group stopped: the next leader schedules its own.
      });
    });
  }

  onSoftState(queue: LocalQueue, state: SoftState): void {
    if (state.role === 'leader') {
      this.parts.metrics.leaderChanges.inc();
      this.parts.logger.info({ queue: queue.definition.name, term: queue.group.raft.currentTerm }, 'became queue leader');
      return;
    }
    // No longer the leader: consumers attached here must move to the new leader.
    this.stop(queue);
    this.parts.consumers.endAll(
      queue.definition.name,
      unavailable(Reason.LEADER_MOVED, `this node no longer leads queue ${JSON.stringify(queue.definition.name)}; resubscribe`, this.parts.addressOf(state.leaderId)),
    );
  }

  /** Stops the queue's leader work here (it stopped leading, or its replica goes). */
  stop(queue: LocalQueue): void {
    const duties = this.of(queue);
    duties.tick?.cancel();
    duties.tick = null;
    duties.readyTerm = 0;
    this.parts.deadLetters.forget(queue);
    this.parts.moves.forget(queue);
    this.parts.memberChanges.forget(queue);
  }

  /**
   * The queue's members changed in the metadata: the leader changes its group to match, and
   * hands leadership to a new preferred leader (rebalance) even with consumers attached.
   */
  membersChanged(queue: LocalQueue): void {
    if (!queue.group.isLeader || this.of(queue).readyTerm !== queue.group.raft.currentTerm) return;
    this.parts.memberChanges.check(queue);
    this.maybeRebalance(queue, true);
  }

  /** After each batch applied: the first one of a term this node leads starts the term's duties. */
  afterApplied(queue: LocalQueue): void {
    const group = queue.group;
    if (!group.isLeader) return;
    const term = group.raft.currentTerm;
    const duties = this.of(queue);
    if (duties.readyTerm === term) return;
    // The leader's no-op of this term is applied: the state is complete.
    if (group.raft.termAt(group.appliedIndex) !== term) return;
    duties.readyTerm = term;
    const { parts } = this;
    for (const consumerId of queue.replica.state.consumers.keys()) {
      if (!parts.consumers.has(consumerId)) parts.router.proposeLocal(queue, { type: 'consumerDown', consumerId }).catch(() => {});
    }
    parts.effects.run(queue, leaderEffects(queue.replica.state, parts.env.now()));
    parts.memberChanges.check(queue);
    this.maybeRebalance(queue, false);
  }

  /**
   * Spread leaders: the first member of a queue is its preferred leader. `requested`: an
   * operator's rebalance changed it (else: a new term started elsewhere than preferred).
   */
  private maybeRebalance(queue: LocalQueue, requested: boolean): void {
    const { parts } = this;
    if (queue.definition.members[0] === undefined || queue.definition.members[0] === parts.nodeId) return;
    parts.env.after(requested ? 0 : REBALANCE_AFTER_MS, () => {
      const preferred = queue.definition.members[0];
      if (preferred === undefined || preferred === parts.nodeId || !queue.group.isLeader || parts.isStopping()) return;
      // Moving the leader ends its consumers' streams (they resubscribe, their unacked
      // messages are redelivered): unasked, only rebalance a queue nobody is consuming here.
      if (!requested && parts.consumers.servesQueue(queue.definition.name)) return;
      const progress = queue.group.status().progress.get(preferred);
      // Asked for, the core catches the target up before it hands over (RaftNode.transferLeadership).
      if (progress !== undefined && (requested || progress.match >= queue.group.raft.lastIndex) && parts.link.isConnected(preferred)) {
        parts.logger.info({ queue: queue.definition.name, to: preferred }, 'handing leadership to the preferred leader');
        queue.group.transferLeadership(preferred);
      }
    });
  }
}
