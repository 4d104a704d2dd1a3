import { BrokerError, FETCH_BYTES_MAX, ForwardError, NODE_BEAT_GROUP, Status, beatMessage, type BrokerNode, type PeerLink } from '@quorumq/server/core';
import type { Message, NodeId, Random } from '@quorumq/raft';

import { chance, type NetworkFaults, type SimNetwork } from '../network.js';
import type { Scheduler } from '../scheduler.js';

/** A failed peer call, as grpc-js reports one (UNAVAILABLE: not sent; DEADLINE_EXCEEDED: no answer). */
class CallError extends Error {
  readonly metadata = { get: (): string[] => [] };
  constructor(
    readonly code: number,
    readonly details: string,
  ) {
    super(details);
  }
}

/** Where a simulated peer call goes: the nodes that are up, and the network's faults. */
export interface SimCluster {
  readonly scheduler: Scheduler;
  readonly random: Random;
  readonly network: SimNetwork;
  /** The node `id` if it runs now (not crashed, not paused). */
  live(id: NodeId): BrokerNode | null;
  faults(): NetworkFaults;
}

/**
 * A node's peers over the simulated network: Raft messages as network envelopes, and
 * forwarded proposals as calls that the network may drop (the caller then times out, the
 * outcome unknown), delay, or refuse (the peer is down: nothing was sent).
 */
export class SimPeerLink implements PeerLink {
  constructor(
    private readonly self: NodeId,
    private readonly cluster: SimCluster,
    private readonly alive: () => boolean,
    private peers: readonly NodeId[],
  ) {}

  send(groupId: string, messages: readonly Message[]): void {
    if (!this.alive()) return;
    for (const message of messages) this.cluster.network.send({ groupId, message });
  }

  propose(peer: NodeId, groupId: string, command: Uint8Array, timeoutMs: number): Promise<Uint8Array> {
    // The peer's copy of the bytes (a real call serializes them; the leader stamps its own).
    const bytes = new Uint8Array(command);
    return this.call(peer, 'propose', groupId, timeoutMs, (node) => node.router.handleForwarded(groupId, bytes), asForwardError);
  }

  /** A fetch of a snapshot's message bytes (see snapshot-bodies.ts), as a call on the simulated network. */
  fetchBodies(peer: NodeId, groupId: string, snapshotIndex: number, ids: readonly number[], timeoutMs: number): Promise<ReadonlyArray<Uint8Array | null>> {
    const asked = [...ids];
    return this.call(
      peer,
      'fetch',
      groupId,
      timeoutMs,
      // The bytes are copied, as a real call serializes them.
      (node) => Promise.resolve(node.serveSnapshotBodies(groupId, snapshotIndex, asked, FETCH_BYTES_MAX).map((body) => (body === null ? null : new Uint8Array(body)))),
      (error) => new CallError(error instanceof BrokerError ? error.code : Status.INTERNAL, error instanceof Error ? error.message : String(error)),
    );
  }

  /**
   * A unary call to `peer`: refused at once (UNAVAILABLE) when the peer is down; otherwise
   * the request and the answer are messages the network may drop (the caller then times out:
   * DEADLINE_EXCEEDED) or delay. `serve` runs on the peer; its failure reaches the caller as
   * `asError` makes it.
   */
  private call<T>(peer: NodeId, name: string, groupId: string, timeoutMs: number, serve: (node: BrokerNode) => Promise<T>, asError: (error: unknown) => Error): Promise<T> {
    const { scheduler } = this.cluster;
    const from = this.self;
    return new Promise<T>((resolve, reject) => {
      if (this.cluster.live(peer) === null) {
        reject(new CallError(Status.UNAVAILABLE, `peer ${peer} is unreachable`));
        return;
      }
      let settled = false;
      const settle = (action: () => void): void => {
        if (settled || !this.alive()) return;
        settled = true;
        action();
      };
      scheduler.after(Math.ceil(timeoutMs), `${name}-timeout ${from}->${peer}`, () =>
        settle(() => reject(new CallError(Status.DEADLINE_EXCEEDED, 'deadline exceeded'))),
      );
      const answer = (action: () => void): void => this.transmit(peer, from, `${name}-reply ${peer}->${from} ${groupId}`, () => settle(action));
      this.transmit(from, peer, `${name} ${from}->${peer} ${groupId}`, () => {
        const node = this.cluster.live(peer);
        if (node === null) return;
        let served: Promise<T>;
        try {
          served = serve(node);
        } catch (error) {
          served = Promise.reject(error);
        }
        served.then(
          (reply) => answer(() => resolve(reply)),
          (error: unknown) => answer(() => reject(asError(error))),
        );
      });
    });
  }

  /** One message of a call: dropped, or delivered after the network's latency unless the link is cut. */
  private transmit(from: NodeId, to: NodeId, label: string, deliver: () => void): void {
    const { scheduler, random, network } = this.cluster;
    const faults = this.cluster.faults();
    if (network.isCut(from, to) || chance(random, faults.dropRate)) return;
    scheduler.after(faults.latencyMs + random.nextInt(faults.jitterMs + 1), label, () => {
      if (!network.isCut(from, to)) deliver();
    });
  }

  isConnected(peer: NodeId): boolean {
    return this.cluster.live(peer) !== null && !this.cluster.network.isCut(this.self, peer);
  }

  keepAlive(): void {}

  /** A beat per peer, as a message on the network (lost, delayed or cut like any other). */
  beat(): void {
    if (!this.alive()) return;
    for (const peer of this.peers) if (peer !== this.self) this.cluster.network.send({ groupId: NODE_BEAT_GROUP, message: beatMessage(this.self, peer) });
  }

  /** Membership changed: beats go to the cluster's nodes now. */
  setPeers(peers: ReadonlyMap<NodeId, string>): void {
    this.peers = [...peers.keys()];
  }

  close(): void {}
}

/** What the caller of a real Peer.Propose receives for the leader's failure. */
function asForwardError(error: unknown): ForwardError {
  if (error instanceof ForwardError) return error;
  if (error instanceof BrokerError) return new ForwardError(error.code, error.reason, error.message, null);
  return new ForwardError(Status.INTERNAL, 'INTERNAL', error instanceof Error ? error.message : String(error), null);
}
