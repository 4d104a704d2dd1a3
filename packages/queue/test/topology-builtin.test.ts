/** Spec 1 (RabbitMQ behaviour): the predeclared amq.* exchanges and the reserved prefix. */
import { describe, expect, test } from 'vitest';
import {
  BUILT_IN_EXCHANGES, Topology, decodeTopologySnapshot, encodeTopologySnapshot, restoreTopology, route, snapshotTopology,
  TOPOLOGY_LIMITS, type ExchangeType, type TopologyCommand,
} from '../src/topology/index.js';
import { args, bind, declareExchange, declareQueue, exchange, expectOk, expectRefused, queue, setUp, str, unbind } from './topology-helpers.js';

const BUILT_IN: ReadonlyArray<[string, ExchangeType]> = [
  ['amq.direct', 'direct'],
  ['amq.fanout', 'fanout'],
  ['amq.headers', 'headers'],
  ['amq.match', 'headers'],
  ['amq.topic', 'topic'],
];

describe('a fresh topology has the built-in amq.* exchanges', () => {
  test('amq.direct, amq.fanout, amq.topic, amq.headers and amq.match exist with their types, durable, no alternate', () => {
    const t = new Topology();
    expect(t.listExchanges().map((x) => [x.name, x.type])).toEqual(BUILT_IN);
    for (const [name, type] of BUILT_IN) expect(t.exchange(name)).toEqual({ name, type, autoDelete: false, alternateExchange: null });
    expect(BUILT_IN_EXCHANGES.map((x) => x.name)).toEqual(BUILT_IN.map(([name]) => name));
    expect(t.listExchanges({ includeBuiltIn: false })).toEqual([]);
    t.assertInvariants();
  });

  test('they route by their type once bound', () => {
    const t = setUp([
      declareQueue('q1'), declareQueue('q2'),
      bind('amq.direct', queue('q1'), 'k'), bind('amq.topic', queue('q2'), 'a.#'), bind('amq.fanout', queue('q1')),
      bind('amq.match', queue('q2'), '', args({ 'x-match': str('any'), h: str('1') })),
    ]);
    expect(route(t, 'amq.direct', 'k').queues).toEqual(['q1']);
    expect(route(t, 'amq.direct', 'other').unroutable).toBe(true);
    expect(route(t, 'amq.topic', 'a.b.c').queues).toEqual(['q2']);
    expect(route(t, 'amq.fanout', 'anything').queues).toEqual(['q1']);
    expect(route(t, 'amq.match', '', new Map([['h', str('1')]])).queues).toEqual(['q2']);
    expect(route(t, 'amq.headers', '').unroutable).toBe(true);
  });

  test('they can be named as alternates and bound to other exchanges, and stay when their last binding goes', () => {
    const t = setUp([declareQueue('q'), declareExchange('x', 'direct', { alternateExchange: 'amq.fanout' }), bind('amq.fanout', queue('q'))]);
    expect(route(t, 'x', 'nothing-bound').queues).toEqual(['q']);
    setUp([bind('amq.topic', exchange('x'), '#'), unbind('amq.fanout', queue('q'))], t);
    expect(t.exchange('amq.fanout')).toBeDefined();
    t.assertInvariants();
  });

  test('they do not count against the exchange limit', () => {
    expect(TOPOLOGY_LIMITS.exchangesCountMax).toBeGreaterThan(BUILT_IN.length);
    const t = new Topology();
    for (let i = 0; i < TOPOLOGY_LIMITS.exchangesCountMax; i++) setUp([declareExchange(`x${i}`, 'fanout')], t);
    expectRefused(t, declareExchange('one-more', 'fanout'), 'RESOURCE_EXHAUSTED');
  });
});

