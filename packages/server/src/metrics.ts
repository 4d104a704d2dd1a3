/** Prometheus metrics of one node (prom-client), served on /metrics. */
import { readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

import type { MessageStoreStats, WalUsage } from '@quorumq/storage';

import { DEFAULTS } from './config.js';
import { Observations, Tally } from './tally.js';

/** How often the event-loop delay is sampled (`nodejs_eventloop_lag_*`). */
export const EVENT_LOOP_SAMPLE_MS = 100;

/** The messages of one queue this node leads, by state (its replica's totals). */
export interface QueueMessageCounts {
  readonly queue: string;
  readonly ready: number;
  readonly unacked: number;
  readonly delayed: number;
  readonly deadLettering: number;
}

/**
 * A queue this node leads, as read when /metrics is scraped: its replica's totals, its
 * machine's replicated counts and what this node counted as its leader (LocalQueue.leaderCounts).
 */
export interface QueueObservation extends QueueMessageCounts {
  /** Body bytes of its ready messages. */
  readonly readyBytes: number;
  /** Subscribed consumers (get holders are not consumers). */
  readonly consumers: number;
  /** Messages the queue ever stored (published, dead-lettered or moved into it): the machine's count, the same on every replica. */
  readonly enqueued: number;
  /** Messages acknowledged (auto-ack gets included): the machine's count, the same on every replica. */
  readonly acked: number;
  /** Deliveries this node pushed to consumers as the queue's leader. */
  readonly deliveries: number;
  /** Messages this node dead-lettered as the queue's leader, by reason. */
  readonly deadLettered: ReadonlyMap<string, number>;
  /** Keyed compaction (spec 9): the machine's counts, on a queue with compaction_key only. */
  readonly compaction?: { readonly keys: number; readonly replaced: number; readonly tombstones: number };
  /** Its Raft group; read only for the queues listed (see NodeMetrics' queueLimit). */
  readonly group: () => GroupObservation;
}

/** One Raft group as this node's replica sees it (RaftGroup.status() and its counts), read when /metrics is scraped. */
export interface GroupObservation {
  readonly term: number;
  readonly commitIndex: number;
  /** The index the group's machine applied. */
  readonly appliedIndex: number;
  /** The newest snapshot's index (0: none). */
  readonly snapshotIndex: number;
  readonly lastIndex: number;
  readonly leader: boolean;
  /** On the leader, each other member's lag: the leader's last index minus the member's match index. Empty elsewhere. */
  readonly followerLag: ReadonlyMap<string, number>;
  /** Elections this replica started (pre-votes included) since the node started. */
  readonly electionsStarted: number;
  /** Leaders this replica learnt of since the node started, one per term. */
  readonly leaderChanges: number;
}

/** The counts the group gauges read (see observeGroups). */
export interface GroupCounts {
  readonly active: number;
  readonly all: number;
  readonly campaigning?: number;
  readonly waiting?: number;
  /** Replicas that know no leader of their group now. */
  readonly leaderless?: number;
  /** Replicas repaired after storage damage that have not caught up yet (they do not vote). */
  readonly recovering?: number;
}

/** The `group` label of the metadata group's series (with `kind="metadata"`; a queue's series have `kind="queue"`). */
export const METADATA_GROUP_LABEL = 'metadata';

/** What one scrape reads, once for all the series that need it (see NodeMetrics.view). */
interface ScrapeView {
  /** Every queue this node leads. */
  readonly led: readonly QueueObservation[];
  /** The ones with series of their own: the largest `queueLimit`. */
  readonly listed: readonly QueueObservation[];
  readonly groups: ReadonlyArray<{ readonly labels: { readonly group: string; readonly kind: 'metadata' | 'queue' }; readonly status: GroupObservation }>;
}

/** This package's version (quorumq_build_info), from its package.json. */
function packageVersion(): string {
  try {
    const parsed = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version?: unknown };
    return typeof parsed.version === 'string' ? parsed.version : 'unknown';
  } catch {
    return 'unknown';
  }
}

export const QUORUMQ_VERSION = packageVersion();

