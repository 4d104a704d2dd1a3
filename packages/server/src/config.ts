/**
 * Node configuration: a JSON file, then environment variables on top, then defaults.
 * Every option and its default is documented in docs/configuration.md.
 */
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';

import { AUTH_ENV, authConfig, type AuthConfig } from './auth-config.js';
import { checkListeners, splitAddress } from './listener-config.js';
import { clientTlsConfig, peerTlsConfig, type ClientTlsConfig, type PeerTlsConfig } from './tls-config.js';

export { ConfigError } from './config-error.js';
import { ConfigError } from './config-error.js';
export type { ClientTlsConfig, PeerTlsConfig, ClientCertificateMode } from './tls-config.js';

export interface NodeConfig extends AuthConfig {
  /** This node's id; one of the keys of `peers`. */
  readonly nodeId: string;
  /** host:port the client gRPC server binds (Broker, health, reflection). */
  readonly listen: string;
  /** host:port clients use to reach this node (told to clients in leader hints and ClusterStatus). */
  readonly advertise: string;
  /**
   * host:port the peer gRPC server binds (Raft streams, forwarded proposals, snapshot bodies,
   * and client calls proxied from other nodes); null for a single node without one.
   */
  readonly peerListen: string | null;
  /** host:port other nodes use to reach this node's peer listener: this node's entry in `peers`. */
  readonly peerAdvertise: string | null;
  /**
   * Every node of the cluster, this one included: id -> the address of its peer listener.
   * Once membership changed (docs/operations.md), the metadata names the nodes and `peers`
   * only says where this node finds the cluster.
   */
  readonly peers: ReadonlyMap<string, string>;
  /**
   * This node joins a running cluster (`quorumq cluster add-node` adds it): it starts with no
   * configuration of its own and waits for the cluster's leader, instead of founding a cluster
   * with `peers`. Ignored once the node has state.
   */
  readonly join: boolean;
  /** TLS on the client listener, or null for plaintext. */
  readonly tls: ClientTlsConfig | null;
  /** Mutual TLS on the peer listener and the node's peer channels, or null for plaintext. */
  readonly peerTls: PeerTlsConfig | null;
  /** How often certificate, key and CA files are read again (a changed file is used without a restart). */
  readonly tlsRefreshMs: number;
  readonly dataDir: string;
  /** host:port of the Prometheus /metrics endpoint, or null for none. */
  readonly metricsListen: string | null;
  /** Most queues with their own `quorumq_queue_messages` series (the largest this node leads). */
  readonly metricsQueueLimit: number;
  readonly tickMs: number;
  readonly electionTicks: number;
  readonly heartbeatTicks: number;
  readonly snapshotInterval: number;
  /**
   * A queue snapshots only once its log grew by this many bytes (and by `snapshotInterval`
   * commands, and by 64 bytes per live message): the log a quiet queue keeps in memory.
   */
  readonly snapshotLogBytesMin: number;
  /** Bound of the message store's read-ahead cache (bytes of messages read from disk, kept for the next reads). */
  readonly messageStoreCacheBytes: number;
  /** The message store starts a new segment file once one would pass this size (compaction works per segment). */
  readonly messageStoreSegmentBytes: number;
  readonly maxMessageBytes: number;
  /**
   * The most unacked deliveries one consumer may hold: a prefetch of 0 (unlimited) or above
   * this is this (spec 3, flow control).
   */
  readonly maxPrefetch: number;
  /** Publishes one `PublishBatch` may hold; a larger batch is refused whole, before it is decoded. */
  readonly maxPublishesPerBatch: number;
  /** Header values one message may carry, those nested in tables and arrays and its death records included. */
  readonly maxHeadersPerMessage: number;
  /** How deep tables and arrays may nest in a header value (a value in a top-level table or array is at depth 1). */
  readonly maxHeaderDepth: number;
  /** Bytes a message's headers and death records may take on the wire (keys and values). */
  readonly maxHeaderBytes: number;
  /** Settles one consume-stream message (`SettleBatch`) may hold. */
  readonly maxSettlesPerRequest: number;
  /** Publishes are refused while the data directory's free space is below this. */
  readonly diskFreeLimitBytes: number;
  /**
   * Publishes are refused while the process's resident memory is above this fraction of the
   * memory limit (the container's cgroup limit, else the machine's memory: memory-limit.ts).
   */
  readonly memoryHighWatermark: number;
  /** The high watermark in bytes, instead of the fraction; null to use the fraction. */
  readonly memoryHighWatermarkBytes: number | null;
  readonly defaultReplicas: number;
  /** How long a publish or admin call waits for a quorum before UNAVAILABLE. */
  readonly requestTimeoutMs: number;
  /**
   * Spec 7: an exclusive queue belongs to the session that declared it. The SDK renews the
   * lease (a redeclare) while the session lives; unused this long, the queue is deleted.
   */
  readonly exclusiveLeaseMs: number;
  readonly logLevel: string;
  /**
   * V8's helper threads (optimising compilation, concurrent and parallel garbage collection)
   * run at the lowest CPU priority (SCHED_IDLE), so the event loop, woken by a message, never
   * waits behind one of them for a CPU (the CLI's helper-threads.ts). Default true.
   */
  readonly idleHelperThreads: boolean;
  /**
   * `quorumq node` runs a short workload on a cluster of three nodes of its own, in its own
   * process, before it starts serving, so that V8 has optimised the code a queue's leader and
   * followers run (the CLI's warm-up.ts). Default true.
   */
  readonly warmUp: boolean;
  /**
   * The secret every peer call carries (Raft streams, forwarded proposals): a node serves
   * the peer services only to callers that present it and a configured node id. Required
   * when `peers` names other nodes and there is no peer mutual TLS (with it, optional, and
   * still checked when set); null for a single node (which then refuses every peer call).
   * From `clusterSecret`, or the file named by `clusterSecretFile`.
   */
  readonly clusterSecret: string | null;
  /**
   * TEST ONLY: confirm publishes as soon as they are proposed, before they commit. Exists so
   * the chaos checker can show that it catches a broker that breaks the confirm guarantee.
   */
  readonly testOnlyConfirmBeforeCommit: boolean;
}

