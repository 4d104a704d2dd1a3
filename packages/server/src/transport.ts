/**
 * Node-to-node traffic. Raft messages of every group travel on one long-lived gRPC stream
 * per peer: everything queued for a peer during an event-loop turn leaves as one
 * RaftBatch. A broken stream drops what was queued (Raft retransmits) and reconnects with
 * a bounded back-off. Forwarded proposals use the unary Peer.Propose call. Every call goes
 * to the peer's own listener (its address in `peers`), over mutual TLS when the cluster has
 * it (tls-credentials.ts), and carries this node's id and the cluster secret when there is
 * one (peer-auth.ts); the receiving side serves only configured peers that prove who they
 * are, and steps only messages sent in their own name. A Raft stream also carries this
 * node's client address, which the peer tells clients (BrokerNode.addressOf).
 */
import {
  Metadata,
  status as Status,
  makeGenericClientConstructor,
  type Client,
  type Server,
  type ServiceError,
} from '@grpc/grpc-js';
import { PeerService, RaftTransportService, quorumq } from '@quorumq/proto';
import type { Message, NodeId } from '@quorumq/raft';
import type { Logger } from 'pino';

import { splitAddress } from './listener-config.js';
import { NODE_REMOVED_PEER, PEER_CLIENT_ADDRESS_METADATA, claimedNodeId, peerCallMetadata, type PeerAuthenticator, type PeerCall } from './peer-auth.js';
import { PeerCredentials } from './tls-credentials.js';
import { INCARNATION_CHANGED, INCARNATION_METADATA, LOST_DATA, YOUR_INCARNATION_METADATA, type NodeIncarnations } from './node-incarnation.js';
import { RAFT_BATCH_BYTES_MAX, RAFT_STREAM_BYTES_MAX, decodeRaftBatch, encodeRaftBatch, raftBatchChunks, type GroupMessage, type WireMessage } from './raft-codec.js';
import { DEFERRED_APPEND_MS, EAGER_HEARD_WITHIN_MS, HEDGE_AFTER_MS, coalesceAppends, deferrableAppends, holdFills } from './append-fanout.js';
import type { HeldLoad } from './append-fanout.js';
import { FETCH_BYTES_MAX } from './snapshot-bodies.js';
import { CHANNEL_WINDOW_OPTIONS, HTTP2_WINDOW_BYTES } from './http2-window.js';
import { DialledStream, ServedStream, type StreamStatus } from './bare-grpc-stream.js';
import { onHttp2Server, serveOnHttp2Server } from './grpc-http2-server.js';

import pb = quorumq.v1;

const PeerClient = makeGenericClientConstructor(PeerService, 'Peer');

const CHANNEL_OPTIONS = {
  'grpc.max_receive_message_length': 64 * 1024 * 1024,
  'grpc.max_send_message_length': 64 * 1024 * 1024,
  'grpc.keepalive_time_ms': 10_000,
  'grpc.keepalive_timeout_ms': 5_000,
  // A peer that is down is tried again at least every 250 ms: after a full-cluster restart
  // the first node up had backed off to a second by the time the others listened (measured:
  // 1.1-1.9 s of the 1M-message restart were spent waiting here). A refused connect costs
  // nothing; an unreachable peer's connect attempt times out on its own clock.
  'grpc.initial_reconnect_backoff_ms': 50,
  'grpc.max_reconnect_backoff_ms': 250,
  // Answers and fetched bodies arrive without waiting for HTTP/2 credit (http2-window.ts).
  ...CHANNEL_WINDOW_OPTIONS,
};

/** A peer's connection not up within this is tried again (a host that drops packets answers nothing). */
const CONNECT_TIMEOUT_MS = 5_000;

/**
 * What may wait to be sent to one peer (not connected yet, or not reading): beyond it a batch
 * is dropped, as a lossy network would drop it, and Raft sends again. 256 MiB: a turn that
 * catches a follower up sends 96 MiB (24 appends of the core's 4 MiB), and grpc-js, which
 * carried the stream before, held any amount.
 */
const STREAM_BUFFERED_BYTES_MAX = 16 * RAFT_BATCH_BYTES_MAX;