/** The `state` label values of the message gauges, with the count each reads. */
const STATES: ReadonlyArray<readonly [string, (counts: QueueMessageCounts) => number]> = [
  ['ready', (c) => c.ready],
  ['unacked', (c) => c.unacked],
  ['delayed', (c) => c.delayed],
  ['dead_lettering', (c) => c.deadLettering],
];

const totalOf = (counts: QueueMessageCounts): number => counts.ready + counts.unacked + counts.delayed + counts.deadLettering;

export class NodeMetrics {
  readonly registry = new Registry();
  /** The queues this node leads, read at scrape time (see observeQueues). */
  private ledQueues: () => Iterable<QueueObservation> = () => [];
  /** The metadata group, read at scrape time (see observeMetadataGroup). */
  private metadataGroup: (() => GroupObservation) | null = null;
  /** The WAL's files, read at scrape time (see observeWal). */
  private walUsage: (() => WalUsage) | null = null;
  /** This scrape's view, built by the first series that needs it (see view()). */
  private scrape: ScrapeView | null = null;
  // What every operation adds (see tally.ts): taken by the metrics' `collect`.
  private readonly confirmed = new Tally();
  private readonly duplicates = new Tally();
  private readonly confirmTimes = new Observations((seconds) => this.confirmSeconds.observe(seconds));
  private readonly delivered = new Tally();
  private readonly walFlushTally = new Tally();
  private readonly walRecordTally = new Tally();
  private readonly walByteTally = new Tally();
  private readonly walSyncTally = new Tally();
  private readonly peerBatchTally = new Tally();
  private readonly peerMessageTally = new Tally();