export const DEFAULTS = {
  listen: '127.0.0.1:7001',
  peerListen: null,
  peerAdvertise: null,
  tls: null,
  peerTls: null,
  tlsRefreshMs: 60_000,
  dataDir: './data',
  metricsListen: null,
  metricsQueueLimit: 100,
  tickMs: 50,
  electionTicks: 10,
  heartbeatTicks: 2,
  snapshotInterval: 1024,
  snapshotLogBytesMin: 4 * 1024 * 1024,
  messageStoreCacheBytes: 32 * 1024 * 1024,
  messageStoreSegmentBytes: 64 * 1024 * 1024,
  maxMessageBytes: 16 * 1024 * 1024,
  maxPrefetch: 2000,
  maxPublishesPerBatch: 10_000,
  maxHeadersPerMessage: 1_024,
  maxHeaderDepth: 8,
  maxHeaderBytes: 1024 * 1024,
  maxSettlesPerRequest: 10_000,
  diskFreeLimitBytes: 1024 * 1024 * 1024,
  // RabbitMQ's vm_memory_high_watermark.
  memoryHighWatermark: 0.4,
  memoryHighWatermarkBytes: null,
  defaultReplicas: 3,
  requestTimeoutMs: 5000,
  exclusiveLeaseMs: 30_000,
  logLevel: 'info',
  idleHelperThreads: true,
  warmUp: true,
  requireAuthentication: false,
  admin: null,
} as const;

type Raw = Record<string, unknown>;

