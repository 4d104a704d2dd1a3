/** Prometheus metrics of one node (prom-client), served on /metrics. */
import { createServer, type Server } from 'node:http';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

import type { MessageStoreStats } from '@quorumq/storage';

import { DEFAULTS } from './config.js';

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
  private ledQueues: () => Iterable<QueueMessageCounts> = () => [];
  readonly publishes = new Counter({
    name: 'quorumq_publishes_total',
    help: 'Publishes answered, by outcome',
    labelNames: ['outcome'],
    registers: [this.registry],
  });
  /** The hot outcomes' counters, bound once (no label lookup per publish). */
  readonly publishesConfirmed = this.publishes.labels({ outcome: 'confirmed' });
  readonly publishesDuplicate = this.publishes.labels({ outcome: 'duplicate' });
  readonly confirmSeconds = new Histogram({
    name: 'quorumq_publish_confirm_seconds',
    help: 'Time from receiving a publish to its confirm',
    buckets: [0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5, 1, 5],
    registers: [this.registry],
  });
  readonly deliveries = new Counter({ name: 'quorumq_deliveries_total', help: 'Deliveries pushed to consumers', registers: [this.registry] });
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
    collect: () => this.collectQueueMessages(),
  });
  readonly messages: Gauge<'state'> = new Gauge({
    name: 'quorumq_messages',
    help: 'Messages in all the queues this node leads, by state',
    labelNames: ['state'],
    registers: [this.registry],
    collect: () => this.collectMessages(),
  });
  readonly queuesLed: Gauge = new Gauge({
    name: 'quorumq_queues_led',
    help: 'Queues this node leads',
    registers: [this.registry],
    collect: () => this.queuesLed.set([...this.ledQueues()].length),
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

  readonly walFlushes = new Counter({ name: 'quorumq_wal_flushes_total', help: 'WAL flushes (one durable write each, for every group on the node)', registers: [this.registry] });
  readonly walRecords = new Counter({ name: 'quorumq_wal_records_total', help: 'Records written to the WAL (entries and hard states)', registers: [this.registry] });
  readonly walBytes = new Counter({ name: 'quorumq_wal_bytes_total', help: 'Bytes written to the WAL', registers: [this.registry] });
  /** The number of groups ticked now (see observeGroups). */
  private activeGroups: () => { active: number; all: number; campaigning?: number; waiting?: number } = () => ({ active: 0, all: 0 });
  readonly raftGroups: Gauge<'state'> = new Gauge({
    name: 'quorumq_raft_groups',
    help: "This node's Raft group replicas: all of them, and the active ones (ticked because they have work; the rest are quiet)",
    labelNames: ['state'],
    registers: [this.registry],
    collect: () => {
      const { active, all } = this.activeGroups();
      this.raftGroups.set({ state: 'all' }, all);
      this.raftGroups.set({ state: 'active' }, active);
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
  readonly peerBatches = new Counter({ name: 'quorumq_peer_batches_total', help: 'Batches of Raft messages sent to peers', registers: [this.registry] });
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
  readonly peerMessages = new Counter({ name: 'quorumq_peer_messages_total', help: 'Raft messages sent to peers', registers: [this.registry] });
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

  /** Where the queue gauges read, at each scrape, the queues this node leads. */
  observeQueues(ledQueues: () => Iterable<QueueMessageCounts>): void {
    this.ledQueues = ledQueues;
  }

  /** Where the group gauges read, at each scrape. */
  observeGroups(counts: () => { active: number; all: number; campaigning?: number; waiting?: number }): void {
    this.activeGroups = counts;
  }

  /** Where the message store gauges read, at each scrape. */
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

  private collectQueueMessages(): void {
    let queues = [...this.ledQueues()];
    if (queues.length > this.queueLimit) queues = queues.sort((a, b) => totalOf(b) - totalOf(a) || (a.queue < b.queue ? -1 : 1)).slice(0, this.queueLimit);
    // Queues deleted or led elsewhere since the last scrape go.
    this.queueMessages.reset();
    for (const counts of queues) {
      for (const [state, count] of STATES) this.queueMessages.set({ queue: counts.queue, state }, count(counts));
    }
  }

  private collectMessages(): void {
    const sums = STATES.map(() => 0);
    for (const counts of this.ledQueues()) STATES.forEach(([, count], i) => (sums[i] = (sums[i] ?? 0) + count(counts)));
    STATES.forEach(([state], i) => this.messages.set({ state }, sums[i] ?? 0));
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