  readonly publishes: Counter<'outcome'> = new Counter({
    name: 'quorumq_publishes_total',
    help: 'Publishes answered, by outcome',
    labelNames: ['outcome'],
    registers: [this.registry],
    collect: () => {
      this.publishesConfirmed.inc(this.confirmed.take());
      this.publishesDuplicate.inc(this.duplicates.take());
    },
  });
  /** The hot outcomes' counters, bound once (no label lookup per publish). */
  private readonly publishesConfirmed = this.publishes.labels({ outcome: 'confirmed' });
  private readonly publishesDuplicate = this.publishes.labels({ outcome: 'duplicate' });
  readonly confirmSeconds: Histogram = new Histogram({
    name: 'quorumq_publish_confirm_seconds',
    help: 'Time from receiving a publish to its confirm',
    buckets: [0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5, 1, 5],
    registers: [this.registry],
    collect: () => this.confirmTimes.flush(),
  });
  readonly deliveries: Counter = new Counter({
    name: 'quorumq_deliveries_total',
    help: 'Deliveries pushed to consumers',
    registers: [this.registry],
    collect: () => this.deliveries.inc(this.delivered.take()),
  });
  readonly deadLettered = new Counter({
    name: 'quorumq_dead_lettered_total',
    help: 'Messages dead-lettered, by reason',
    labelNames: ['reason'],
    registers: [this.registry],
  });
  readonly dropped = new Counter({
    name: 'quorumq_messages_dropped_total',
    help: 'Messages that left a queue without a dead-letter target (delivery limit without DLX, purge, delete, cycle), by reason',
    labelNames: ['reason'],
    registers: [this.registry],
  });
  readonly leaderChanges = new Counter({
    name: 'quorumq_leader_changes_total',
    help: 'Times this node became leader of a group',
    registers: [this.registry],
  });
  readonly diskAlarm = new Gauge({ name: 'quorumq_disk_alarm', help: '1 while free disk space is below disk_free_limit', registers: [this.registry] });
  readonly memoryAlarm = new Gauge({ name: 'quorumq_memory_alarm', help: '1 while resident memory is above the memory high watermark', registers: [this.registry] });
  readonly memoryHighWatermarkBytes = new Gauge({
    name: 'quorumq_memory_high_watermark_bytes',
    help: 'Resident memory above which publishes are refused (compare process_resident_memory_bytes)',
    registers: [this.registry],
  });
  // Queue depths are computed when /metrics is scraped, not kept up to date on every change.
  // Only a queue's leader reports it (a sum over the cluster counts each queue once), and
  // per-queue series are capped: with more queues than `queueLimit` only the largest are
  // listed, while quorumq_messages and quorumq_queues_led always cover them all.
  readonly queueMessages: Gauge<'queue' | 'state'> = new Gauge({
    name: 'quorumq_queue_messages',
    help: 'Messages in queues this node leads, by state (the largest queues, up to metricsQueueLimit)',
    labelNames: ['queue', 'state'],
    registers: [this.registry],
    collect: () => {
      this.queueMessages.reset();
      for (const counts of this.view().listed) {
        for (const [state, count] of STATES) this.queueMessages.set({ queue: counts.queue, state }, count(counts));
      }
    },
  });
  readonly queueReadyBytes: Gauge<'queue'> = new Gauge({
    name: 'quorumq_queue_ready_bytes',
    help: 'Body bytes of the ready messages of queues this node leads (the largest queues, up to metricsQueueLimit)',
    labelNames: ['queue'],
    registers: [this.registry],
    collect: () => this.perQueue(this.queueReadyBytes, (q) => q.readyBytes),
  });
  readonly queueConsumers: Gauge<'queue'> = new Gauge({
    name: 'quorumq_queue_consumers',
    help: 'Consumers subscribed to queues this node leads (the largest queues, up to metricsQueueLimit)',
    labelNames: ['queue'],
    registers: [this.registry],
    collect: () => this.perQueue(this.queueConsumers, (q) => q.consumers),
  });
  readonly queueEnqueued: Counter<'queue'> = new Counter({
    name: 'quorumq_queue_enqueued_total',
    help: 'Messages stored in queues this node leads (published, dead-lettered or moved into them): the replicated count, continued by the next leader',
    labelNames: ['queue'],
    registers: [this.registry],
    collect: () => this.perQueue(this.queueEnqueued, (q) => q.enqueued),
  });
  readonly queueAcked: Counter<'queue'> = new Counter({
    name: 'quorumq_queue_acked_total',
    help: 'Messages acknowledged in queues this node leads: the replicated count, continued by the next leader',
    labelNames: ['queue'],
    registers: [this.registry],
    collect: () => this.perQueue(this.queueAcked, (q) => q.acked),
  });
  readonly queueCompacted: Counter<'queue'> = new Counter({
    name: 'quorumq_queue_compacted_total',
    help: 'Messages of compacting queues this node leads replaced by a newer message of their key (spec 9): the replicated count, continued by the next leader',
    labelNames: ['queue'],
    registers: [this.registry],
    collect: () => this.perCompactingQueue(this.queueCompacted, (c) => c.replaced),
  });
  readonly queueCompactionKeys: Gauge<'queue'> = new Gauge({
    name: 'quorumq_queue_compaction_keys',
    help: 'Keys with a live value in compacting queues this node leads (spec 9)',
    labelNames: ['queue'],
    registers: [this.registry],
    collect: () => this.perCompactingQueue(this.queueCompactionKeys, (c) => c.keys),
  });
  readonly queueTombstones: Gauge<'queue'> = new Gauge({
    name: 'quorumq_queue_tombstones',
    help: 'Tombstones held by compacting queues this node leads (spec 9)',
    labelNames: ['queue'],
    registers: [this.registry],
    collect: () => this.perCompactingQueue(this.queueTombstones, (c) => c.tombstones),
  });
  readonly queueDeliveries: Counter<'queue'> = new Counter({
    name: 'quorumq_queue_deliveries_total',
    help: 'Deliveries this node pushed to consumers of queues it leads, counted since it started (gets not included)',
    labelNames: ['queue'],
    registers: [this.registry],
    collect: () => this.perQueue(this.queueDeliveries, (q) => q.deliveries),
  });
  readonly queueDeadLettered: Counter<'queue' | 'reason'> = new Counter({
    name: 'quorumq_queue_dead_lettered_total',
    help: 'Messages this node dead-lettered from queues it leads, by reason, counted since it started',
    labelNames: ['queue', 'reason'],
    registers: [this.registry],
    collect: () => {
      this.queueDeadLettered.reset();
      for (const q of this.view().listed) for (const [reason, count] of q.deadLettered) this.queueDeadLettered.inc({ queue: q.queue, reason }, count);
    },
  });
  readonly messages: Gauge<'state'> = new Gauge({
    name: 'quorumq_messages',
    help: 'Messages in all the queues this node leads, by state',
    labelNames: ['state'],
    registers: [this.registry],
    collect: () => {
      const sums = STATES.map(() => 0);
      for (const counts of this.view().led) STATES.forEach(([, count], i) => (sums[i] = (sums[i] ?? 0) + count(counts)));
      STATES.forEach(([state], i) => this.messages.set({ state }, sums[i] ?? 0));
    },
  });
  readonly queuesLed: Gauge = new Gauge({
    name: 'quorumq_queues_led',
    help: 'Queues this node leads',
    registers: [this.registry],
    collect: () => this.queuesLed.set(this.view().led.length),
  });

