/**
 * The List* calls: exchanges and bindings from this node's copy of the topology (after a
 * metadata barrier, so a change made through another node is seen), and a queue's consumers
 * from its leader's machine. Each lists only what the caller may see: a resource it has any
 * permission on (for a binding: its destination).
 */
import { quorumq } from '@quorumq/proto';
import type { Topology } from '@quorumq/queue';

import { exchange as exchangeResource, queue as queueResource, type AccessControl, type Principal, type Resource } from './access-control.js';
import { bindingArgumentsToWire } from './headers.js';
import type { LocalQueue } from './local-queue.js';

import pb = quorumq.v1;

const BUILT_IN = /^amq\./;

function visible(access: AccessControl, principal: Principal, resource: Resource): boolean {
  return (['configure', 'write', 'read'] as const).some((permission) => access.allowed(principal, permission, resource));
}

export function listExchanges(topology: Topology, access: AccessControl, principal: Principal): pb.ListExchangesResponse.$Properties {
  return {
    exchanges: topology
      .listExchanges()
      .filter((e) => visible(access, principal, exchangeResource(e.name)))
      .map((e) => ({ name: e.name, type: e.type, autoDelete: e.autoDelete, alternateExchange: e.alternateExchange ?? '', builtIn: BUILT_IN.test(e.name) })),
  };
}

export function listBindings(topology: Topology, access: AccessControl, principal: Principal, filter: pb.ListBindingsRequest): pb.ListBindingsResponse.$Properties {
  const bindings: pb.BindingInfo.$Properties[] = [];
  for (const b of topology.listBindings()) {
    if (filter.source !== '' && b.source !== filter.source) continue;
    if (filter.queue !== '' && !(b.destination.kind === 'queue' && b.destination.name === filter.queue)) continue;
    if (filter.exchange !== '' && !(b.destination.kind === 'exchange' && b.destination.name === filter.exchange)) continue;
    const destination = b.destination.kind === 'queue' ? queueResource(b.destination.name) : exchangeResource(b.destination.name);
    if (!visible(access, principal, destination)) continue;
    bindings.push({
      source: b.source,
      ...(b.destination.kind === 'queue' ? { queue: b.destination.name } : { exchange: b.destination.name }),
      bindingKey: b.bindingKey,
      arguments: bindingArgumentsToWire(b.arguments),
    });
  }
  return { bindings };
}

/** A queue's consumers, on its leader: the machine's state, the tags from the node's streams. */
export function listConsumers(local: LocalQueue, tagOf: (consumerId: string) => string | undefined): pb.ListConsumersResponse.$Properties {
  const state = local.replica.state;
  const single = state.args.singleActiveConsumer;
  const consumers = [...state.consumers.values()]
    .sort((a, b) => a.registeredIndex - b.registeredIndex)
    .map((c) => ({
      consumerTag: tagOf(c.id) ?? c.id,
      prefetch: c.prefetch,
      priority: c.priority,
      unacked: c.unacked.size,
      active: !single || state.activeConsumerId === c.id,
    }));
  return { queue: state.name, consumers };
}