const ENV: Record<string, string> = {
  QUORUMQ_NODE_ID: 'nodeId',
  QUORUMQ_LISTEN: 'listen',
  QUORUMQ_ADVERTISE: 'advertise',
  QUORUMQ_PEER_LISTEN: 'peerListen',
  QUORUMQ_PEER_ADVERTISE: 'peerAdvertise',
  QUORUMQ_PEERS: 'peers',
  QUORUMQ_JOIN: 'join',
  QUORUMQ_TLS_CERT_FILE: 'tlsCertFile',
  QUORUMQ_TLS_KEY_FILE: 'tlsKeyFile',
  QUORUMQ_TLS_CA_FILE: 'tlsCaFile',
  QUORUMQ_TLS_CLIENT_CERTS: 'tlsClientCerts',
  QUORUMQ_TLS_REFRESH_MS: 'tlsRefreshMs',
  QUORUMQ_PEER_TLS_CERT_FILE: 'peerTlsCertFile',
  QUORUMQ_PEER_TLS_KEY_FILE: 'peerTlsKeyFile',
  QUORUMQ_PEER_TLS_CA_FILE: 'peerTlsCaFile',
  QUORUMQ_DATA_DIR: 'dataDir',
  QUORUMQ_METRICS_LISTEN: 'metricsListen',
  QUORUMQ_METRICS_QUEUE_LIMIT: 'metricsQueueLimit',
  QUORUMQ_TICK_MS: 'tickMs',
  QUORUMQ_ELECTION_TICKS: 'electionTicks',
  QUORUMQ_HEARTBEAT_TICKS: 'heartbeatTicks',
  QUORUMQ_SNAPSHOT_INTERVAL: 'snapshotInterval',
  QUORUMQ_SNAPSHOT_LOG_BYTES_MIN: 'snapshotLogBytesMin',
  QUORUMQ_MESSAGE_STORE_CACHE_BYTES: 'messageStoreCacheBytes',
  QUORUMQ_MESSAGE_STORE_SEGMENT_BYTES: 'messageStoreSegmentBytes',
  QUORUMQ_MAX_MESSAGE_BYTES: 'maxMessageBytes',
  QUORUMQ_MAX_PREFETCH: 'maxPrefetch',
  QUORUMQ_MAX_PUBLISHES_PER_BATCH: 'maxPublishesPerBatch',
  QUORUMQ_MAX_HEADERS_PER_MESSAGE: 'maxHeadersPerMessage',
  QUORUMQ_MAX_HEADER_DEPTH: 'maxHeaderDepth',
  QUORUMQ_MAX_HEADER_BYTES: 'maxHeaderBytes',
  QUORUMQ_MAX_SETTLES_PER_REQUEST: 'maxSettlesPerRequest',
  QUORUMQ_DISK_FREE_LIMIT_BYTES: 'diskFreeLimitBytes',
  QUORUMQ_MEMORY_HIGH_WATERMARK: 'memoryHighWatermark',
  QUORUMQ_MEMORY_HIGH_WATERMARK_BYTES: 'memoryHighWatermarkBytes',
  QUORUMQ_DEFAULT_REPLICAS: 'defaultReplicas',
  QUORUMQ_REQUEST_TIMEOUT_MS: 'requestTimeoutMs',
  QUORUMQ_LOG_LEVEL: 'logLevel',
  QUORUMQ_IDLE_HELPER_THREADS: 'idleHelperThreads',
  QUORUMQ_WARM_UP: 'warmUp',
  QUORUMQ_EXCLUSIVE_LEASE_MS: 'exclusiveLeaseMs',
  QUORUMQ_TEST_ONLY_CONFIRM_BEFORE_COMMIT: 'testOnlyConfirmBeforeCommit',
  QUORUMQ_CLUSTER_SECRET: 'clusterSecret',
  QUORUMQ_CLUSTER_SECRET_FILE: 'clusterSecretFile',
};