  // Raft groups: the metadata group (every node, its own replica) and the groups of the
  // queues listed above (their leader), read from RaftGroup.status() when scraped.
  readonly raftTerm: Gauge<'group' | 'kind'> = this.groupGauge('quorumq_raft_term', "The group's current term as this node's replica knows it", (g) => g.term);
  readonly raftCommitIndex: Gauge<'group' | 'kind'> = this.groupGauge('quorumq_raft_commit_index', "The group's commit index on this node's replica", (g) => g.commitIndex);
  readonly raftAppliedIndex: Gauge<'group' | 'kind'> = this.groupGauge('quorumq_raft_applied_index', "The index this node's replica of the group applied", (g) => g.appliedIndex);
  readonly raftSnapshotIndex: Gauge<'group' | 'kind'> = this.groupGauge('quorumq_raft_snapshot_index', "The index of the newest snapshot of this node's replica of the group (0: none)", (g) => g.snapshotIndex);
  readonly raftLastIndex: Gauge<'group' | 'kind'> = this.groupGauge('quorumq_raft_last_index', "The last index of this node's replica's log", (g) => g.lastIndex);
  readonly raftLeader: Gauge<'group' | 'kind'> = this.groupGauge('quorumq_raft_leader', '1 while this node leads the group', (g) => (g.leader ? 1 : 0));
  readonly raftFollowerLag: Gauge<'group' | 'kind' | 'peer'> = new Gauge({
    name: 'quorumq_raft_follower_lag',
    help: "On the group's leader, per other member: entries of the leader's log the member has not acknowledged (last index minus its match index)",
    labelNames: ['group', 'kind', 'peer'],
    registers: [this.registry],
    collect: () => {
      this.raftFollowerLag.reset();
      for (const { labels, status } of this.view().groups) for (const [peer, lag] of status.followerLag) this.raftFollowerLag.set({ ...labels, peer }, lag);
    },
  });
  readonly raftElectionsStarted: Counter<'group' | 'kind'> = new Counter({
    name: 'quorumq_raft_elections_started_total',
    help: "Elections this node's replica of the group started (pre-votes included) since the node started",
    labelNames: ['group', 'kind'],
    registers: [this.registry],
    collect: () => {
      this.raftElectionsStarted.reset();
      for (const { labels, status } of this.view().groups) this.raftElectionsStarted.inc(labels, status.electionsStarted);
    },
  });
  readonly raftLeaderChanges: Counter<'group' | 'kind'> = new Counter({
    name: 'quorumq_raft_leader_changes_total',
    help: "Leaders this node's replica of the group learnt of (one per term) since the node started",
    labelNames: ['group', 'kind'],
    registers: [this.registry],
    collect: () => {
      this.raftLeaderChanges.reset();
      for (const { labels, status } of this.view().groups) this.raftLeaderChanges.inc(labels, status.leaderChanges);
    },
  });