/**
 * The hold's and the hedge's timers, unref'd (the node's servers keep it alive). At one
 * operation in flight the hedge's is set and cleared on every operation; a ref'd timer, the
 * only one of the node (its others are unref'd, NodeEnv.after), toggles the loop's timer
 * handle's reference through a native call both times: 273-276 ns per set and clear against
 * 68-82 unref'd, in a warm loop of their own (node 20).
 */
function unrefTimer(run: () => void, ms: number): NodeJS.Timeout {
  const timer = setTimeout(run, ms);
  timer.unref();
  return timer;
}

interface Forward {
  readonly groupId: string;
  readonly command: Uint8Array;
  readonly deadline: number;
  readonly resolve: (reply: Uint8Array) => void;
  readonly reject: (error: unknown) => void;
}

/** A forwarded proposal the leader refused (or that failed there), with its status. */
export class ForwardError extends Error {
  constructor(
    readonly code: number,
    readonly reason: string,
    message: string,
    readonly leaderId: NodeId | null,
  ) {
    super(message);
    this.name = 'ForwardError';
  }
}

interface PeerLink {
  readonly id: NodeId;
  readonly address: string;
  peerClient: Client;
  stream: DialledStream | null;
  queued: GroupMessage[];
  /** Appends a commit does not wait for, held until the deferred flush (append-fanout.ts). */
  deferred: GroupMessage[];
  /** What `deferred` carries. */
  held: HeldLoad;
  /** When a batch from the peer last arrived (Date.now()). */
  heardAt: number;
  /** When appends with entries went to the peer at once and nothing has come back since (performance.now()), or null. */
  awaitingSince: number | null;
  reconnectAt: number;
  connected: boolean;
  forwards: Forward[];
  forwardScheduled: boolean;
  /** Set once the peer refused this node's credentials, until a stream opens again. */
  refusedWarned: boolean;
  /** Set once the address led to a node whose certificate names another, until a stream opens again. */
  misdirectedWarned: boolean;
}

/**
 * Whether `item`, queued for `link`, may wait with the link's held appends: an append this
 * flush's choice defers (append-fanout.ts; `deferrable` is null while appends are not held),
 * or an empty append of a group whose appends the link already holds, whether or not the
 * eager follower is busy: it carries nothing a commit needs, and the held appends leave
 * with the next entries sent at once anyway. The leader's Raft sends a follower that is
 * behind an empty append after each of its heartbeat answers; the follower a commit does
 * not need is always a little behind, so without this every heartbeat (with the held
 * appends it takes along) was followed by that empty append, sent at once, and by the next
 * entries sent at once too until the follower answered it: two or three more wake-ups for
 * that follower per beat.
 */
function mayHold(link: PeerLink, item: GroupMessage, deferrable: ReadonlyMap<string, ReadonlySet<NodeId>> | null): boolean {
  const { groupId, message } = item;
  if (message.type !== 'append') return false;
  if (deferrable?.get(groupId)?.has(link.id) === true) return true;
  return message.entries.length === 0 && link.deferred.some((held) => held.groupId === groupId);
}

function carriesEntries(item: GroupMessage): boolean {
  return item.message.type === 'append' && item.message.entries.length > 0;
}

export class PeerTransport {
  private readonly links = new Map<NodeId, PeerLink>();
  private flushScheduled = false;
  private deferredTimer: NodeJS.Timeout | null = null;
  private hedgeTimer: NodeJS.Timeout | null = null;
  private closed = false;

  /** The id and secret sent with every call (see peer-auth.ts). */
  private readonly metadata: Metadata;
  /** The same, with this node's client address: the Raft stream's. */
  private readonly streamMetadata: Metadata;
  private readonly credentials: PeerCredentials;
  private readonly incarnations: NodeIncarnations | null;
  private readonly onLostOwnData: (peer: NodeId) => void;
  private readonly onToldRemoved: (peer: NodeId) => void;
  private readonly deferredAppendMs: number;
  private readonly hedgeAfterMs: number;

