/** Routing, one test per rule of queue-semantics.md section 1 (Exchange, Binding). */
import { describe, expect, test } from 'vitest';
import { route, TopologyError, type RouteStats } from '../src/topology/index.js';
import {
  args, bind, bool, bytes, dbl, declareExchange, declareQueue, exchange, headers, int, list, map, queue, setUp, str, ts,
  unbind, withExchange,
} from './topology-helpers.js';

const queuesOf = (...parameters: Parameters<typeof route>): readonly string[] => route(...parameters).queues;

describe('direct exchange: the binding key equals the routing key', () => {
  test('routes to every queue bound with exactly the routing key', () => {
    const t = setUp([bind('x', queue('a'), 'k'), bind('x', queue('b'), 'k'), bind('x', queue('c'), 'other')], withExchange('direct', ['a', 'b', 'c']));
    expect(route(t, 'x', 'k')).toEqual({ queues: ['a', 'b'], unroutable: false });
    expect(route(t, 'x', 'K')).toEqual({ queues: [], unroutable: true });
    expect(queuesOf(t, 'x', 'k.')).toEqual([]);
  });

  test('a queue bound twice with different keys gets one copy; the result is sorted by name', () => {
    const t = setUp([bind('x', queue('z'), 'k'), bind('x', queue('a'), 'k'), bind('x', queue('z'), 'k', args({ tag: str('2') }))], withExchange('direct', ['z', 'a']));
    expect(queuesOf(t, 'x', 'k')).toEqual(['a', 'z']);
  });

  test('the empty binding key matches only the empty routing key', () => {
    const t = setUp([bind('x', queue('a'), '')], withExchange('direct', ['a']));
    expect(queuesOf(t, 'x', '')).toEqual(['a']);
    expect(queuesOf(t, 'x', 'a')).toEqual([]);
  });
});

describe('fanout exchange: every binding, whatever the key', () => {
  test('routes to all bound queues and ignores the routing key and headers', () => {
    const t = setUp([bind('x', queue('a'), 'ignored'), bind('x', queue('b'))], withExchange('fanout', ['a', 'b', 'c']));
    expect(queuesOf(t, 'x', 'anything', headers({ h: str('v') }))).toEqual(['a', 'b']);
  });

  test('a fanout exchange without bindings is unroutable', () => {
    expect(route(withExchange('fanout', []), 'x', 'k')).toEqual({ queues: [], unroutable: true });
  });
});

describe('topic exchange: * is one word, # is zero or more, words split on "."', () => {
  const cases: Array<[string, string, boolean]> = [
    ['a.b.c', 'a.b.c', true],
    ['a.*.c', 'a.b.c', true],
    ['a.*.c', 'a.c', false],
    ['a.*.c', 'a.b.b.c', false],
    ['a.#', 'a', true],
    ['a.#', 'a.b.c', true],
    ['#', '', true],
    ['#', 'a.b', true],
    ['*', '', false],
    ['*', 'a', true],
    ['*', 'a.b', false],
    ['#.c', 'c', true],
    ['#.c', 'a.b.c', true],
    ['#.c', 'a.b.c.d', false],
    ['a.#.c', 'a.c', true],
    ['a.#.c', 'a.x.y.c', true],
    ['#.#', '', true],
    ['#.b.#', 'a.b.c', true],
    ['#.b.#', 'b', true],
    ['#.b.#', 'a.c', false],
    ['#.*', '', false],
    ['#.*', 'a.b', true],
    ['*.#.*', 'a', false],
    ['*.#.*', 'a.b', true],
    ['a..b', 'a..b', true],
    ['a.*.b', 'a..b', true],
    ['a.', 'a.', true],
    ['a.', 'a', false],
    ['', '', true],
    ['', 'a', false],
    ['*', 'x', true],
    ['a.b', 'a.*', false],
  ];
  test.each(cases)('binding key %j with routing key %j matches: %s', (bindingKey, routingKey, matches) => {
    const t = setUp([bind('x', queue('q'), bindingKey)], withExchange('topic', ['q']));
    expect(route(t, 'x', routingKey).unroutable).toBe(!matches);
  });

  test('a routing key word "*" or "#" is literal: it matches only the same literal or a wildcard', () => {
    const t = setUp([bind('x', queue('lit'), 'a.b')], withExchange('topic', ['lit']));
    expect(queuesOf(t, 'x', 'a.*')).toEqual([]);
    expect(queuesOf(t, 'x', 'a.#')).toEqual([]);
  });

  test('several matching bindings to one queue give one copy', () => {
    const t = setUp([bind('x', queue('q'), '#'), bind('x', queue('q'), 'a.*'), bind('x', queue('r'), 'a.b')], withExchange('topic', ['q', 'r']));
    expect(queuesOf(t, 'x', 'a.b')).toEqual(['q', 'r']);
  });

  test('unbinding removes exactly that binding and leaves siblings on the same trie path', () => {
    const t = setUp([bind('x', queue('q'), 'a.#'), bind('x', queue('r'), 'a.#.b'), bind('x', queue('s'), 'a')], withExchange('topic', ['q', 'r', 's']));
    setUp([unbind('x', queue('q'), 'a.#')], t);
    expect(queuesOf(t, 'x', 'a.x.b')).toEqual(['r']);
    expect(queuesOf(t, 'x', 'a')).toEqual(['s']);
  });
});