  /** The node's message store, read at scrape time (see observeMessageStore). */
  private messageStoreStats: (() => MessageStoreStats) | null = null;
  readonly messageStoreBytes: Gauge<'kind'> = new Gauge({
    name: 'quorumq_message_store_bytes',
    help: "The node's message store: live (bytes of the messages its replicas hold), disk (its segment files), cache (the read-ahead cache), pending (put, not yet written)",
    labelNames: ['kind'],
    registers: [this.registry],
    collect: () => this.collectMessageStore(),
  });
  readonly messageStoreRecords: Gauge = new Gauge({
    name: 'quorumq_message_store_records',
    help: "Records in the node's message store with at least one reference (a message routed to several queues of the node is one record)",
    registers: [this.registry],
    collect: () => {
      const stats = this.messageStoreStats?.();
      if (stats !== undefined) this.messageStoreRecords.set(stats.liveRecords);
    },
  });
  /** The bodies the node's queue replicas hold from their log entries, read at scrape time (see observeHeldBodies). */
  private heldBodies: (() => { readonly messages: number; readonly bytes: number }) | null = null;
  readonly replicaHeldMessages: Gauge = new Gauge({
    name: 'quorumq_replica_held_messages',
    help: "Messages whose bytes this node's queue replicas hold as views of their log entries, not in the message store yet (up to 4 MiB per replica; they go in at its next snapshot, or beyond that)",
    registers: [this.registry],
    collect: () => {
      const held = this.heldBodies?.();
      if (held !== undefined) this.replicaHeldMessages.set(held.messages);
    },
  });
  readonly replicaHeldBytes: Gauge = new Gauge({
    name: 'quorumq_replica_held_bytes',
    help: 'Bytes of the messages counted by quorumq_replica_held_messages',
    registers: [this.registry],
    collect: () => {
      const held = this.heldBodies?.();
      if (held !== undefined) this.replicaHeldBytes.set(held.bytes);
    },
  });
  readonly repairs: Counter<'kind'> = new Counter({
    name: 'quorumq_repairs_total',
    help: "Group replicas repaired after damage found in this node's storage at start (kind: wal = a corrupt WAL record before the tail, log = a hole in a group's log, snapshot = a damaged or missing snapshot file), and (kind=recovered) repaired replicas that then caught up from a leader",
    labelNames: ['kind'],
    registers: [this.registry],
  });
  readonly repairBytes = new Counter({
    name: 'quorumq_repair_fetched_bytes_total',
    help: 'Bytes of log entries and snapshots repaired replicas received from their leaders until they were intact again',
    registers: [this.registry],
  });
  readonly snapshotsInstalled = new Counter({
    name: 'quorumq_snapshots_installed_total',
    help: "Queue snapshots a leader sent that this node prepared (fetched the message bytes they list) and installed",
    registers: [this.registry],
  });
  readonly snapshotBytesFetched = new Counter({
    name: 'quorumq_snapshot_fetched_bytes_total',
    help: 'Message bytes this node fetched from leaders to install their queue snapshots',
    registers: [this.registry],
  });
  readonly messageStoreCompactions: Gauge = new Gauge({
    name: 'quorumq_message_store_compactions',
    help: "Segments of the node's message store rewritten by compaction since the node started",
    registers: [this.registry],
    collect: () => {
      const stats = this.messageStoreStats?.();
      if (stats !== undefined) this.messageStoreCompactions.set(stats.compactions);
    },
  });