  constructor(
    readonly selfId: NodeId,
    peers: ReadonlyMap<NodeId, string>,
    /** The cluster secret (config.clusterSecret); with neither it nor peer TLS a node has no peers to call. */
    secret: string | null,
    private readonly logger: Logger,
    /** Called for each batch sent, with its number of messages (metrics). */
    private readonly onBatch: (messages: number) => void = () => {},
    channels: {
      /** Peer TLS (none: plaintext). */
      readonly credentials?: PeerCredentials;
      /** This node's client address, told to every peer on the Raft stream. */
      readonly clientAddress?: string;
      /** This node's incarnation and its peers' (node-incarnation.ts), told on the Raft streams. */
      readonly incarnations?: NodeIncarnations;
      /** A peer knew another incarnation of this node: its data directory was lost (it must stop). */
      readonly onLostOwnData?: (peer: NodeId) => void;
      /** A peer refused this node's Raft stream because its registry names this node as removed (PeerAuthenticator.refusal). */
      readonly onToldRemoved?: (peer: NodeId) => void;
      /** The longest appends a commit does not need are held (append-fanout.ts; DEFERRED_APPEND_MS). */
      readonly deferredAppendMs?: number;
      /** How long an eager follower may leave appends unanswered before the held ones leave (HEDGE_AFTER_MS). */
      readonly hedgeAfterMs?: number;
    } = {},
  ) {
    this.deferredAppendMs = channels.deferredAppendMs ?? DEFERRED_APPEND_MS;
    this.hedgeAfterMs = channels.hedgeAfterMs ?? HEDGE_AFTER_MS;
    this.incarnations = channels.incarnations ?? null;
    this.onLostOwnData = channels.onLostOwnData ?? (() => {});
    this.onToldRemoved = channels.onToldRemoved ?? (() => {});
    this.credentials = channels.credentials ?? new PeerCredentials({ peerTls: null, tlsRefreshMs: 60_000 }, logger);
    if (secret === null && !this.credentials.mutualTls && [...peers.keys()].some((id) => id !== selfId)) {
      throw new Error('a node with peers needs a cluster secret or peer mutual TLS');
    }
    // This node's peer address goes with every call: a peer that does not know this node yet admits it by it.
    const ownPeerAddress = peers.get(selfId);
    this.metadata = peerCallMetadata(selfId, secret, undefined, ownPeerAddress);
    this.streamMetadata = peerCallMetadata(selfId, secret, channels.clientAddress, ownPeerAddress);
    for (const [id, address] of peers) if (id !== selfId) this.links.set(id, this.linkTo(id, address));
  }

  private linkTo(id: NodeId, address: string): PeerLink {
    return {
      id,
      address,
      peerClient: this.peerClientOf(id, address),
      stream: null,
      queued: [],
      deferred: [],
      held: { entries: 0, bytes: 0 },
      heardAt: 0,
      awaitingSince: null,
      reconnectAt: 0,
      connected: false,
      forwards: [],
      forwardScheduled: false,
      refusedWarned: false,
      misdirectedWarned: false,
    };
  }

  /**
   * The cluster's nodes changed (cluster-directory.ts): links to new peers (or to a peer's new
   * address) open, those to removed peers close, their forwarded proposals failing.
   */
  setPeers(peers: ReadonlyMap<NodeId, string>): void {
    if (this.closed) return;
    for (const [id, link] of this.links) {
      if (peers.get(id) === link.address) continue;
      this.closeLink(link);
      this.links.delete(id);
    }
    for (const [id, address] of peers) {
      if (id === this.selfId || this.links.has(id)) continue;
      this.links.set(id, this.linkTo(id, address));
      this.logger.info({ peer: id, address }, 'peer added');
    }
  }

  private closeLink(link: PeerLink): void {
    link.stream?.end();
    link.stream = null;
    link.connected = false;
    link.awaitingSince = null;
    this.takeDeferred(link);
    for (const forward of link.forwards) forward.reject(new Error(`peer ${link.id} left the cluster`));
    link.forwards = [];
    link.peerClient.close();
  }

  /**
   * Queues a group's messages for their peers. They leave once the code running now and the
   * microtasks queued before the first send are done (a microtask, not an immediate: a reply
   * does not wait for the next turn of the event loop). Every group's Ready loop that runs in
   * one callback or resumes from one WAL flush sends before that, so their messages share a
   * batch per peer.
   */
  send(groupId: string, messages: readonly Message[]): void {
    for (const message of messages) {
      const link = this.links.get(message.to);
      if (link === undefined) continue;
      link.queued.push({ groupId, message });
    }
    if (!this.flushScheduled) {
      this.flushScheduled = true;
      queueMicrotask(this.flushQueued);
    }
  }