describe('headers exchange: x-match all | any | all-with-x | any-with-x', () => {
  const t = setUp(
    [
      bind('x', queue('all'), '', args({ 'x-match': str('all'), format: str('pdf'), type: str('report') })),
      bind('x', queue('any'), '', args({ 'x-match': str('any'), format: str('pdf'), type: str('report') })),
      bind('x', queue('default-all'), '', args({ format: str('pdf'), type: str('report') })),
    ],
    withExchange('headers', ['all', 'any', 'default-all']),
  );

  test('all needs every argument; any needs one; a missing x-match means all', () => {
    expect(queuesOf(t, 'x', '', headers({ format: str('pdf'), type: str('report') }))).toEqual(['all', 'any', 'default-all']);
    expect(queuesOf(t, 'x', '', headers({ format: str('pdf'), type: str('log') }))).toEqual(['any']);
    expect(queuesOf(t, 'x', '', headers({ other: str('pdf') }))).toEqual([]);
  });

  test('the routing key and binding key are ignored', () => {
    expect(queuesOf(t, 'x', 'whatever', headers({ format: str('pdf') }))).toEqual(['any']);
  });

  test('x- arguments are ignored by all/any and compared by all-with-x/any-with-x; x-match is never compared', () => {
    const h = setUp(
      [
        bind('x', queue('plain'), '', args({ 'x-match': str('all'), 'x-tenant': str('t1') })),
        bind('x', queue('with-x'), '', args({ 'x-match': str('all-with-x'), 'x-tenant': str('t1') })),
        bind('x', queue('any-with-x'), '', args({ 'x-match': str('any-with-x'), 'x-tenant': str('t1'), kind: str('k') })),
      ],
      withExchange('headers', ['plain', 'with-x', 'any-with-x']),
    );
    expect(queuesOf(h, 'x', '', headers({ 'x-tenant': str('t1') }))).toEqual(['any-with-x', 'plain', 'with-x']);
    expect(queuesOf(h, 'x', '', headers({ 'x-tenant': str('t2') }))).toEqual(['plain']);
    expect(queuesOf(h, 'x', '', headers({ kind: str('k'), 'x-match': str('any') }))).toEqual(['any-with-x', 'plain']);
  });

  test('all with no comparable arguments matches every message; any with none matches nothing (RabbitMQ)', () => {
    const h = setUp(
      [bind('x', queue('all'), '', args({ 'x-match': str('all') })), bind('x', queue('any'), '', args({ 'x-match': str('any') }))],
      withExchange('headers', ['all', 'any']),
    );
    expect(queuesOf(h, 'x', '', headers({}))).toEqual(['all']);
  });

  test('a presence-only argument (null, AMQP void) matches the header with any value but not its absence', () => {
    const h = setUp([bind('x', queue('q'), '', args({ trace: null }))], withExchange('headers', ['q']));
    expect(queuesOf(h, 'x', '', headers({ trace: bool(false) }))).toEqual(['q']);
    expect(queuesOf(h, 'x', '', headers({ other: bool(true) }))).toEqual([]);
  });

  test('equality is type-aware: int64 1, double 1, string "1", timestamp 1 and bool are all different', () => {
    const h = setUp([bind('x', queue('q'), '', args({ n: int(1) }))], withExchange('headers', ['q']));
    expect(queuesOf(h, 'x', '', headers({ n: int(1) }))).toEqual(['q']);
    for (const other of [dbl(1), str('1'), ts(1), bool(true), bytes(1), list(int(1))]) {
      expect(queuesOf(h, 'x', '', headers({ n: other }))).toEqual([]);
    }
  });

  test('nested values compare structurally: bytes by content, lists in order, maps regardless of order', () => {
    const value = list(bytes(1, 2), map({ a: int(1), b: dbl(0.5) }));
    const h = setUp([bind('x', queue('q'), '', args({ v: value }))], withExchange('headers', ['q']));
    expect(queuesOf(h, 'x', '', headers({ v: list(bytes(1, 2), map({ b: dbl(0.5), a: int(1) })) }))).toEqual(['q']);
    expect(queuesOf(h, 'x', '', headers({ v: list(map({ a: int(1), b: dbl(0.5) }), bytes(1, 2)) }))).toEqual([]);
    expect(queuesOf(h, 'x', '', headers({ v: list(bytes(1, 3), map({ a: int(1), b: dbl(0.5) })) }))).toEqual([]);
  });

  test('doubles compare as IEEE numbers: NaN matches nothing, -0 matches 0', () => {
    const h = setUp([bind('x', queue('nan'), '', args({ d: dbl(NaN) })), bind('x', queue('zero'), '', args({ d: dbl(0) }))], withExchange('headers', ['nan', 'zero']));
    expect(queuesOf(h, 'x', '', headers({ d: dbl(NaN) }))).toEqual([]);
    expect(queuesOf(h, 'x', '', headers({ d: dbl(-0) }))).toEqual(['zero']);
  });
});

