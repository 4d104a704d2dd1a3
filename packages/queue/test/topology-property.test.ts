/** Random command sequences: invariants hold, refusals change nothing, snapshots round-trip. */
import fc from 'fast-check';
import { describe, expect, test } from 'vitest';
import {
  EXCHANGE_TYPES, restoreTopology, route, snapshotTopology, Topology, type Destination, type TopologyCommand,
} from '../src/topology/index.js';
import { args, str } from './topology-helpers.js';

/** Small name pools, so that commands often hit the same exchanges, queues and bindings. */
const exchangeName = fc.constantFrom('', 'a', 'b', 'c', 'd', 'a', 'b', 'c', 'd', 'amq.direct', 'amq.topic', 'amq.custom');
const queueName = fc.constantFrom('q1', 'q2', 'q3');
const key = fc.constantFrom('', 'k', 'k.x', '*.x', '#', 'k.#');
const destination: fc.Arbitrary<Destination> = fc.oneof(
  queueName.map((name): Destination => ({ kind: 'queue', name })),
  exchangeName.map((name): Destination => ({ kind: 'exchange', name })),
);
const bindingArguments = fc.constantFrom(undefined, args({ 'x-match': str('any'), h: str('1') }), args({ h: null }));

/** Declarations are weighted up so that most binds and deletes find what they name. */
const command: fc.Arbitrary<TopologyCommand> = fc.oneof(
  {
    arbitrary: fc.record({
      type: fc.constant('declareExchange' as const),
      name: exchangeName,
      exchangeType: fc.constantFrom(...EXCHANGE_TYPES),
      autoDelete: fc.boolean(),
      alternateExchange: fc.constantFrom(null, 'a', 'b'),
    }),
    weight: 3,
  },
  fc.record({ type: fc.constant('deleteExchange' as const), name: exchangeName, ifUnused: fc.boolean() }),
  { arbitrary: fc.record({ type: fc.constant('declareQueue' as const), name: queueName }), weight: 2 },
  fc.record({ type: fc.constant('deleteQueue' as const), name: queueName }),
  {
    arbitrary: fc.record({ type: fc.constantFrom('bind' as const, 'unbind' as const), source: exchangeName, destination, bindingKey: key, arguments: bindingArguments }),
    weight: 4,
  },
);

function routeEverywhere(topology: Topology): unknown[] {
  const results: unknown[] = [];
  for (const exchange of ['', ...topology.listExchanges().map((x) => x.name)]) {
    for (const routingKey of ['k', 'k.x', 'q1', 'z']) results.push(route(topology, exchange, routingKey, new Map([['h', str('1')]])));
  }
  return results;
}

describe('any sequence of commands', () => {
  test('keeps the invariants; a refused command changes nothing; the snapshot restores to the same routing', () => {
    fc.assert(
      fc.property(fc.array(command, { minLength: 10, maxLength: 60, size: 'max' }), (commands) => {
        const topology = new Topology();
        for (const next of commands) {
          const before = snapshotTopology(topology);
          const reply = topology.apply(next);
          topology.assertInvariants();
          if (!reply.ok || !reply.changed) expect(snapshotTopology(topology)).toEqual(before);
        }
        const restored = restoreTopology(snapshotTopology(topology));
        restored.assertInvariants();
        expect(snapshotTopology(restored)).toEqual(snapshotTopology(topology));
        expect(routeEverywhere(restored)).toEqual(routeEverywhere(topology));
      }),
      { numRuns: 300, seed: 42 },
    );
  });
});
