/**
 * Starts a node: storage, Raft groups, and two gRPC servers. The client server on `listen`
 * serves the client API (Broker), standard health checking and server reflection, in
 * plaintext or TLS (tls-credentials.ts). The peer server on `peerListen` serves the peer
 * services (RaftTransport, Peer) and the Broker calls other nodes proxy to this one, to
 * authenticated peers only (peer-auth.ts, via-peer.ts), in plaintext or mutual TLS. A single
 * node may have no peer server.
 */
import { Metadata, Server, ServerCredentials, type sendUnaryData, type ServerUnaryCall } from '@grpc/grpc-js';
import { BrokerService, PeerService, quorumq } from '@quorumq/proto';
import { HealthImplementation } from 'grpc-health-check';
import { pino, type Logger } from 'pino';

import type { NodeConfig } from './config.js';
import { BrokerError, Reason, Status } from './errors.js';
import { BrokerNode, type BrokerNodeHost } from './node.js';
import { addReflection } from './reflection.js';
import { responseSentInterceptor } from './response-sent.js';
import { checkBindingArguments, checkConsumeRequest, type RequestLimits } from './request-limits.js';
import { BrokerApi } from './service.js';
import { ensureFirstAdministrator } from './user-admin.js';
import { auditLogger } from './audit-log.js';
import { PeerAuthenticator, claimedNodeId, type PeerCall } from './peer-auth.js';
import { PeerCredentials, clientListenerCredentials } from './tls-credentials.js';
import { authenticatedPeersOnly } from './via-peer.js';
import { ForwardError, raftStreamHandler, serveRaftStreams } from './transport.js';
import { lenient, refuseUnreadable } from './unreadable.js';
import { decodePublishBatch, decodePublishRequest, encodeConsumeResponse } from './wire.js';
import { widenServerWindows } from './http2-window.js';
import { brokerStreamMethods, serveBrokerStreams } from './served-broker-streams.js';

import pb = quorumq.v1;

export interface RunningNode {
  readonly node: BrokerNode;
  /** The client address (`advertise`). */
  readonly address: string;
  /** The port the peer listener bound, or null without one. */
  readonly peerPort: number | null;
  readonly logger: Logger;
  /** Hands off leadership, then stops everything. */
  shutdown(): Promise<void>;
  /** Stops at once (no hand-off). */
  stop(): Promise<void>;
}

export function createLogger(config: Pick<NodeConfig, 'nodeId' | 'logLevel'>): Logger {
  return pino({ level: config.logLevel, base: { node: config.nodeId } });
}

/** A generated deserializer that first checks the request's bytes (request-limits.ts). */
function checked<T>(deserialize: (bytes: Buffer) => T, check: (bytes: Buffer, limits: RequestLimits) => void, limits: RequestLimits) {
  return (bytes: Buffer): T => {
    check(bytes, limits);
    return deserialize(bytes);
  };
}

/**
 * The Broker service as served: publishes keep the client's encoded message, which goes into
 * the log as is, deliveries send the stored bytes as the message (wire.ts); requests are
 * bounded before they are decoded (request-limits.ts), and every deserializer is lenient
 * (unreadable.ts: a request that cannot be read is refused with a status naming the problem).
 */
function brokerServiceFor(limits: RequestLimits): typeof BrokerService {
  const service = {
    ...BrokerService,
    publish: { ...BrokerService.publish, requestDeserialize: (bytes: Buffer) => decodePublishRequest(bytes, limits) },
    publishStream: { ...BrokerService.publishStream, requestDeserialize: (bytes: Buffer) => decodePublishBatch(bytes, limits) },
    consume: {
      ...BrokerService.consume,
      requestDeserialize: checked(BrokerService.consume.requestDeserialize, checkConsumeRequest, limits),
      responseSerialize: encodeConsumeResponse,
    },
    bind: { ...BrokerService.bind, requestDeserialize: checked(BrokerService.bind.requestDeserialize, checkBindingArguments, limits) },
    unbind: { ...BrokerService.unbind, requestDeserialize: checked(BrokerService.unbind.requestDeserialize, checkBindingArguments, limits) },
  };
  const served: Record<string, unknown> = {};
  for (const [name, method] of Object.entries(service)) {
    served[name] = { ...method, requestDeserialize: lenient(method.path, method.requestDeserialize as (bytes: Buffer) => unknown) };
  }
  return served as typeof BrokerService;
}