  private readonly flushQueued = (): void => this.flush();

  /** A batch (or a beat) arrived from `peer`: it is healthy, and answered (see append-fanout.ts). */
  heardFrom(peer: NodeId): void {
    const link = this.links.get(peer);
    if (link === undefined) return;
    link.heardAt = Date.now();
    link.awaitingSince = null;
    // Every follower sent appends at once answered: no wake-up to check on them.
    if (this.hedgeTimer !== null && !this.awaitingAny()) {
      clearTimeout(this.hedgeTimer);
      this.hedgeTimer = null;
    }
  }

  private readonly isHealthy = (peer: NodeId): boolean => {
    const link = this.links.get(peer);
    return link !== undefined && link.connected && Date.now() - link.heardAt <= EAGER_HEARD_WITHIN_MS;
  };

  /**
   * Reopens the broken streams whose back-off is over, even with nothing to send: a node
   * that only follows never sends to the other followers, and their stream (and the
   * `reachable` it reports) would otherwise stay down after a partition heals.
   */
  keepAlive(): void {
    if (this.closed) return;
    const now = Date.now();
    for (const link of this.links.values()) if (link.stream === null && now >= link.reconnectAt) this.streamOf(link);
  }

  beat(): void {
    if (this.closed) return;
    for (const link of this.links.values()) {
      // A batch already queued this turn carries the sign of life.
      if (link.queued.length > 0) continue;
      this.streamOf(link)?.write(encodeRaftBatch([], true));
    }
  }

  /** True when the stream to the peer is open (a hint for status pages). */
  isConnected(peer: NodeId): boolean {
    return this.links.get(peer)?.connected ?? false;
  }

  /**
   * Forwards a proposal to `peer` (the group's leader); resolves with its reply bytes, or
   * rejects with a ForwardError (the leader's refusal) or the call's gRPC error. Proposals
   * for one peer made during one event-loop turn leave in one ordered batch.
   */
  propose(peer: NodeId, groupId: string, command: Uint8Array, timeoutMs: number): Promise<Uint8Array> {
    const link = this.links.get(peer);
    if (link === undefined) return Promise.reject(new Error(`unknown peer ${peer}`));
    return new Promise((resolve, reject) => {
      link.forwards.push({ groupId, command, deadline: Date.now() + timeoutMs, resolve, reject });
      if (!link.forwardScheduled) {
        link.forwardScheduled = true;
        setImmediate(() => this.flushForwards(link));
      }
    });
  }

  private flushForwards(link: PeerLink): void {
    link.forwardScheduled = false;
    const batch = link.forwards;
    link.forwards = [];
    if (batch.length === 0) return;
    const deadline = Math.max(...batch.map((f) => f.deadline));
    link.peerClient.makeUnaryRequest(
      PeerService.proposeBatch.path,
      PeerService.proposeBatch.requestSerialize,
      PeerService.proposeBatch.responseDeserialize,
      { items: batch.map((f) => ({ groupId: f.groupId, command: f.command })) },
      this.metadata.clone(),
      { deadline },
      (error: ServiceError | null, response?: pb.ProposeBatchResponse) => {
        batch.forEach((forward, i) => {
          const result = response?.results[i];
          if (error !== null || result === undefined) forward.reject(error ?? new Error('short batch response'));
          else if ((result.errorCode ?? 0) !== 0) {
            forward.reject(new ForwardError(result.errorCode ?? 0, result.errorReason ?? '', result.errorMessage ?? '', result.leaderId || null));
          } else forward.resolve(result.reply ?? new Uint8Array(0));
        });
      },
    );
  }

  /** See PeerLink.fetchBodies: one unary Peer.FetchBodies call. */
  fetchBodies(peer: NodeId, groupId: string, snapshotIndex: number, ids: readonly number[], timeoutMs: number): Promise<ReadonlyArray<Uint8Array | null>> {
    const link = this.links.get(peer);
    if (link === undefined) return Promise.reject(new Error(`unknown peer ${peer}`));
    return new Promise((resolve, reject) => {
      link.peerClient.makeUnaryRequest(
        PeerService.fetchBodies.path,
        PeerService.fetchBodies.requestSerialize,
        PeerService.fetchBodies.responseDeserialize,
        { groupId, snapshotIndex, messageIds: ids as number[], bytesMax: FETCH_BYTES_MAX },
        this.metadata.clone(),
        { deadline: Date.now() + timeoutMs },
        (error: ServiceError | null, response?: pb.FetchBodiesResponse) => {
          if (error !== null || response === undefined) reject(error ?? new Error('no response'));
          else resolve(response.bodies.map((body) => (body.missing === true ? null : (body.body ?? new Uint8Array(0)))));
        },
      );
    });
  }

