/** Topology commands: declare, delete, bind, unbind; refusals; snapshots. */
import { describe, expect, test } from 'vitest';
import {
  Topology, decodeTopologySnapshot, encodeTopologySnapshot, restoreTopology, route, snapshotTopology, TOPOLOGY_LIMITS,
  type TopologyCommand,
} from '../src/topology/index.js';
import {
  args, bind, bytes, dbl, declareExchange, declareQueue, exchange, expectOk, expectRefused, int, list, map, queue, setUp, str,
  ts, unbind, withExchange, bool,
} from './topology-helpers.js';

/** Builds a command the type system would reject, as a corrupt log entry could. */
const untyped = (value: object): TopologyCommand => value as unknown as TopologyCommand;

describe('declare exchange is idempotent when the arguments match (spec 7, applied to exchanges)', () => {
  test('declaring the same exchange twice succeeds, the second time without change', () => {
    const t = new Topology();
    expectOk(t.apply(declareExchange('x', 'topic', { alternateExchange: 'ae' })), true);
    expectOk(t.apply(declareExchange('x', 'topic', { alternateExchange: 'ae' })), false);
    expect(t.listExchanges({ includeBuiltIn: false })).toEqual([{ name: 'x', type: 'topic', autoDelete: false, alternateExchange: 'ae' }]);
  });

  test.each([
    ['type', declareExchange('x', 'direct')],
    ['autoDelete', declareExchange('x', 'topic', { autoDelete: true })],
    ['alternateExchange', declareExchange('x', 'topic', { alternateExchange: 'other' })],
  ])('a mismatch in %s is FAILED_PRECONDITION naming the argument, and changes nothing', (field, command) => {
    const t = setUp([declareExchange('x', 'topic'), declareQueue('q'), bind('x', queue('q'), 'a.#')]);
    expect(expectRefused(t, command, 'FAILED_PRECONDITION')).toContain(field);
  });

  test('passive declare checks existence only', () => {
    const t = setUp([declareExchange('x', 'fanout')]);
    expectOk(t.apply(declareExchange('x', 'direct', { passive: true })), false);
    expectOk(t.apply(declareExchange('', 'direct', { passive: true })), false);
    expectRefused(t, declareExchange('y', 'direct', { passive: true }), 'NOT_FOUND');
  });

  test('declaring a queue twice is idempotent', () => {
    const t = new Topology();
    expectOk(t.apply(declareQueue('q')), true);
    expectOk(t.apply(declareQueue('q')), false);
    expect(t.listQueues()).toEqual(['q']);
  });
});

describe('the default exchange cannot be declared, bound, unbound or deleted', () => {
  const t = setUp([declareQueue('q'), declareExchange('x', 'fanout')]);
  test.each<[string, TopologyCommand]>([
    ['declare', declareExchange('', 'direct')],
    ['delete', { type: 'deleteExchange', name: '' }],
    ['bind from it', bind('', queue('q'), 'q')],
    ['unbind from it', unbind('', queue('q'), 'q')],
    ['bind to it', bind('x', exchange(''))],
  ])('%s is PERMISSION_DENIED and changes nothing', (_what, command) => {
    expectRefused(t, command, 'PERMISSION_DENIED');
    expect(route(t, '', 'q').queues).toEqual(['q']);
  });
});

describe('unknown names are NOT_FOUND and change nothing', () => {
  const t = setUp([declareQueue('q'), declareExchange('x', 'direct')]);
  test.each<[string, TopologyCommand]>([
    ['delete exchange', { type: 'deleteExchange', name: 'nope' }],
    ['delete queue', { type: 'deleteQueue', name: 'nope' }],
    ['bind from unknown exchange', bind('nope', queue('q'))],
    ['bind to unknown queue', bind('x', queue('nope'))],
    ['bind to unknown exchange', bind('x', exchange('nope'))],
    ['unbind from unknown exchange', unbind('nope', queue('q'))],
    ['unbind to unknown queue', unbind('x', queue('nope'))],
  ])('%s', (_what, command) => {
    expectRefused(t, command, 'NOT_FOUND');
  });
});