describe('built-in exchanges cannot be deleted', () => {
  test.each(BUILT_IN.map(([name]) => name))('deleting %s is PERMISSION_DENIED with a clear message and changes nothing', (name) => {
    const t = setUp([declareQueue('q'), bind(name, queue('q'), 'k', name.endsWith('headers') || name.endsWith('match') ? args({ h: null }) : undefined)]);
    const message = expectRefused(t, { type: 'deleteExchange', name }, 'PERMISSION_DENIED');
    expect(message).toContain('built-in');
    expect(message).toContain(name);
    expectRefused(t, { type: 'deleteExchange', name, ifUnused: true }, 'PERMISSION_DENIED');
    expect(t.exchange(name)).toBeDefined();
  });
});

describe('the amq. prefix is reserved (AMQP access-refused)', () => {
  test('redeclaring a built-in exchange exactly as it is succeeds without change; passive finds it', () => {
    const t = new Topology();
    for (const [name, type] of BUILT_IN) {
      expectOk(t.apply(declareExchange(name, type)), false);
      expectOk(t.apply(declareExchange(name, type, { passive: true })), false);
    }
  });

  test.each<[string, TopologyCommand]>([
    ['a new amq. name', declareExchange('amq.custom', 'direct')],
    ['a new amq. name, auto-delete', declareExchange('amq.gen-x', 'fanout', { autoDelete: true })],
    ['a built-in with another type', declareExchange('amq.direct', 'fanout')],
    ['a built-in with auto-delete', declareExchange('amq.topic', 'topic', { autoDelete: true })],
    ['a built-in with an alternate', declareExchange('amq.fanout', 'fanout', { alternateExchange: 'ae' })],
  ])('declaring %s is PERMISSION_DENIED and changes nothing', (_what, command) => {
    const t = new Topology();
    const message = expectRefused(t, command, 'PERMISSION_DENIED');
    expect(message).toMatch(/reserved prefix "amq\."|built-in exchanges cannot be changed/);
  });

  test('passive declare of an unknown amq. name is NOT_FOUND, not a refusal', () => {
    expectRefused(new Topology(), declareExchange('amq.nope', 'direct', { passive: true }), 'NOT_FOUND');
  });

  test('names that only contain amq. elsewhere are ordinary', () => {
    expectOk(new Topology().apply(declareExchange('my.amq.x', 'direct')), true);
  });
});

describe('topology snapshots with built-in exchanges', () => {
  const build = (): Topology =>
    setUp([
      declareQueue('q'), declareExchange('x', 'topic', { alternateExchange: 'amq.fanout' }),
      bind('amq.direct', queue('q'), 'k'), bind('amq.topic', exchange('x'), '#'), bind('amq.fanout', queue('q')),
    ]);

  test('list only user exchanges, keep bindings from built-ins, and round-trip to the same routing', () => {
    const original = build();
    const snapshot = snapshotTopology(original);
    expect(snapshot.exchanges.map((x) => x.name)).toEqual(['x']);
    expect(snapshot.bindings.map((b) => b.source)).toEqual(['amq.direct', 'amq.fanout', 'amq.topic']);
    const restored = restoreTopology(decodeTopologySnapshot(encodeTopologySnapshot(snapshot)));
    restored.assertInvariants();
    expect(snapshotTopology(restored)).toEqual(snapshot);
    expect(restored.listExchanges()).toEqual(original.listExchanges());
    for (const [x, key] of [['amq.direct', 'k'], ['amq.topic', 'a'], ['x', 'none']] as const) {
      expect(route(restored, x, key)).toEqual(route(original, x, key));
    }
  });

  test('a snapshot that lists a built-in exchange as it is restores; one that changes it is corrupt', () => {
    const snapshot = snapshotTopology(build());
    const withBuiltIn = { ...snapshot, exchanges: [...BUILT_IN_EXCHANGES, ...snapshot.exchanges] };
    expect(snapshotTopology(restoreTopology(withBuiltIn))).toEqual(snapshot);
    const changed = { ...snapshot, exchanges: [{ name: 'amq.direct', type: 'fanout' as const, autoDelete: false, alternateExchange: null }, ...snapshot.exchanges] };
    expect(() => restoreTopology(changed)).toThrow(expect.objectContaining({ code: 'TOPOLOGY_INVARIANT' }) as Error);
  });
});