  close(): void {
    this.closed = true;
    if (this.deferredTimer !== null) clearTimeout(this.deferredTimer);
    this.deferredTimer = null;
    if (this.hedgeTimer !== null) clearTimeout(this.hedgeTimer);
    this.hedgeTimer = null;
    for (const link of this.links.values()) this.closeLink(link);
  }

  /**
   * Sends what the turn queued. Appends to followers a commit does not need are held
   * (append-fanout.ts) until the deferred flush, or until they carry enough to leave, or
   * until a follower sent appends at once has not answered for HEDGE_AFTER_MS, or until
   * something else leaves for that peer: then they go with it, before it (a peer's
   * messages stay in order).
   */
  private flush(): void {
    this.flushScheduled = false;
    if (this.closed) return;
    let queued: Map<NodeId, GroupMessage[]> | null = null;
    for (const link of this.links.values()) if (link.queued.length > 0) (queued ??= new Map()).set(link.id, link.queued);
    if (queued === null) return;
    // Appends are held only while no healthy follower has entries in flight unanswered: at
    // one operation in flight the eager follower has answered before the next append, but
    // under load (a pipeline) every follower gets every append at once, so a commit takes
    // the first two durable copies of three (append-fanout.ts).
    const holding = !this.pipelined();
    const deferrable = holding && queued.size > 1 ? deferrableAppends(queued, this.isHealthy) : null;
    for (const link of this.links.values()) {
      const messages = link.queued;
      if (messages.length === 0) continue;
      link.queued = [];
      if (messages.every((m) => mayHold(link, m, deferrable))) {
        for (const message of messages) link.deferred.push(message);
        if (holdFills(link.held, messages)) this.sendTo(link, this.takeDeferred(link));
        else this.deferredTimer ??= unrefTimer(this.flushDeferred, this.deferredAppendMs);
        continue;
      }
      // Only entries are waited for: an empty append (a commit index, a probe) commits nothing.
      if (link.awaitingSince === null && messages.some(carriesEntries)) link.awaitingSince = performance.now();
      this.sendTo(link, link.deferred.length === 0 ? messages : [...this.takeDeferred(link), ...messages]);
    }
    if (this.hedgeTimer === null && this.awaitingAny() && this.holdingAny()) this.hedgeTimer = unrefTimer(this.hedge, this.hedgeAfterMs);
  }

  /** Every held append leaves now (the hold ended, or the hedge). */
  private readonly flushDeferred = (): void => {
    if (this.deferredTimer !== null) {
      clearTimeout(this.deferredTimer);
      this.deferredTimer = null;
    }
    if (this.closed) return;
    for (const link of this.links.values()) if (link.deferred.length > 0) this.sendTo(link, this.takeDeferred(link));
  };

  /**
   * A follower sent appends at once has not answered for HEDGE_AFTER_MS (a slow disk, a
   * pause, a crash): the held appends leave now, so the others' answers can make the
   * majority. Otherwise checks again when the oldest unanswered send is that old.
   */
  private readonly hedge = (): void => {
    this.hedgeTimer = null;
    if (this.closed || !this.holdingAny()) return;
    const now = performance.now();
    let oldest = Infinity;
    for (const link of this.links.values()) if (link.awaitingSince !== null && link.awaitingSince < oldest) oldest = link.awaitingSince;
    if (oldest === Infinity) return;
    if (now - oldest >= this.hedgeAfterMs) this.flushDeferred();
    else this.hedgeTimer = unrefTimer(this.hedge, this.hedgeAfterMs - (now - oldest));
  };

  /** Whether a healthy follower has entries unanswered (see flush). */
  private pipelined(): boolean {
    for (const link of this.links.values()) if (link.awaitingSince !== null && this.isHealthy(link.id)) return true;
    return false;
  }

  private awaitingAny(): boolean {
    for (const link of this.links.values()) if (link.awaitingSince !== null) return true;
    return false;
  }