describe('bad input is INVALID_ARGUMENT and changes nothing', () => {
  const t = setUp([declareQueue('q'), declareExchange('x', 'direct'), declareExchange('h', 'headers'), bind('x', queue('q'), 'k')]);
  const tooLong = 'n'.repeat(TOPOLOGY_LIMITS.exchangeNameBytesMax + 1);
  test.each<[string, TopologyCommand]>([
    ['unknown command type', untyped({ type: 'explode' })],
    ['exchange name not a string', untyped({ type: 'declareExchange', name: 7, exchangeType: 'direct' })],
    ['unknown exchange type', untyped({ type: 'declareExchange', name: 'y', exchangeType: 'x-delayed' })],
    ['exchange name over 255 bytes', declareExchange(tooLong, 'direct')],
    ['exchange name over 255 bytes of UTF-8 (128 two-byte characters)', declareExchange('é'.repeat(128), 'direct')],
    ['autoDelete not a boolean', untyped({ type: 'declareExchange', name: 'y', exchangeType: 'direct', autoDelete: 'yes' })],
    ['empty alternate exchange', declareExchange('y', 'direct', { alternateExchange: '' })],
    ['empty queue name', declareQueue('')],
    ['queue name over 255 bytes', declareQueue('q'.repeat(256))],
    ['ifUnused not a boolean', untyped({ type: 'deleteExchange', name: 'x', ifUnused: 1 })],
    ['binding key over 255 bytes', bind('x', queue('q'), 'k'.repeat(256))],
    ['destination kind unknown', untyped({ type: 'bind', source: 'x', destination: { kind: 'topic', name: 'q' }, bindingKey: '' })],
    ['destination missing', untyped({ type: 'bind', source: 'x', bindingKey: '' })],
    ['empty destination queue name', bind('x', queue(''))],
    ['arguments not a Map', untyped({ type: 'bind', source: 'x', destination: queue('q'), bindingKey: '', arguments: { a: 1 } })],
    ['argument value untyped', untyped({ type: 'bind', source: 'x', destination: queue('q'), bindingKey: '', arguments: new Map([['a', 1]]) })],
    ['int64 out of range', bind('x', queue('q'), '', args({ a: int(2n ** 63n) }))],
    ['too many arguments', bind('x', queue('q'), '', new Map(Array.from({ length: 65 }, (_, i) => [`a${i}`, null])))],
    ['x-match not one of the four modes, on a headers exchange', bind('h', queue('q'), '', args({ 'x-match': str('some') }))],
    ['x-match not a string, on a headers exchange', bind('h', queue('q'), '', args({ 'x-match': int(1) }))],
  ])('%s', (_what, command) => {
    expectRefused(t, command, 'INVALID_ARGUMENT');
  });

  test('x-match is only checked on headers exchanges (other types ignore binding arguments)', () => {
    const d = setUp([declareQueue('q'), declareExchange('x', 'direct')]);
    expectOk(d.apply(bind('x', queue('q'), 'k', args({ 'x-match': str('some') }))), true);
  });
});

describe('bind and unbind', () => {
  test('binding is idempotent; bindings differing only in arguments are distinct, as in AMQP', () => {
    const t = withExchange('direct', ['q']);
    expectOk(t.apply(bind('x', queue('q'), 'k', args({ a: int(1), b: str('x') }))), true);
    expectOk(t.apply(bind('x', queue('q'), 'k', args({ b: str('x'), a: int(1) }))), false);
    expectOk(t.apply(bind('x', queue('q'), 'k', args({ a: dbl(1), b: str('x') }))), true);
    expect(t.listBindings()).toHaveLength(2);
  });

  test('the stored binding does not share buffers with the command: reusing them changes nothing', () => {
    const raw = Uint8Array.from([1, 2]);
    const t = setUp([bind('x', queue('q'), '', args({ raw: { type: 'bytes', value: raw } }))], withExchange('headers', ['q']));
    raw[0] = 9;
    expect(route(t, 'x', '', new Map([['raw', bytes(1, 2)]])).queues).toEqual(['q']);
    expectOk(t.apply(unbind('x', queue('q'), '', args({ raw: bytes(1, 2) }))), true);
  });

  test('unbinding what is not bound succeeds without change', () => {
    const t = setUp([bind('x', queue('q'), 'k')], withExchange('direct', ['q']));
    expectOk(t.apply(unbind('x', queue('q'), 'other')), false);
    expectOk(t.apply(unbind('x', queue('q'), 'k')), true);
    expect(route(t, 'x', 'k').unroutable).toBe(true);
  });

  test('deleting a queue removes the bindings to it', () => {
    const t = setUp([bind('x', queue('q'), 'k'), bind('x', queue('r'), 'k'), { type: 'deleteQueue', name: 'q' }], withExchange('direct', ['q', 'r']));
    expect(t.listBindings().map((b) => b.destination.name)).toEqual(['r']);
    expect(route(t, 'x', 'k').queues).toEqual(['r']);
  });
});