function flag(raw: Raw, key: string): boolean {
  const value = raw[key];
  if (value === undefined || value === false || value === 'false' || value === '0') return false;
  if (value === true || value === 'true' || value === '1') return true;
  throw new ConfigError(`${key} must be true or false, got ${JSON.stringify(value)}`);
}

/** A cluster secret is at least this long (`openssl rand -hex 32` makes one of 64). */
export const CLUSTER_SECRET_MIN_LENGTH = 16;

/** `n1=host:port,n2=host:port` or an object {n1: "host:port"}. */
function parsePeers(value: unknown): Map<string, string> {
  const peers = new Map<string, string>();
  if (typeof value === 'string') {
    for (const part of value.split(',').map((p) => p.trim()).filter((p) => p !== '')) {
      const eq = part.indexOf('=');
      if (eq <= 0) throw new ConfigError(`peers: expected id=host:port, got ${JSON.stringify(part)}`);
      peers.set(part.slice(0, eq), part.slice(eq + 1));
    }
  } else if (typeof value === 'object' && value !== null) {
    for (const [id, address] of Object.entries(value)) {
      if (typeof address !== 'string') throw new ConfigError(`peers.${id}: expected "host:port"`);
      peers.set(id, address);
    }
  } else {
    throw new ConfigError('peers: expected "id=host:port,..." or an object');
  }
  for (const [id, address] of peers) {
    if (!/^[A-Za-z0-9_.-]{1,64}$/.test(id)) throw new ConfigError(`peers: invalid node id ${JSON.stringify(id)}`);
    if (!/^[^:\s]+:\d{1,5}$/.test(address)) throw new ConfigError(`peers.${id}: invalid address ${JSON.stringify(address)}`);
  }
  return peers;
}

function integer(raw: Raw, key: string, fallback: number, min: number): number {
  const value = raw[key];
  if (value === undefined || value === null || value === '') return fallback;
  const n = typeof value === 'string' ? Number(value) : value;
  if (typeof n !== 'number' || !Number.isSafeInteger(n) || n < min) {
    throw new ConfigError(`${key}: expected an integer >= ${min}, got ${JSON.stringify(value)}`);
  }
  return n;
}

/** An integer >= min, or null when unset. */
function optionalInteger(raw: Raw, key: string, min: number): number | null {
  const value = raw[key];
  if (value === undefined || value === null || value === '') return null;
  return integer(raw, key, min, min);
}

/** A number in (0, 1]. */
function fraction(raw: Raw, key: string, fallback: number): number {
  const value = raw[key];
  if (value === undefined || value === null || value === '') return fallback;
  const n = typeof value === 'string' ? Number(value) : value;
  if (typeof n !== 'number' || !Number.isFinite(n) || n <= 0 || n > 1) {
    throw new ConfigError(`${key}: expected a fraction above 0 and at most 1 (e.g. 0.4 for 40%), got ${JSON.stringify(value)}`);
  }
  return n;
}

function text(raw: Raw, key: string, fallback: string | null): string | null {
  const value = raw[key];
  if (value === undefined || value === null || value === '') return fallback;
  if (typeof value !== 'string') throw new ConfigError(`${key}: expected a string, got ${JSON.stringify(value)}`);
  return value;
}

/** A host:port option, or null when unset. */
function address(raw: Raw, key: string): string | null {
  const value = text(raw, key, null);
  if (value === null) return null;
  if (splitAddress(value) === null) throw new ConfigError(`${key}: expected host:port, got ${JSON.stringify(value)}`);
  return value;
}

/**
 * The cluster secret, from `clusterSecret` or the file `clusterSecretFile` (its content,
 * surrounding whitespace removed). A node with peers refuses to start without one: it would
 * otherwise serve the peer services (which can rewrite the cluster's state) to anyone.
 */