  private holdingAny(): boolean {
    for (const link of this.links.values()) if (link.deferred.length > 0) return true;
    return false;
  }

  /**
   * Empties the link's held appends, returning them. Once no link holds any, the hold's timer
   * goes too: appends held later wait a whole hold from their own start. (A timer left
   * running after a hedge or a full hold let the appends go fired early on the next ones,
   * and one more was left behind each time: after a few hedges the held follower was woken
   * for a few entries every few milliseconds instead of every DEFERRED_APPEND_MS.)
   */
  private takeDeferred(link: PeerLink): GroupMessage[] {
    link.held = { entries: 0, bytes: 0 };
    const taken = link.deferred.splice(0);
    if (this.deferredTimer !== null && !this.holdingAny()) {
      clearTimeout(this.deferredTimer);
      this.deferredTimer = null;
    }
    return taken;
  }

  private sendTo(link: PeerLink, messages: GroupMessage[]): void {
    const stream = this.streamOf(link);
    // No stream (waiting to reconnect after a break): dropped, as a lossy network would; Raft re-sends.
    if (stream === null) return;
    // A group's appends that continue one another go as one (append-fanout.ts), in batches
    // under gRPC's message limit (raft-codec.ts, RAFT_BATCH_BYTES_MAX).
    const outgoing = messages.length > 1 ? coalesceAppends(messages) : messages;
    for (const chunk of raftBatchChunks(outgoing)) stream.write(encodeRaftBatch(chunk, true));
    this.onBatch(outgoing.length);
  }

  private peerClientOf(id: NodeId, address: string): Client {
    return new PeerClient(address, this.credentials.channel(id), { ...CHANNEL_OPTIONS, ...this.credentials.channelOptions(id) });
  }

  private renewClients(link: PeerLink): void {
    link.peerClient.close();
    link.peerClient = this.peerClientOf(link.id, link.address);
  }

  /** The Raft stream's metadata: this node's, with its incarnation and the one it knew of `peer`. */
  private streamMetadataFor(peer: NodeId): Metadata {
    const metadata = this.streamMetadata.clone();
    if (this.incarnations !== null) {
      metadata.set(INCARNATION_METADATA, this.incarnations.own);
      const known = this.incarnations.known(peer);
      if (known !== undefined) metadata.set(YOUR_INCARNATION_METADATA, known);
    }
    return metadata;
  }