describe('delete exchange', () => {
  test('ifUnused refuses an exchange that is the source of a binding, and then succeeds once unbound', () => {
    const t = setUp([bind('x', queue('q'), 'k')], withExchange('direct', ['q']));
    expectRefused(t, { type: 'deleteExchange', name: 'x', ifUnused: true }, 'FAILED_PRECONDITION');
    setUp([unbind('x', queue('q'), 'k')], t);
    expectOk(t.apply({ type: 'deleteExchange', name: 'x', ifUnused: true }), true);
    expect(t.listExchanges({ includeBuiltIn: false })).toEqual([]);
  });

  test('ifUnused ignores bindings where the exchange is the destination (RabbitMQ)', () => {
    const t = setUp([declareExchange('up', 'fanout'), declareExchange('down', 'fanout'), bind('up', exchange('down'))]);
    expectOk(t.apply({ type: 'deleteExchange', name: 'down', ifUnused: true }), true);
    expect(t.listBindings()).toEqual([]);
  });

  test('deleting removes its bindings in both directions', () => {
    const t = setUp([
      declareQueue('q'), declareExchange('a', 'fanout'), declareExchange('b', 'fanout'), declareExchange('c', 'fanout'),
      bind('a', exchange('b')), bind('b', exchange('c')), bind('b', queue('q')), bind('a', queue('q')),
      { type: 'deleteExchange', name: 'b' },
    ]);
    expect(t.listBindings()).toEqual([{ source: 'a', destination: queue('q'), bindingKey: '', arguments: new Map() }]);
  });
});

describe('auto-delete exchanges go when their last source binding goes (RabbitMQ)', () => {
  test('unbinding the last binding deletes the exchange and reports it', () => {
    const t = setUp([declareQueue('q'), declareExchange('tmp', 'fanout', { autoDelete: true }), bind('tmp', queue('q'))]);
    expect(t.apply(unbind('tmp', queue('q')))).toEqual({ ok: true, changed: true, autoDeletedExchanges: ['tmp'] });
    expect(t.exchange('tmp')).toBeUndefined();
  });

  test('an auto-delete exchange never bound stays; deleting a queue cascades through a chain', () => {
    const t = setUp([
      declareQueue('q'), declareExchange('never', 'fanout', { autoDelete: true }),
      declareExchange('a', 'fanout', { autoDelete: true }), declareExchange('b', 'fanout', { autoDelete: true }),
      bind('a', exchange('b')), bind('b', queue('q')),
    ]);
    expect(t.apply({ type: 'deleteQueue', name: 'q' })).toEqual({ ok: true, changed: true, autoDeletedExchanges: ['b', 'a'] });
    expect(t.listExchanges({ includeBuiltIn: false }).map((x) => x.name)).toEqual(['never']);
  });
});

