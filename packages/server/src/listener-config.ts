/**
 * The node's two listeners in its configuration: clients on `listen` (told to clients as
 * `advertise`), peers on `peerListen` (reached by the other nodes at this node's entry in
 * `peers`, also called `peerAdvertise`). A node whose `peers` name other nodes needs a peer
 * listener, on another address than the client one. A configuration from before the peer
 * listener (`peers` naming each node's client port) is refused with what to set.
 */
import { ConfigError } from './config-error.js';

const WILDCARDS = new Set(['0.0.0.0', '::', '[::]', '']);

interface HostPort {
  readonly host: string;
  readonly port: string;
}

/** `host:port`, `[v6]:port`; null when the text is not one. */
export function splitAddress(address: string): HostPort | null {
  const match = /^(\[[0-9A-Fa-f:.]+\]|[^\s:[\]]*):(\d{1,5})$/.exec(address);
  if (match === null) return null;
  return { host: (match[1] ?? '').toLowerCase(), port: String(Number(match[2])) };
}

/**
 * Whether two addresses are the same endpoint, or would be as binds: same port, and the
 * same host or a wildcard (0.0.0.0, ::) on either side.
 */
export function sameEndpoint(a: string, b: string): boolean {
  const x = splitAddress(a);
  const y = splitAddress(b);
  if (x === null || y === null) return a === b;
  return x.port === y.port && (x.host === y.host || WILDCARDS.has(x.host) || WILDCARDS.has(y.host));
}

const UPGRADE_HINT =
  'peers now reach each other on a listener of their own: set peerListen (QUORUMQ_PEER_LISTEN) to another port on every node ' +
  '(quorumq cluster uses the client port + 1000), and make peers name each node\'s peer address, e.g. n1=10.0.0.1:8001,n2=10.0.0.2:8001,...; ' +
  'clients keep using listen / advertise (see "Upgrading" in docs/security.md)';

export interface Listeners {
  readonly listen: string;
  readonly advertise: string;
  readonly peerListen: string | null;
  readonly peerAdvertise: string | null;
}

/** Checks the layout; returns the peer address others use to reach this node (null without a peer listener). */
export function checkListeners(nodeId: string, peers: ReadonlyMap<string, string>, listeners: Listeners): string | null {
  const { listen, advertise, peerListen } = listeners;
  const own = peers.get(nodeId) ?? '';
  const others = [...peers.keys()].filter((id) => id !== nodeId);
  if (listeners.peerAdvertise !== null && listeners.peerAdvertise !== own) {
    throw new ConfigError(`peerAdvertise (${listeners.peerAdvertise}) and this node's entry in peers (${nodeId}=${own}) must be the same address: the one other nodes dial`);
  }
  if (peerListen !== null && sameEndpoint(peerListen, listen)) {
    throw new ConfigError(`peerListen (${peerListen}) and listen (${listen}) are the same address: the peer listener needs a port of its own. ${UPGRADE_HINT}`);
  }
  if (others.length === 0) return peerListen === null ? null : own;
  if (sameEndpoint(own, advertise) || sameEndpoint(own, listen)) {
    throw new ConfigError(
      `peers.${nodeId} (${own}) is this node's client address (listen ${listen}, advertise ${advertise}): this looks like a configuration from before the peer listener. ${UPGRADE_HINT}`,
    );
  }
  if (peerListen === null) {
    throw new ConfigError(`this node has peers (${others.join(', ')}) but no peer listener: set peerListen (QUORUMQ_PEER_LISTEN), the address to bind for them (peers.${nodeId} is ${own}). ${UPGRADE_HINT}`);
  }
  return own;
}