describe('default exchange "": routes to the queue whose name equals the routing key', () => {
  test('an existing queue gets the message; an unknown name is unroutable', () => {
    const t = setUp([declareQueue('orders')]);
    expect(route(t, '', 'orders')).toEqual({ queues: ['orders'], unroutable: false });
    expect(route(t, '', 'missing')).toEqual({ queues: [], unroutable: true });
  });

  test('a deleted queue is no longer reachable through it', () => {
    const t = setUp([declareQueue('orders'), { type: 'deleteQueue', name: 'orders' }]);
    expect(route(t, '', 'orders').unroutable).toBe(true);
  });
});

describe('exchange-to-exchange bindings', () => {
  test('a message follows e2e bindings with each exchange applying its own rule', () => {
    const t = setUp([
      declareQueue('eu'), declareQueue('all'),
      declareExchange('in', 'topic'), declareExchange('regions', 'direct'), declareExchange('audit', 'fanout'),
      bind('in', exchange('regions'), 'orders.#'), bind('in', exchange('audit'), '#'),
      bind('regions', queue('eu'), 'orders.eu'), bind('audit', queue('all')),
    ]);
    expect(queuesOf(t, 'in', 'orders.eu')).toEqual(['all', 'eu']);
    expect(queuesOf(t, 'in', 'orders.us')).toEqual(['all']);
  });

  test('a cycle is followed once: each exchange is visited once per publish', () => {
    const t = setUp([
      declareQueue('q'), declareExchange('a', 'fanout'), declareExchange('b', 'fanout'), declareExchange('c', 'fanout'),
      bind('a', exchange('b')), bind('b', exchange('c')), bind('c', exchange('a')), bind('c', queue('q')), bind('a', exchange('a')),
    ]);
    const stats: RouteStats = { trieNodesVisited: 0, exchangesVisited: 0 };
    expect(route(t, 'a', 'k', undefined, stats)).toEqual({ queues: ['q'], unroutable: false });
    expect(stats.exchangesVisited).toBe(3);
  });

  test('a queue reached along two paths (a diamond) gets one copy', () => {
    const t = setUp([
      declareQueue('q'), declareExchange('top', 'fanout'), declareExchange('l', 'fanout'), declareExchange('r', 'fanout'),
      bind('top', exchange('l')), bind('top', exchange('r')), bind('l', queue('q')), bind('r', queue('q')),
    ]);
    expect(queuesOf(t, 'top', '')).toEqual(['q']);
  });
});