describe('snapshot round-trips exactly', () => {
  const declarations: TopologyCommand[] = [
    declareQueue('q1'), declareQueue('q2'), declareQueue('é-queue'),
    declareExchange('ae', 'fanout'), declareExchange('t', 'topic', { alternateExchange: 'ae' }),
    declareExchange('h', 'headers', { autoDelete: true }), declareExchange('d', 'direct', { alternateExchange: 'dangling' }),
  ];
  const bindings: TopologyCommand[] = [
    bind('t', queue('q1'), 'a.*.#'), bind('t', exchange('h'), '#'), bind('ae', queue('q2')), bind('d', queue('é-queue'), 'k'),
    bind('h', queue('q1'), '', args({
      'x-match': str('any-with-x'), s: str('v'), i: int(-(2n ** 63n)), d: dbl(-0), n: dbl(NaN), inf: dbl(Infinity),
      b: bool(true), raw: bytes(0, 255, 16), when: ts(1_700_000_000_000), l: list(int(1), list()), m: map({ z: str(''), a: map({}) }),
      present: null,
    })),
  ];
  const build = (): Topology => setUp([...declarations, ...bindings]);

  test('restore(snapshot) has the same snapshot, and the same routing', () => {
    const original = build();
    const restored = restoreTopology(snapshotTopology(original));
    expect(snapshotTopology(restored)).toEqual(snapshotTopology(original));
    for (const [x, key] of [['t', 'a.b'], ['t', 'z'], ['d', 'k'], ['d', 'x'], ['', 'q2']] as const) {
      expect(route(restored, x, key)).toEqual(route(original, x, key));
    }
  });

  test('encoded bytes decode to an equal snapshot and are independent of command order', () => {
    const original = build();
    const bytes1 = encodeTopologySnapshot(snapshotTopology(original));
    const decoded = decodeTopologySnapshot(bytes1);
    expect(decoded).toEqual(snapshotTopology(original));
    expect(encodeTopologySnapshot(snapshotTopology(restoreTopology(decoded)))).toEqual(bytes1);
    const reordered = setUp([...[...declarations].reverse(), ...[...bindings].reverse()]);
    expect(encodeTopologySnapshot(snapshotTopology(reordered))).toEqual(bytes1);
    const negativeZero = decoded.bindings.find((b) => b.source === 'h')?.arguments.get('d');
    expect(negativeZero !== undefined && negativeZero !== null && negativeZero.type === 'double' && Object.is(negativeZero.value, -0)).toBe(true);
  });

  test('a corrupt snapshot is refused with an invariant error, not restored', () => {
    const snapshot = snapshotTopology(build());
    const dangling = { ...snapshot, queues: snapshot.queues.filter((name) => name !== 'q1') };
    expect(() => restoreTopology(dangling)).toThrow(expect.objectContaining({ code: 'TOPOLOGY_INVARIANT' }) as Error);
    expect(() => decodeTopologySnapshot(new TextEncoder().encode('{"version":2}'))).toThrow(/version 1/);
  });
});

describe('auto-delete cascades are bounded by a work list, not the stack', () => {
  test('deleting the queue at the end of a chain of 10,000 auto-delete exchanges deletes them all', () => {
    const length = 10_000;
    const t = setUp([declareQueue('q')]);
    for (let i = 0; i < length; i++) setUp([declareExchange(`x${i}`, 'fanout', { autoDelete: true })], t);
    for (let i = 0; i + 1 < length; i++) setUp([bind(`x${i}`, exchange(`x${i + 1}`))], t);
    setUp([bind(`x${length - 1}`, queue('q'))], t);
    expect(route(t, 'x0', '').queues).toEqual(['q']);
    const reply = t.apply({ type: 'deleteQueue', name: 'q' });
    expect(reply.ok && reply.autoDeletedExchanges.length).toBe(length);
    expect(t.listExchanges({ includeBuiltIn: false })).toEqual([]);
    t.assertInvariants();
  });
});

describe('a command holding values JSON cannot show (bigints from the metadata log)', () => {
  test('is refused as INVALID_ARGUMENT, not a TypeError from the error message', () => {
    const t = new Topology();
    const commands = [
      untyped({ type: 7n }),
      untyped({ type: 'declareExchange', name: 'x', exchangeType: 7n }),
      untyped({ type: 'bind', source: 'amq.direct', destination: { kind: 1n, name: 'q' }, bindingKey: 'k' }),
      untyped({ type: 'bind', source: 'amq.headers', destination: { kind: 'queue', name: 'q' }, bindingKey: '', arguments: new Map([['h', { type: 1n, value: 1 }]]) }),
    ];
    for (const command of commands) {
      const reply = t.apply(command);
      expect(reply.ok).toBe(false);
      if (!reply.ok) expect(reply.error.code).toBe('INVALID_ARGUMENT');
    }
  });
});