  private streamOf(link: PeerLink): DialledStream | null {
    if (link.stream !== null) return link.stream;
    const now = Date.now();
    if (now < link.reconnectAt) return null;
    // The batch is serialized by hand (raft-codec.ts): a RaftBatch on the wire.
    const stream = new DialledStream(
      {
        address: link.address,
        tls: this.credentials.dialTls(link.id),
        windowBytes: HTTP2_WINDOW_BYTES,
        connectTimeoutMs: CONNECT_TIMEOUT_MS,
        keepaliveMs: CHANNEL_OPTIONS['grpc.keepalive_time_ms'],
        keepaliveTimeoutMs: CHANNEL_OPTIONS['grpc.keepalive_timeout_ms'],
        bufferedBytesMax: STREAM_BUFFERED_BYTES_MAX,
      },
      RaftTransportService.stream.path,
      this.streamMetadataFor(link.id),
    );
    link.stream = stream;
    stream.on('metadata', () => {
      if (!link.connected) this.logger.info({ peer: link.id, address: link.address }, 'peer stream open');
      link.connected = true;
      link.refusedWarned = false;
      link.misdirectedWarned = false;
    });
    const broken = (reason: string): void => {
      if (link.stream !== stream) return;
      link.stream = null;
      if (link.connected) this.logger.warn({ peer: link.id, reason }, 'peer stream closed');
      link.connected = false;
      link.reconnectAt = Date.now() + 200;
    };
    stream.on('error', (error: StreamStatus) => {
      if (error.code === Status.UNAUTHENTICATED && !link.refusedWarned) {
        // It retries every few hundred ms: one line until a stream opens again.
        link.refusedWarned = true;
        this.logger.warn(
          { peer: link.id, address: link.address },
          'the peer refused this node\'s cluster credentials: every node needs the same cluster secret (when there is one), a peer certificate naming it from the cluster CA (with peer TLS), and this node\'s id in its peers',
        );
      }
      if (error.code === Status.UNAVAILABLE && error.details.includes(`not node ${link.id}`)) {
        // Peer TLS: the address led to a node whose certificate names another (as above, an
        // address another container had): new channels resolve the name again.
        if (!link.misdirectedWarned) {
          link.misdirectedWarned = true;
          this.logger.warn({ peer: link.id, address: link.address, reason: error.details }, 'peer address reached a node with another certificate; resolving it again');
        }
        if (link.stream === stream) this.renewClients(link);
      }
      if (error.code === Status.FAILED_PRECONDITION && error.details.startsWith(INCARNATION_CHANGED)) {
        // The peer knew another incarnation of this node: this node's data was lost.
        this.onLostOwnData(link.id);
      }
      if (error.code === Status.FAILED_PRECONDITION && error.details.startsWith(NODE_REMOVED_PEER)) {
        // The peer's registry names this node as removed: only its peers can tell it so.
        if (!link.refusedWarned) {
          link.refusedWarned = true;
          this.logger.warn({ peer: link.id, reason: error.details }, 'the peer says this node was removed from the cluster');
        }
        this.onToldRemoved(link.id);
      }
      if (error.code === Status.FAILED_PRECONDITION && error.details.startsWith(LOST_DATA) && !link.refusedWarned) {
        link.refusedWarned = true;
        this.logger.warn({ peer: link.id, reason: error.details }, 'the peer lost its data directory and refuses to rejoin under its id; replace it (docs/operations.md)');
      }
      if (error.code === Status.FAILED_PRECONDITION && error.details.startsWith(WRONG_NODE)) {
        // The address led to another node (a container restarted with another's old IP):
        // new channels resolve the name again.
        this.logger.warn({ peer: link.id, address: link.address, reason: error.details }, 'peer address reached another node; resolving it again');
        if (link.stream === stream) this.renewClients(link);
      }
      broken(error.details);
    });
    stream.on('end', () => broken('ended'));
    return stream;
  }
}

/** The status details that tell a peer its stream reached the wrong node. */
export const WRONG_NODE = 'WRONG_NODE';

/** Why the receiving side refused a peer stream or dropped one of its messages. */
export type RaftRefusal =
  /** The stream did not present valid cluster credentials: it is ended, UNAUTHENTICATED. */
  | 'unauthenticated'
  /** A message whose `from` is not the peer that opened the stream. */
  | 'sender_mismatch'
  /** A message the codec refuses (unknown kind, numbers that are not safe integers). */
  | 'malformed'
  /** A stream of a peer that came back under its id with another data directory (node-incarnation.ts). */
  | 'incarnation_changed';

export interface RaftStreamOptions {
  readonly selfId: NodeId;
  readonly authenticator: PeerAuthenticator;
  readonly onMessage: (message: GroupMessage) => void;
  /** A batch arrived from the authenticated `peer` (a beat is an empty one): it is alive. */
  readonly onBatch?: (peer: NodeId) => void;
  /** A batch for another node arrived (see below). */
  readonly onWrongNode?: (to: string, from: string) => void;
  /** The authenticated `peer` told its client address (PEER_CLIENT_ADDRESS_METADATA) on its stream. */
  readonly onClientAddress?: (peer: NodeId, address: string) => void;
  /** A stream or message was refused; `peer` is the authenticated peer, when there is one. */
  readonly onRefused?: (reason: RaftRefusal, peer: NodeId | null, claimedFrom: string) => void;
  /** This node's incarnation and its peers' (node-incarnation.ts); none: not checked. */
  readonly incarnations?: NodeIncarnations;
  /** `peer` knew another incarnation of this node: its data directory was lost (it must stop). */
  readonly onLostOwnData?: (peer: NodeId) => void;
}

/** What the receiving side uses of a Raft stream (bare-grpc-stream.ts's ServedStream). */
export interface RaftStreamCall extends PeerCall {
  on(event: 'data', listener: (batch: readonly WireMessage[]) => void): unknown;
  on(event: 'error' | 'end', listener: () => void): unknown;
  /** Ends the call with this status (grpc-js's convention). */
  emit(event: 'error', status: { code: number; details: string }): boolean;
  sendMetadata(metadata: Metadata): void;
  end(): void;
}