/** Creates the configured first administrator, and says how clients authenticate here. */
async function startAuthentication(config: NodeConfig, node: BrokerNode, logger: Logger, stopped: () => boolean): Promise<void> {
  if (config.admin !== null) {
    await ensureFirstAdministrator(
      config.admin,
      { users: () => node.meta.users, propose: (command) => node.router.proposeMeta(command), logger: auditLogger(logger) },
      stopped,
      (ms) => new Promise((done) => setTimeout(done, ms)),
    );
  }
  if (!config.requireAuthentication) {
    logger.info('client authentication is off (requireAuthentication): every client may do everything');
  } else if (node.meta.users.size === 0) {
    logger.warn('client authentication is required but no user exists: no client can connect; set adminUser and adminPassword (QUORUMQ_ADMIN_USER / QUORUMQ_ADMIN_PASSWORD)');
  }
}

export async function startNode(
  config: NodeConfig,
  options: {
    logger?: Logger;
    onFatal?: (error: unknown) => void;
    /** How often a node without a metadata leader says so in its log while it waits to serve (default 60 s). */
    servingWaitLogMs?: number;
  } & BrokerNodeHost = {},
): Promise<RunningNode> {
  const logger = options.logger ?? createLogger(config);
  const onFatal =
    options.onFatal ??
    ((error: unknown) => {
      logger.fatal({ err: error }, 'fatal error, exiting');
      process.exit(70);
    });
  const peerCredentials = new PeerCredentials(config, logger);
  const node = await BrokerNode.start(config, logger, onFatal, { ...options, peerCredentials });
  const api = new BrokerApi(node, peerCredentials);
  const serverOptions = {
    'grpc.max_receive_message_length': Math.max(64 * 1024 * 1024, config.maxMessageBytes + 1024 * 1024),
    'grpc.max_send_message_length': Math.max(64 * 1024 * 1024, config.maxMessageBytes + 1024 * 1024),
    // Unreadable requests are INVALID_ARGUMENT (unreadable.ts); an auto-ack get acks only a
    // response that was sent (response-sent.ts).
    interceptors: [refuseUnreadable, responseSentInterceptor([BrokerService.get.path])],
  };
  // Clients: the Broker service, health, reflection. No peer service: a client calling one
  // here gets UNIMPLEMENTED.
  const server = new Server(serverOptions);
  widenServerWindows(server);
  const brokerService = brokerServiceFor(config);
  const implementation = api.implementation();
  // PublishStream and Consume on node:http2 itself, everything else on grpc-js (served-broker-streams.ts).
  serveBrokerStreams(server, implementation, brokerStreamMethods(brokerService), serverOptions['grpc.max_receive_message_length']);
  server.addService(brokerService, implementation);
  const health = new HealthImplementation({ '': 'NOT_SERVING', 'quorumq.v1.Broker': 'NOT_SERVING' });
  health.addToServer(server);
  addReflection(server);
  const peerServer = config.peerListen === null ? null : peerServerOf(config, node, api, peerCredentials, serverOptions);

  const bind = (target: Server, address: string, credentials: ServerCredentials): Promise<number> =>
    new Promise<number>((resolvePort, reject) => {
      target.bindAsync(address, credentials, (error, boundPort) => (error ? reject(error) : resolvePort(boundPort)));
    });
  let port: number;
  let peerPort: number | null = null;
  try {
    port = await bind(server, config.listen, clientListenerCredentials(config, logger));
    if (peerServer !== null && config.peerListen !== null) peerPort = await bind(peerServer, config.peerListen, peerCredentials.listener());
  } catch (error) {
    server.forceShutdown();
    peerServer?.forceShutdown();
    api.close();
    await node.stop().catch(() => undefined);
    throw error;
  }
  logger.info(
    {
      listen: config.listen,
      port,
      advertise: config.advertise,
      clientTls: config.tls === null ? 'off' : `on, client certificates ${config.tls.clientCerts}`,
      peerListen: config.peerListen,
      peerPort,
      peerTls: config.peerTls === null ? 'off' : 'mutual',
      peers: Object.fromEntries(node.directory.peers()),
      ...(config.join ? { join: true } : {}),
      dataDir: config.dataDir,
    },
    'node listening',
  );

  let stopped = false;
  // Serving once the metadata group has a leader (the cluster has a quorum), however long
  // that takes (a whole cluster restarting with thousands of queues elects them all first).
  void (async () => {
    while (!stopped && !node.removed && !(await node.waitForMetaLeader(options.servingWaitLogMs ?? 60_000))) {
      if (!stopped && !node.removed) logger.warn('no metadata leader yet (is a majority of the nodes up?); not serving until there is one');
    }
    if (stopped || node.removed) return;
    health.setStatus('', 'SERVING');
    health.setStatus('quorumq.v1.Broker', 'SERVING');
    logger.info({ metadataLeader: node.metaGroup.leaderId }, 'node serving');
    await startAuthentication(config, node, logger, () => stopped);
  })();

  node.onRemoved(() => {
    health.setStatus('', 'NOT_SERVING');
    health.setStatus('quorumq.v1.Broker', 'NOT_SERVING');
  });

  const finish = async (handOff: boolean): Promise<void> => {
    if (stopped) return;
    stopped = true;
    health.setStatus('', 'NOT_SERVING');
    health.setStatus('quorumq.v1.Broker', 'NOT_SERVING');
    if (handOff) await node.shutdown();
    else await node.stop();
    api.close();
    // Peers keep their Raft streams open: give calls in progress a moment, then close all.
    await Promise.all(
      [server, ...(peerServer === null ? [] : [peerServer])].map(
        (target) =>
          new Promise<void>((done) => {
            const timer = setTimeout(done, 500);
            target.tryShutdown(() => {
              clearTimeout(timer);
              done();
            });
          }),
      ),
    );
    server.forceShutdown();
    peerServer?.forceShutdown();
  };
  return { node, address: config.advertise, peerPort, logger, shutdown: () => finish(true), stop: () => finish(false) };
}