function clusterSecret(raw: Raw, nodeId: string, peers: ReadonlyMap<string, string>, peerMutualTls: boolean): string | null {
  const inline = text(raw, 'clusterSecret', null);
  const file = text(raw, 'clusterSecretFile', null);
  if (inline !== null && file !== null) throw new ConfigError('set clusterSecret or clusterSecretFile, not both');
  let secret = inline;
  if (file !== null) {
    try {
      secret = readFileSync(file, 'utf8').trim();
    } catch (error) {
      throw new ConfigError(`clusterSecretFile: cannot read ${file}: ${error instanceof Error ? error.message : String(error)}`);
    }
  }
  if (secret === null || secret === '') {
    const others = [...peers.keys()].filter((id) => id !== nodeId);
    if (others.length === 0 || peerMutualTls) return null;
    throw new ConfigError(
      `a cluster secret is required: this node has peers (${others.join(', ')}) and serves them the peer services only with one ` +
        '(or with mutual TLS between the nodes: peerTlsCertFile, peerTlsKeyFile, peerTlsCaFile). ' +
        'Set QUORUMQ_CLUSTER_SECRET (or clusterSecret / clusterSecretFile in the config file) to the same secret on every node, ' +
        `at least ${CLUSTER_SECRET_MIN_LENGTH} characters (e.g. openssl rand -hex 32)`,
    );
  }
  if (secret.length < CLUSTER_SECRET_MIN_LENGTH) {
    throw new ConfigError(`the cluster secret is ${secret.length} characters; at least ${CLUSTER_SECRET_MIN_LENGTH} are required (e.g. openssl rand -hex 32)`);
  }
  return secret;
}