  readonly walFlushes: Counter = new Counter({
    name: 'quorumq_wal_flushes_total',
    help: 'WAL flushes (one durable write each, for every group on the node)',
    registers: [this.registry],
    collect: () => this.walFlushes.inc(this.walFlushTally.take()),
  });
  readonly walRecords: Counter = new Counter({
    name: 'quorumq_wal_records_total',
    help: 'Records written to the WAL (entries and hard states)',
    registers: [this.registry],
    collect: () => this.walRecords.inc(this.walRecordTally.take()),
  });
  readonly walBytes: Counter = new Counter({
    name: 'quorumq_wal_bytes_total',
    help: 'Bytes written to the WAL',
    registers: [this.registry],
    collect: () => this.walBytes.inc(this.walByteTally.take()),
  });
  readonly walSyncs: Counter = new Counter({
    name: 'quorumq_wal_syncs_total',
    help: 'Durable writes to WAL segments (a write to a segment opened O_DSYNC; a flush that crosses into a new segment makes two)',
    registers: [this.registry],
    collect: () => this.walSyncs.inc(this.walSyncTally.take()),
  });
  readonly walSegments: Gauge = new Gauge({
    name: 'quorumq_wal_segments',
    help: "The WAL's segment files (the one being written included)",
    registers: [this.registry],
    collect: () => {
      const usage = this.walUsage?.();
      if (usage !== undefined) this.walSegments.set(usage.segments);
    },
  });
  readonly walDiskBytes: Gauge = new Gauge({
    name: 'quorumq_wal_disk_bytes',
    help: "Bytes of the WAL's segment files",
    registers: [this.registry],
    collect: () => {
      const usage = this.walUsage?.();
      if (usage !== undefined) this.walDiskBytes.set(usage.bytes);
    },
  });
  readonly diskFreeBytes = new Gauge({
    name: 'quorumq_disk_free_bytes',
    help: 'Free bytes (available to the node) on the file system of the data directory, as the disk check read it last (every 2 s)',
    registers: [this.registry],
  });
  readonly diskFreeLimitBytes = new Gauge({
    name: 'quorumq_disk_free_limit_bytes',
    help: 'diskFreeLimitBytes: below this much free space the disk alarm refuses publishes',
    registers: [this.registry],
  });
  readonly buildInfo = new Gauge({
    name: 'quorumq_build_info',
    help: "1, labelled with the node's version and id",
    labelNames: ['version', 'node'],
    registers: [this.registry],
  });
  /** The number of groups ticked now (see observeGroups). */
  private activeGroups: () => GroupCounts = () => ({ active: 0, all: 0 });
  readonly raftGroups: Gauge<'state'> = new Gauge({
    name: 'quorumq_raft_groups',
    help: "This node's Raft group replicas: all of them, the active ones (ticked because they have work; the rest are quiet), the leaderless ones (knowing no leader now), and the recovering ones (repaired after storage damage, not caught up yet: they do not vote)",
    labelNames: ['state'],
    registers: [this.registry],
    collect: () => {
      const { active, all, leaderless = 0, recovering = 0 } = this.activeGroups();
      this.raftGroups.set({ state: 'all' }, all);
      this.raftGroups.set({ state: 'active' }, active);
      this.raftGroups.set({ state: 'leaderless' }, leaderless);
      this.raftGroups.set({ state: 'recovering' }, recovering);
    },
  });
  readonly raftElections: Gauge<'state'> = new Gauge({
    name: 'quorumq_raft_elections',
    help: "This node's groups campaigning now with one of the node's election slots, and those waiting for a slot (see GroupTicker)",
    labelNames: ['state'],
    registers: [this.registry],
    collect: () => {
      const { campaigning = 0, waiting = 0 } = this.activeGroups();
      this.raftElections.set({ state: 'campaigning' }, campaigning);
      this.raftElections.set({ state: 'waiting' }, waiting);
    },
  });
  readonly peersSilent = new Counter({
    name: 'quorumq_peers_silent_total',
    help: 'Times a peer sent nothing (not even a beat) for an election timeout, waking the quiet groups concerned',
    registers: [this.registry],
  });
  readonly peerBatches: Counter = new Counter({
    name: 'quorumq_peer_batches_total',
    help: 'Batches of Raft messages sent to peers',
    registers: [this.registry],
    collect: () => this.peerBatches.inc(this.peerBatchTally.take()),
  });
  readonly peerStreamsRefused = new Counter({
    name: 'quorumq_peer_streams_refused_total',
    help: 'Peer streams refused because their Raft messages were for another node (a stale peer address)',
    registers: [this.registry],
  });
  readonly peerCallsRefused = new Counter({
    name: 'quorumq_peer_calls_refused_total',
    help: 'Peer calls (Raft streams, forwarded proposals, snapshot body fetches) refused for want of valid cluster credentials, by call',
    labelNames: ['call'],
    registers: [this.registry],
  });
  readonly authenticationFailures = new Counter({
    name: 'quorumq_authentication_failures_total',
    help: 'Client calls refused as UNAUTHENTICATED, by what they offered (password, certificate, none)',
    labelNames: ['mechanism'],
    registers: [this.registry],
  });
  readonly raftMessagesRefused = new Counter({
    name: 'quorumq_raft_messages_refused_total',
    help: 'Raft messages dropped unstepped: sender_mismatch (not from the stream\'s peer), malformed, not_a_member (of the group)',
    labelNames: ['reason'],
    registers: [this.registry],
  });
  readonly peerMessages: Counter = new Counter({
    name: 'quorumq_peer_messages_total',
    help: 'Raft messages sent to peers',
    registers: [this.registry],
    collect: () => this.peerMessages.inc(this.peerMessageTally.take()),
  });
  readonly forwardsRerouted = new Counter({
    name: 'quorumq_forwards_rerouted_total',
    help: 'Forwarded proposals re-sent to a new leader because the old one stopped answering (deduplicated publishes only)',
    registers: [this.registry],
  });

