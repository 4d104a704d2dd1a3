import { assert, TopologyError } from './errors.js';
import type { Headers } from './header-value.js';
import { TOPOLOGY_LIMITS, utf8ByteLength } from './limits.js';
import { DEFAULT_EXCHANGE } from './model.js';
import type { RouteStats } from './routers.js';
import { compareStrings, type Topology } from './topology.js';

export interface RouteResult {
  /** Target queues, each once, sorted by name so every replica computes the same list. */
  readonly queues: readonly string[];
  /** True when no queue matched, after exchange-to-exchange bindings and alternates. */
  readonly unroutable: boolean;
}

const NO_HEADERS: Headers = new Map();

/**
 * The queues a message published to `exchange` with `routingKeys` reaches (one key, or
 * several: a dead-lettered message keeps all its original keys, spec section 5).
 *
 * Exchange-to-exchange bindings are followed breadth-first, visiting each exchange at most
 * once per publish: that is the cycle protection, and it also means a queue reached along
 * two paths gets one copy. An exchange's alternate is tried when that exchange's own
 * bindings matched nothing (no queue and no exchange), as in RabbitMQ; an exchange binding
 * that matched but led nowhere does not trigger the alternate (the downstream exchange's
 * own alternate applies instead). A dangling alternate (declared before, or deleted after,
 * the exchange that names it) is skipped, as RabbitMQ does.
 *
 * Throws TopologyError NOT_FOUND for an unknown exchange and INVALID_ARGUMENT for a routing
 * key over the limit: both are the publisher's mistake and refused before anything is
 * enqueued.
 */
export function route(
  topology: Topology,
  exchange: string,
  routingKeys: string | readonly string[],
  headers: Headers = NO_HEADERS,
  stats?: RouteStats,
): RouteResult {
  const keys = typeof routingKeys === 'string' ? [routingKeys] : routingKeys;
  checkRoutingKeys(keys);
  if (exchange === DEFAULT_EXCHANGE) return routeDefault(topology, keys);
  if (topology.exchange(exchange) === undefined) {
    throw new TopologyError('NOT_FOUND', `exchange ${JSON.stringify(exchange)} does not exist; declare it before publishing to it`);
  }
  const queues = new Set<string>();
  const visited = new Set<string>();
  const pending: string[] = [exchange];
  for (let next = 0; next < pending.length; next++) {
    const name = pending[next];
    assert(name !== undefined, 'route work list out of range');
    if (visited.has(name)) continue;
    visited.add(name);
    if (stats !== undefined) stats.exchangesVisited += 1;
    // A loop, not push(...): one fanout may have more exchange bindings than a call has arguments.
    for (const downstream of routeOneExchange(topology, name, keys, headers, stats, queues)) pending.push(downstream);
  }
  const sorted = [...queues].sort(compareStrings);
  return { queues: sorted, unroutable: sorted.length === 0 };
}

function checkRoutingKeys(keys: readonly string[]): void {
  if (keys.length > TOPOLOGY_LIMITS.routingKeysCountMax) {
    throw new TopologyError('INVALID_ARGUMENT', `message has ${keys.length} routing keys; at most ${TOPOLOGY_LIMITS.routingKeysCountMax} are allowed`);
  }
  for (const key of keys) {
    const keyBytes = utf8ByteLength(key);
    if (keyBytes > TOPOLOGY_LIMITS.routingKeyBytesMax) {
      throw new TopologyError('INVALID_ARGUMENT', `routing key is ${keyBytes} bytes; at most ${TOPOLOGY_LIMITS.routingKeyBytesMax} are allowed`);
    }
  }
}

/** The default exchange has no bindings and no alternate: each key names a queue. */
function routeDefault(topology: Topology, routingKeys: readonly string[]): RouteResult {
  const queues = [...new Set(routingKeys.filter((key) => topology.hasQueue(key)))].sort(compareStrings);
  return { queues, unroutable: queues.length === 0 };
}

/** Adds the queues `name` matches to `queues`; returns the exchanges to visit next. */
function routeOneExchange(
  topology: Topology,
  name: string,
  routingKeys: readonly string[],
  headers: Headers,
  stats: RouteStats | undefined,
  queues: Set<string>,
): string[] {
  const definition = topology.exchange(name);
  const router = topology.routerOf(name);
  if (definition === undefined || router === undefined) return [];
  const matched = router.match(routingKeys, headers, stats);
  if (matched.length === 0) return definition.alternateExchange === null ? [] : [definition.alternateExchange];
  const exchanges: string[] = [];
  for (const binding of matched) {
    assert(binding.source === name, () => `exchange ${name} matched a binding of ${binding.source}`);
    if (binding.destination.kind === 'queue') {
      assert(topology.hasQueue(binding.destination.name), () => `binding to deleted queue ${binding.destination.name}`);
      queues.add(binding.destination.name);
    } else exchanges.push(binding.destination.name);
  }
  return exchanges;
}
