/**
 * Routing a dead-lettered message (spec 5): route as any publish, then drop each target
 * queue that would close a dead-letter cycle for this message. The cycle rule itself is the
 * queue machine's (`isDeadLetterCycle`, over the message's folded death records); this
 * module only imports that pure function and its type, and the machine never imports the
 * topology, so there is no import cycle.
 */
import { isDeadLetterCycle, type Deaths } from '../machine/deaths.js';
import type { Headers } from './header-value.js';
import { route, type RouteResult } from './route.js';
import type { RouteStats } from './routers.js';
import type { Topology } from './topology.js';

export interface DeadLetterRouteResult extends RouteResult {
  /** Target queues to enqueue the message to: routed, minus the cycles. Sorted by name. */
  readonly queues: readonly string[];
  /** Routed targets dropped because dead-lettering there would be a cycle (count them). Sorted. */
  readonly droppedAsCycle: readonly string[];
  /**
   * True when routing matched no queue at all (before the cycle check). When `queues` is
   * empty but this is false, every target was a cycle.
   */
  readonly unroutable: boolean;
}

/**
 * The targets of a dead-lettered message: `exchange` and `routingKeys` are the dead-letter
 * exchange and keys of the `deadLetter` effect, `deaths` its folded death records (the
 * newest death first). Throws like `route` (unknown exchange, bad routing key).
 *
 * With no target left, the message is dropped: under at-least-once the server still sends
 * `deadLetterConfirmed`, so the source forgets it.
 */
export function routeDeadLetter(
  topology: Topology,
  exchange: string,
  routingKeys: string | readonly string[],
  headers: Headers | undefined,
  deaths: Deaths,
  stats?: RouteStats,
): DeadLetterRouteResult {
  const routed = route(topology, exchange, routingKeys, headers, stats);
  const queues: string[] = [];
  const droppedAsCycle: string[] = [];
  for (const queue of routed.queues) (isDeadLetterCycle(deaths, queue) ? droppedAsCycle : queues).push(queue);
  return { queues, droppedAsCycle, unroutable: routed.unroutable };
}