  /** @param queueLimit most queues with their own quorumq_queue_messages series */
  constructor(
    private readonly queueLimit: number = DEFAULTS.metricsQueueLimit,
    /** Whether to collect the process's metrics (CPU, memory, event loop); not for simulated nodes. */
    processMetrics = true,
  ) {
    if (!processMetrics) return;
    // The standard names (process_cpu_seconds_total, nodejs_heap_size_used_bytes, ...) that
    // dashboards and alerts for Node.js processes expect: no prefix.
    collectDefaultMetrics({
      register: this.registry,
      // The event-loop delay histogram samples with a timer of this period. prom-client's
      // default (10 ms) woke an idle node 100 times a second, most of its idle CPU; a stall
      // long enough to matter still shows at 100 ms.
      eventLoopMonitoringPrecision: EVENT_LOOP_SAMPLE_MS,
    });
  }

  // ---- Once per operation: plain additions (tally.ts), in the metrics at the next read.

  /** A publish confirmed (or found a duplicate), `seconds` after it arrived. */
  publishConfirmed(duplicate: boolean, seconds: number): void {
    (duplicate ? this.duplicates : this.confirmed).add(1);
    this.confirmTimes.add(seconds);
  }

  /** A delivery pushed to a consumer. */
  deliveryPushed(): void {
    this.delivered.add(1);
  }

  /** One WAL flush: `records` records, `bytes` bytes, `segments` durable writes. */
  walFlushed(records: number, bytes: number, segments: number): void {
    this.walFlushTally.add(1);
    this.walRecordTally.add(records);
    this.walByteTally.add(bytes);
    this.walSyncTally.add(segments);
  }

  /** A batch of `messages` Raft messages sent to a peer. */
  peerBatchSent(messages: number): void {
    this.peerBatchTally.add(1);
    this.peerMessageTally.add(messages);
  }

  /** Where the queue series read, at each scrape, the queues this node leads. */
  observeQueues(ledQueues: () => Iterable<QueueObservation>): void {
    this.ledQueues = ledQueues;
  }

  /** Where the metadata group's series read, at each scrape. */
  observeMetadataGroup(status: () => GroupObservation): void {
    this.metadataGroup = status;
  }

  /** Where the WAL gauges read, at each scrape. */
  observeWal(usage: () => WalUsage): void {
    this.walUsage = usage;
  }

  /** Where the group gauges read, at each scrape. */
  observeGroups(counts: () => GroupCounts): void {
    this.activeGroups = counts;
  }

  /** quorumq_build_info{version, node} = 1. */
  identify(nodeId: string, version = QUORUMQ_VERSION): void {
    this.buildInfo.reset();
    this.buildInfo.set({ version, node: nodeId }, 1);
  }