/**
 * Serves the Raft stream on `server` (a grpc-js Server, before it binds) with `handler`
 * (`raftStreamHandler`), not through grpc-js (bare-grpc-stream.ts): each message is a
 * RaftBatch read by hand (raft-codec.ts `decodeRaftBatch`) up to RAFT_STREAM_BYTES_MAX.
 */
export function serveRaftStreams(server: Server, handler: (call: RaftStreamCall) => void): void {
  onHttp2Server(server, (http2Server) =>
    serveOnHttp2Server(http2Server, RaftTransportService.stream.path, (stream, headers) =>
      handler(new ServedStream(stream, headers, decodeRaftBatch, RAFT_STREAM_BYTES_MAX)),
    ),
  );
}

/**
 * The receiving side: authenticates the stream (peer-auth.ts), then decodes each batch and
 * hands its messages to the node. A message that does not come from the stream's own peer,
 * or that the codec refuses, is dropped (Raft copes with lost messages). A batch for
 * another node (the peer's address for that node now leads here) ends the stream with
 * FAILED_PRECONDITION / WRONG_NODE and is dropped: the peer then resolves the name again.
 * A batch of a peer removed from the cluster since its stream opened ends the stream as its
 * opening would have been refused (FAILED_PRECONDITION / NODE_REMOVED).
 */
export function raftStreamHandler(options: RaftStreamOptions) {
  const { selfId, authenticator, onMessage } = options;
  const onWrongNode = options.onWrongNode ?? (() => {});
  const onRefused = options.onRefused ?? (() => {});
  const onBatch = options.onBatch ?? (() => {});
  return (call: RaftStreamCall): void => {
    const peer = authenticator.authenticate(call);
    call.on('error', () => {});
    if (peer === null) {
      onRefused('unauthenticated', null, claimedNodeId(call));
      call.emit('error', authenticator.refusal(call));
      return;
    }
    // Incarnations (node-incarnation.ts), before any message is stepped.
    const incarnations = options.incarnations;
    if (incarnations !== undefined) {
      const yours = call.metadata.get(YOUR_INCARNATION_METADATA)[0];
      if (incarnations.lostOwnData(typeof yours === 'string' ? yours : undefined)) {
        call.emit('error', { code: Status.FAILED_PRECONDITION, details: `${LOST_DATA}: node ${selfId} lost its data directory; it must be replaced under a new id` });
        options.onLostOwnData?.(peer);
        return;
      }
      const theirs = call.metadata.get(INCARNATION_METADATA)[0];
      if (!incarnations.accept(peer, typeof theirs === 'string' ? theirs : undefined)) {
        onRefused('incarnation_changed', peer, peer);
        call.emit('error', { code: Status.FAILED_PRECONDITION, details: `${INCARNATION_CHANGED}: ${selfId} knew another incarnation of ${peer} (its data directory was lost or replaced)` });
        return;
      }
    }
    const clientAddress = call.metadata.get(PEER_CLIENT_ADDRESS_METADATA)[0];
    if (typeof clientAddress === 'string' && clientAddress.length <= 255 && splitAddress(clientAddress) !== null) options.onClientAddress?.(peer, clientAddress);
    // Headers right away, so the peer knows the stream is open before any reply.
    call.sendMetadata(new Metadata());
    let refused = false;
    call.on('data', (batch: readonly WireMessage[]) => {
      if (refused) return;
      if (!authenticator.stillAdmits(peer)) {
        // Removed from the cluster since its stream opened: it learns so (PeerAuthenticator.refusal).
        refused = true;
        call.emit('error', authenticator.refusalOf(peer));
        return;
      }
      const misaddressed = batch.find((wire) => wire.to !== selfId);
      if (misaddressed !== undefined) {
        refused = true;
        onWrongNode(misaddressed.to, misaddressed.from);
        call.emit('error', { code: Status.FAILED_PRECONDITION, details: `${WRONG_NODE}: this is node ${selfId}, not ${misaddressed.to}` });
        return;
      }
      onBatch(peer);
      for (const wire of batch) {
        if (wire.from !== peer) {
          onRefused('sender_mismatch', peer, wire.from);
          continue;
        }
        if (wire.decoded === null) onRefused('malformed', peer, wire.from);
        else onMessage(wire.decoded);
      }
    });
    call.on('end', () => call.end());
  };
}
