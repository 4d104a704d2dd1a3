/**
 * Client calls that reach a node through its peer listener: another node proxying a client's
 * call to the queue's leader (service.ts, `clientFor`). The peer listener serves the Broker
 * service only to authenticated peers (server.ts checks each call as it checks the peer
 * services: peer-auth.ts) and marks each call it let through with the peer's node id; a
 * handler asks `viaPeer(call)` to know that the call came from that node, and so that
 * metadata the node forwarded (the caller's session, later its identity) can be trusted.
 *
 * The Broker implementation for the peer listener (`BrokerApi.implementation({ viaPeer:
 * true })`) also refuses any call that was not marked, so it serves nothing unauthenticated
 * even if it were registered without the check.
 */
import { status as Status, type Metadata, type UntypedHandleCall, type UntypedServiceImplementation } from '@grpc/grpc-js';
import type { NodeId } from '@quorumq/raft';

import { ANONYMOUS, type Principal } from './access-control.js';
import { UNAUTHENTICATED_PEER } from './peer-auth.js';

const peerCalls = new WeakMap<object, NodeId>();

/** Marks `call` as coming from the authenticated peer `peer`. */
export function markViaPeer(call: object, peer: NodeId): void {
  peerCalls.set(call, peer);
}

/** The node that proxied `call` through the peer listener, or null for a call from a client. */
export function viaPeer(call: object): NodeId | null {
  return peerCalls.get(call) ?? null;
}

type AnyHandler = (call: { emit(event: 'error', error: unknown): boolean }, callback?: (error: unknown) => void) => void;

/** Refuses a call (UNAUTHENTICATED unless `error` says otherwise): with the callback for unary and client-streaming calls, else on the stream. */
export function refuseCall(
  call: { emit(event: 'error', error: unknown): boolean },
  callback: ((error: unknown) => void) | undefined,
  error: { code: Status; details: string } = { code: Status.UNAUTHENTICATED, details: UNAUTHENTICATED_PEER },
): void {
  if (typeof callback === 'function') callback(error);
  else call.emit('error', error);
}

/**
 * `handlers`, each refusing its calls with `refusal()` while it is not null (a node removed
 * from the cluster: BrokerNode.toldRemoved), but those named in `still`.
 */
export function servedWhile(
  handlers: UntypedServiceImplementation,
  refusal: () => { code: Status; details: string } | null,
  still: readonly string[],
): UntypedServiceImplementation {
  const served: UntypedServiceImplementation = {};
  for (const [name, handler] of Object.entries(handlers)) {
    if (still.includes(name)) {
      served[name] = handler;
      continue;
    }
    const inner = handler as unknown as AnyHandler;
    const gated: AnyHandler = (call, callback) => {
      const error = refusal();
      if (error === null) inner(call, callback);
      else refuseCall(call, callback, error);
    };
    served[name] = gated as unknown as UntypedHandleCall;
  }
  return served;
}

/** `handlers`, each serving only calls marked via a peer. */
export function onlyViaPeer(handlers: UntypedServiceImplementation): UntypedServiceImplementation {
  const served: UntypedServiceImplementation = {};
  for (const [name, handler] of Object.entries(handlers)) {
    const inner = handler as unknown as AnyHandler;
    const guarded: AnyHandler = (call, callback) => {
      if (viaPeer(call) === null) refuseCall(call, callback);
      else inner(call, callback);
    };
    served[name] = guarded as unknown as UntypedHandleCall;
  }
  return served;
}

/**
 * `handlers` behind the peer listener's check: a call `authenticate` accepts is marked with
 * the peer's id and served; any other is refused with the status `refused` gives
 * (UNAUTHENTICATED, or NODE_REMOVED to a removed node: PeerAuthenticator.refusal).
 */
export function authenticatedPeersOnly(
  handlers: UntypedServiceImplementation,
  authenticate: (call: never) => NodeId | null,
  refused: (call: never) => { code: Status; details: string },
): UntypedServiceImplementation {
  const served: UntypedServiceImplementation = {};
  for (const [name, handler] of Object.entries(handlers)) {
    const inner = handler as unknown as AnyHandler;
    const checked: AnyHandler = (call, callback) => {
      const peer = authenticate(call as never);
      if (peer === null) {
        refuseCall(call, callback, refused(call as never));
        return;
      }
      markViaPeer(call, peer);
      inner(call, callback);
    };
    served[name] = checked as unknown as UntypedHandleCall;
  }
  return served;
}

/**
 * Metadata of a proxied call: the user the proxying node authenticated (absent when its
 * caller was anonymous, authentication being off). Trusted only on a call `viaPeer` marks:
 * on the client listener it is ignored.
 */
export const FORWARDED_USER_METADATA = 'quorumq-user';

/** Adds the caller's identity to a proxied call's metadata. */
export function forwardPrincipal(metadata: Metadata, principal: Principal): void {
  if (principal.kind === 'user') metadata.set(FORWARDED_USER_METADATA, principal.user);
}

/** The identity a peer forwarded with `call` (which viaPeer marked), as the proxying node authenticated it. */
export function forwardedPrincipal(call: { metadata: Metadata }): Principal {
  const user = call.metadata.get(FORWARDED_USER_METADATA);
  return user.length === 1 && typeof user[0] === 'string' && user[0] !== '' ? { kind: 'user', user: user[0], mechanism: 'peer' } : ANONYMOUS;
}