  /**
   * What this scrape reads of the node, built once by the first series that needs it.
   * prom-client calls every series' collect in one synchronous pass (Registry.metrics maps
   * them before its first await), so the view is dropped in the microtask after that pass:
   * each scrape reads the node once, and never sees an older scrape's view.
   */
  private view(): ScrapeView {
    if (this.scrape !== null) return this.scrape;
    const led = [...this.ledQueues()];
    let listed: readonly QueueObservation[] = led;
    if (led.length > this.queueLimit) listed = [...led].sort((a, b) => totalOf(b) - totalOf(a) || (a.queue < b.queue ? -1 : 1)).slice(0, this.queueLimit);
    const groups: Array<ScrapeView['groups'][number]> = [];
    const metadata = this.metadataGroup?.();
    if (metadata !== undefined) groups.push({ labels: { group: METADATA_GROUP_LABEL, kind: 'metadata' }, status: metadata });
    for (const queue of listed) groups.push({ labels: { group: queue.queue, kind: 'queue' }, status: queue.group() });
    const view: ScrapeView = { led, listed, groups };
    this.scrape = view;
    queueMicrotask(() => {
      if (this.scrape === view) this.scrape = null;
    });
    return view;
  }

  /** Sets a per-queue series for each listed queue, forgetting queues no longer listed. */
  private perQueue(metric: Gauge<'queue'> | Counter<'queue'>, value: (queue: QueueObservation) => number): void {
    metric.reset();
    if (metric instanceof Gauge) for (const q of this.view().listed) metric.set({ queue: q.queue }, value(q));
    else for (const q of this.view().listed) metric.inc({ queue: q.queue }, value(q));
  }

  /** As perQueue, for the listed queues that compact. */
  private perCompactingQueue(metric: Gauge<'queue'> | Counter<'queue'>, value: (counts: NonNullable<QueueObservation['compaction']>) => number): void {
    metric.reset();
    for (const q of this.view().listed) {
      if (q.compaction === undefined) continue;
      if (metric instanceof Gauge) metric.set({ queue: q.queue }, value(q.compaction));
      else metric.inc({ queue: q.queue }, value(q.compaction));
    }
  }

  /** A gauge per Raft group (see view().groups). */
  private groupGauge(name: string, help: string, value: (status: GroupObservation) => number): Gauge<'group' | 'kind'> {
    const gauge: Gauge<'group' | 'kind'> = new Gauge({
      name,
      help,
      labelNames: ['group', 'kind'],
      registers: [this.registry],
      collect: () => {
        gauge.reset();
        for (const { labels, status } of this.view().groups) gauge.set(labels, value(status));
      },
    });
    return gauge;
  }

  /** Where the message store gauges read, at each scrape. */
  observeHeldBodies(held: () => { readonly messages: number; readonly bytes: number }): void {
    this.heldBodies = held;
  }

  observeMessageStore(stats: () => MessageStoreStats): void {
    this.messageStoreStats = stats;
  }

  private collectMessageStore(): void {
    const stats = this.messageStoreStats?.();
    if (stats === undefined) return;
    this.messageStoreBytes.set({ kind: 'live' }, stats.liveBytes);
    this.messageStoreBytes.set({ kind: 'disk' }, stats.diskBytes);
    this.messageStoreBytes.set({ kind: 'cache' }, stats.cacheBytes);
    this.messageStoreBytes.set({ kind: 'pending' }, stats.pendingWriteBytes);
  }

  /** Serves /metrics on `address` (host:port). */
  listen(address: string): Promise<Server> {
    const [host, port] = splitAddress(address);
    const server = createServer((request, response) => {
      if (request.url !== '/metrics') {
        response.writeHead(404).end('not found\n');
        return;
      }
      this.registry.metrics().then(
        (text) => response.writeHead(200, { 'content-type': this.registry.contentType }).end(text),
        (error: unknown) => response.writeHead(500).end(String(error)),
      );
    });
    return new Promise((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, host, () => resolve(server));
    });
  }
}

export function splitAddress(address: string): [string, number] {
  const colon = address.lastIndexOf(':');
  return [address.slice(0, colon), Number(address.slice(colon + 1))];
}