/**
 * The peer server: the peer services and the Broker service (for calls other nodes proxy),
 * each call served only to an authenticated peer; a refused one is counted
 * (`quorumq_peer_calls_refused_total{call}`) and logged at most once per 10 s per call kind.
 */
function peerServerOf(
  config: NodeConfig,
  node: BrokerNode,
  api: BrokerApi,
  credentials: PeerCredentials,
  serverOptions: ConstructorParameters<typeof Server>[0],
): Server {
  const logger = node.logger;
  const server = new Server(serverOptions);
  widenServerWindows(server);
  // The cluster's nodes now: a node added later is served, a removed one refused.
  const peers = {
    has: (id: string): boolean => node.directory.has(id),
    introduce: (id: string, peerAddress: string): boolean => node.introducePeer(id, peerAddress),
    isRemoved: (id: string): boolean => node.directory.isRemoved(id),
  };
  const authenticator = new PeerAuthenticator(config.nodeId, peers, config.clusterSecret, credentials.mutualTls);
  const refusedCall = (call: 'raft_stream' | 'propose_batch' | 'fetch_bodies' | 'broker', claimed: string): void => {
    node.metrics.peerCallsRefused.inc({ call });
    node.warnings.warn(
      `peer-call:${call}`,
      { call, claimedNode: claimed.slice(0, 64) },
      credentials.mutualTls
        ? 'refused a peer call without valid cluster credentials (no certificate from the cluster CA naming the node it claims to be, or another cluster secret) or from a removed node'
        : 'refused a peer call without valid cluster credentials (a client on the peer listener, or a node with another cluster secret) or from a removed node',
    );
  };
  serveRaftStreams(
    server,
    raftStreamHandler({
      selfId: config.nodeId,
      authenticator,
      onMessage: (message) => node.receive(message),
      onBatch: (peer) => node.heardFrom(peer),
      onClientAddress: (peer, address) => node.learnClientAddress(peer, address),
      incarnations: node.incarnations,
      onLostOwnData: (peer) => node.lostOwnData(peer),
      onWrongNode: (to, from) => {
        node.metrics.peerStreamsRefused.inc();
        logger.warn({ to, from }, 'a peer sent Raft messages for another node here (stale address); refused its stream');
      },
      onRefused: (reason, peer, claimedFrom) => {
        if (reason === 'unauthenticated') {
          refusedCall('raft_stream', claimedFrom);
          return;
        }
        node.metrics.raftMessagesRefused.inc({ reason });
        node.warnings.warn(
          `raft:${reason}`,
          { reason, peer, from: claimedFrom.slice(0, 64) },
          reason === 'sender_mismatch'
            ? 'dropped a Raft message a peer sent in another node\'s name'
            : reason === 'incarnation_changed'
              ? 'refused a peer that came back under its id with another data directory (lost or replaced): it must be replaced under a new id'
              : 'dropped a malformed Raft message',
        );
      },
    }),
  );
  server.addService(PeerService, {
    proposeBatch: (
      call: ServerUnaryCall<pb.ProposeBatchRequest, pb.ProposeBatchResponse.$Properties>,
      callback: sendUnaryData<pb.ProposeBatchResponse.$Properties>,
    ) => {
      if (authenticator.authenticate(call) === null) {
        refusedCall('propose_batch', claimedNodeId(call));
        callback(authenticator.refusal(call));
        return;
      }
      // Proposed in order, in this turn; answered together once all are settled.
      const results = call.request.items.map((item) =>
        node.router.handleForwarded(item.groupId ?? '', item.command ?? new Uint8Array(0)).then(
          (reply): pb.ProposeResult.$Properties => ({ reply }),
          (error: unknown): pb.ProposeResult.$Properties => {
            if (error instanceof ForwardError) {
              return { errorCode: error.code, errorReason: error.reason, errorMessage: error.message, leaderId: error.leaderId ?? '' };
            }
            if (error instanceof BrokerError) return { errorCode: error.code, errorReason: error.reason, errorMessage: error.message };
            return { errorCode: Status.INTERNAL, errorReason: Reason.INTERNAL, errorMessage: error instanceof Error ? error.message : String(error) };
          },
        ),
      );
      Promise.all(results).then((all) => callback(null, { results: all }));
    },
    fetchBodies: (
      call: ServerUnaryCall<pb.FetchBodiesRequest, pb.FetchBodiesResponse.$Properties>,
      callback: sendUnaryData<pb.FetchBodiesResponse.$Properties>,
    ) => {
      if (authenticator.authenticate(call) === null) {
        refusedCall('fetch_bodies', claimedNodeId(call));
        callback(authenticator.refusal(call));
        return;
      }
      const request = call.request;
      try {
        const ids = request.messageIds.map(Number);
        const served = node.serveSnapshotBodies(request.groupId ?? '', Number(request.snapshotIndex ?? 0), ids, request.bytesMax ?? 0);
        callback(null, { bodies: served.map((body) => (body === null ? { missing: true } : { body })) });
      } catch (error) {
        const code = error instanceof BrokerError ? error.code : Status.INTERNAL;
        callback({ code, details: error instanceof Error ? error.message : String(error), metadata: new Metadata() });
      }
    },
  });
  // Client calls other nodes proxy to this one (service.ts, clientFor): the same API, each
  // call marked as coming from the peer (via-peer.ts).
  server.addService(
    brokerServiceFor(config),
    authenticatedPeersOnly(
      api.implementation({ viaPeer: true }),
      (call: PeerCall) => authenticator.authenticate(call),
      (call: PeerCall) => {
        refusedCall('broker', claimedNodeId(call));
        return authenticator.refusal(call);
      },
    ),
  );
  return server;
}