describe('alternate exchange: receives what the exchange cannot route', () => {
  const t = setUp([
    declareQueue('matched'), declareQueue('unrouted'),
    declareExchange('ae', 'fanout'), declareExchange('x', 'direct', { alternateExchange: 'ae' }),
    bind('x', queue('matched'), 'k'), bind('ae', queue('unrouted')),
  ]);

  test('nothing matched: the alternate routes it; something matched: the alternate is not used', () => {
    expect(route(t, 'x', 'other')).toEqual({ queues: ['unrouted'], unroutable: false });
    expect(route(t, 'x', 'k')).toEqual({ queues: ['matched'], unroutable: false });
  });

  test('alternates chain, and a cycle of alternates ends: unroutable', () => {
    const c = setUp([
      declareQueue('q'),
      declareExchange('a', 'direct', { alternateExchange: 'b' }), declareExchange('b', 'direct', { alternateExchange: 'a' }),
      declareExchange('c', 'direct', { alternateExchange: 'a' }),
    ]);
    expect(route(c, 'c', 'k')).toEqual({ queues: [], unroutable: true });
    setUp([bind('b', queue('q'), 'k')], c);
    expect(route(c, 'c', 'k')).toEqual({ queues: ['q'], unroutable: false });
  });

  test('an exchange binding that matched but led nowhere does not trigger the alternate (RabbitMQ)', () => {
    const c = setUp([
      declareQueue('fallback'), declareExchange('ae', 'fanout'), declareExchange('empty', 'fanout'),
      declareExchange('x', 'fanout', { alternateExchange: 'ae' }), bind('x', exchange('empty')), bind('ae', queue('fallback')),
    ]);
    expect(route(c, 'x', 'k').unroutable).toBe(true);
  });

  test('a dangling alternate (declared before it exists) is skipped until it is declared', () => {
    const c = setUp([declareQueue('q'), declareExchange('x', 'direct', { alternateExchange: 'later' })]);
    expect(route(c, 'x', 'k').unroutable).toBe(true);
    setUp([declareExchange('later', 'fanout'), bind('later', queue('q'))], c);
    expect(queuesOf(c, 'x', 'k')).toEqual(['q']);
  });
});

describe('publishing errors', () => {
  test('an unknown exchange is NOT_FOUND; an over-long routing key is INVALID_ARGUMENT', () => {
    const t = withExchange('direct', []);
    expect(() => route(t, 'nope', 'k')).toThrow(expect.objectContaining({ name: 'TopologyError', code: 'NOT_FOUND' }) as TopologyError);
    expect(() => route(t, 'x', 'k'.repeat(256))).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }) as TopologyError);
    expect(route(t, 'x', 'k'.repeat(255)).unroutable).toBe(true);
  });
});

describe('several routing keys (spec 5: a dead-lettered message keeps its original routing keys)', () => {
  test('the message reaches the union of what each key reaches, each queue once', () => {
    const t = setUp(
      [bind('x', queue('a'), 'k1'), bind('x', queue('b'), 'k2'), bind('x', queue('both'), 'k1'), bind('x', queue('both'), 'k2')],
      withExchange('direct', ['a', 'b', 'both']),
    );
    expect(route(t, 'x', ['k1', 'k2', 'k3'])).toEqual({ queues: ['a', 'b', 'both'], unroutable: false });
    expect(route(t, 'x', [])).toEqual({ queues: [], unroutable: true });
  });

  test('topic: each key walks the trie; the alternate is used only when no key matched', () => {
    const t = setUp([
      declareQueue('q'), declareQueue('fallback'), declareExchange('ae', 'fanout'), bind('ae', queue('fallback')),
      declareExchange('x', 'topic', { alternateExchange: 'ae' }), bind('x', queue('q'), 'orders.*'),
    ]);
    expect(queuesOf(t, 'x', ['nope', 'orders.eu'])).toEqual(['q']);
    expect(queuesOf(t, 'x', ['nope', 'orders'])).toEqual(['fallback']);
  });

  test('default exchange: each key that names a queue', () => {
    const t = setUp([declareQueue('a'), declareQueue('b')]);
    expect(route(t, '', ['b', 'missing', 'a', 'b'])).toEqual({ queues: ['a', 'b'], unroutable: false });
  });

  test('more than 64 keys is INVALID_ARGUMENT', () => {
    const t = withExchange('direct', []);
    expect(() => route(t, 'x', Array.from({ length: 65 }, (_, i) => `k${i}`))).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }) as TopologyError);
  });
});