export function loadConfig(file: string | null, env: NodeJS.ProcessEnv = process.env, overrides: Raw = {}): NodeConfig {
  let raw: Raw = {};
  if (file !== null) {
    let parsed: unknown;
    try {
      parsed = JSON.parse(readFileSync(file, 'utf8'));
    } catch (error) {
      throw new ConfigError(`cannot read config ${file}: ${error instanceof Error ? error.message : String(error)}`);
    }
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) throw new ConfigError(`${file}: expected a JSON object`);
    raw = { ...(parsed as Raw) };
  }
  for (const [variable, key] of [...Object.entries(ENV), ...Object.entries(AUTH_ENV)]) {
    const value = env[variable];
    if (value !== undefined && value !== '') raw[key] = value;
  }
  raw = { ...raw, ...overrides };
  const known = new Set([...Object.values(ENV), ...Object.values(AUTH_ENV)]);
  for (const key of Object.keys(raw)) if (!known.has(key)) throw new ConfigError(`unknown configuration option ${JSON.stringify(key)}`);

  const nodeId = text(raw, 'nodeId', null);
  if (nodeId === null) throw new ConfigError('nodeId is required (or QUORUMQ_NODE_ID)');
  const listen = address(raw, 'listen') ?? DEFAULTS.listen;
  const advertise = address(raw, 'advertise') ?? listen;
  const peerListen = address(raw, 'peerListen');
  const peerAdvertiseSet = address(raw, 'peerAdvertise');
  const peers = raw.peers === undefined ? new Map([[nodeId, peerAdvertiseSet ?? peerListen ?? advertise]]) : parsePeers(raw.peers);
  if (!peers.has(nodeId)) throw new ConfigError(`peers must include this node (${nodeId})`);
  const peerAdvertise = checkListeners(nodeId, peers, { listen, advertise, peerListen, peerAdvertise: peerAdvertiseSet });
  const tlsRefreshMs = integer(raw, 'tlsRefreshMs', DEFAULTS.tlsRefreshMs, 100);
  const peerTls = peerTlsConfig(raw, nodeId);
  if (peerTls !== null && peerListen === null) {
    throw new ConfigError('peerTlsCertFile / peerTlsKeyFile / peerTlsCaFile are set but there is no peer listener: set peerListen (QUORUMQ_PEER_LISTEN) too, or remove them');
  }
  const dataDir = resolve(text(raw, 'dataDir', DEFAULTS.dataDir) ?? DEFAULTS.dataDir);
  const config: NodeConfig = {
    nodeId,
    listen,
    advertise,
    peerListen,
    peerAdvertise,
    peers,
    join: flag(raw, 'join'),
    tls: clientTlsConfig(raw),
    peerTls,
    tlsRefreshMs,
    dataDir,
    metricsListen: text(raw, 'metricsListen', DEFAULTS.metricsListen),
    metricsQueueLimit: integer(raw, 'metricsQueueLimit', DEFAULTS.metricsQueueLimit, 0),
    tickMs: integer(raw, 'tickMs', DEFAULTS.tickMs, 1),
    electionTicks: integer(raw, 'electionTicks', DEFAULTS.electionTicks, 2),
    heartbeatTicks: integer(raw, 'heartbeatTicks', DEFAULTS.heartbeatTicks, 1),
    snapshotInterval: integer(raw, 'snapshotInterval', DEFAULTS.snapshotInterval, 1),
    snapshotLogBytesMin: integer(raw, 'snapshotLogBytesMin', DEFAULTS.snapshotLogBytesMin, 0),
    messageStoreCacheBytes: integer(raw, 'messageStoreCacheBytes', DEFAULTS.messageStoreCacheBytes, 0),
    messageStoreSegmentBytes: integer(raw, 'messageStoreSegmentBytes', DEFAULTS.messageStoreSegmentBytes, 4096),
    maxMessageBytes: integer(raw, 'maxMessageBytes', DEFAULTS.maxMessageBytes, 1),
    maxPrefetch: integer(raw, 'maxPrefetch', DEFAULTS.maxPrefetch, 1),
    maxPublishesPerBatch: integer(raw, 'maxPublishesPerBatch', DEFAULTS.maxPublishesPerBatch, 1),
    maxHeadersPerMessage: integer(raw, 'maxHeadersPerMessage', DEFAULTS.maxHeadersPerMessage, 0),
    maxHeaderDepth: integer(raw, 'maxHeaderDepth', DEFAULTS.maxHeaderDepth, 0),
    maxHeaderBytes: integer(raw, 'maxHeaderBytes', DEFAULTS.maxHeaderBytes, 0),
    maxSettlesPerRequest: integer(raw, 'maxSettlesPerRequest', DEFAULTS.maxSettlesPerRequest, 1),
    diskFreeLimitBytes: integer(raw, 'diskFreeLimitBytes', DEFAULTS.diskFreeLimitBytes, 0),
    memoryHighWatermark: fraction(raw, 'memoryHighWatermark', DEFAULTS.memoryHighWatermark),
    memoryHighWatermarkBytes: optionalInteger(raw, 'memoryHighWatermarkBytes', 0),
    defaultReplicas: integer(raw, 'defaultReplicas', DEFAULTS.defaultReplicas, 1),
    requestTimeoutMs: integer(raw, 'requestTimeoutMs', DEFAULTS.requestTimeoutMs, 100),
    exclusiveLeaseMs: integer(raw, 'exclusiveLeaseMs', DEFAULTS.exclusiveLeaseMs, 100),
    logLevel: text(raw, 'logLevel', DEFAULTS.logLevel) ?? DEFAULTS.logLevel,
    idleHelperThreads: raw.idleHelperThreads === undefined ? DEFAULTS.idleHelperThreads : flag(raw, 'idleHelperThreads'),
    warmUp: raw.warmUp === undefined ? DEFAULTS.warmUp : flag(raw, 'warmUp'),
    clusterSecret: clusterSecret(raw, nodeId, peers, peerTls !== null),
    ...authConfig(raw, (message) => new ConfigError(message)),
    testOnlyConfirmBeforeCommit: raw.testOnlyConfirmBeforeCommit === true || raw.testOnlyConfirmBeforeCommit === '1',
  };
  if (config.heartbeatTicks >= config.electionTicks) throw new ConfigError('heartbeatTicks must be below electionTicks');
  return config;
}
