/** Prometheus metrics of one node (prom-client), served on /metrics. */
import { createServer, type Server } from 'node:http';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

/** How often the event-loop delay is sampled (`quorumq_process_nodejs_eventloop_lag_*`). */
export const EVENT_LOOP_SAMPLE_MS = 100;

export class NodeMetrics {
  readonly registry = new Registry();
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
  readonly queueMessages = new Gauge({
    name: 'quorumq_queue_messages',
    help: 'Messages in queues this node leads, by state',
    labelNames: ['queue', 'state'],
    registers: [this.registry],
  });

  readonly walFlushes = new Counter({ name: 'quorumq_wal_flushes_total', help: 'WAL flushes (one durable write each, for every group on the node)', registers: [this.registry] });
  readonly walRecords = new Counter({ name: 'quorumq_wal_records_total', help: 'Records written to the WAL (entries and hard states)', registers: [this.registry] });
  readonly walBytes = new Counter({ name: 'quorumq_wal_bytes_total', help: 'Bytes written to the WAL', registers: [this.registry] });
  readonly peerBatches = new Counter({ name: 'quorumq_peer_batches_total', help: 'Batches of Raft messages sent to peers', registers: [this.registry] });
  readonly peerStreamsRefused = new Counter({
    name: 'quorumq_peer_streams_refused_total',
    help: 'Peer streams refused because their Raft messages were for another node (a stale peer address)',
    registers: [this.registry],
  });
  readonly peerCallsRefused = new Counter({
    name: 'quorumq_peer_calls_refused_total',
    help: 'Peer calls (Raft streams, forwarded proposals) refused for want of valid cluster credentials, by call',
    labelNames: ['call'],
    registers: [this.registry],
  });
  readonly raftMessagesRefused = new Counter({
    name: 'quorumq_raft_messages_refused_total',
    help: 'Raft messages dropped unstepped: sender_mismatch (not from the stream\'s peer), malformed, not_a_member (of the group)',
    labelNames: ['reason'],
    registers: [this.registry],
  });
  readonly peerMessages = new Counter({ name: 'quorumq_peer_messages_total', help: 'Raft messages sent to peers', registers: [this.registry] });

  constructor() {
    collectDefaultMetrics({
      register: this.registry,
      prefix: 'quorumq_process_',
      // The event-loop delay histogram samples with a timer of this period. prom-client's
      // default (10 ms) woke an idle node 100 times a second, most of its idle CPU; a stall
      // long enough to matter still shows at 100 ms.
      eventLoopMonitoringPrecision: EVENT_LOOP_SAMPLE_MS,
    });
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
