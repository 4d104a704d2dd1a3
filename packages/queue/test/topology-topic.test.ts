/** The topic trie against a reference matcher, and its cost with many bindings. */
import fc from 'fast-check';
import { describe, expect, test } from 'vitest';
import { route, Topology, type RouteStats } from '../src/topology/index.js';
import { bind, declareExchange, declareQueue, queue, setUp, unbind } from './topology-helpers.js';

/** The spec's rule, written as directly as possible: `*` one word, `#` zero or more. */
function referenceMatches(bindingWords: readonly string[], routingWords: readonly string[]): boolean {
  const [head, ...rest] = bindingWords;
  if (head === undefined) return routingWords.length === 0;
  if (head === '#') {
    return referenceMatches(rest, routingWords) || (routingWords.length > 0 && referenceMatches(bindingWords, routingWords.slice(1)));
  }
  if (routingWords.length === 0) return false;
  return (head === '*' || head === routingWords[0]) && referenceMatches(rest, routingWords.slice(1));
}

const words = (key: string): string[] => (key === '' ? [] : key.split('.'));

/** Few distinct words, so that keys collide and wildcards line up often. */
const keyOf = (alphabet: readonly string[]): fc.Arbitrary<string> =>
  fc.array(fc.constantFrom(...alphabet), { maxLength: 6 }).map((parts) => parts.join('.'));
const bindingKey = keyOf(['a', 'b', 'c', '', '*', '#']);
const routingKey = keyOf(['a', 'b', 'c', '', '*', '#']);

const stats = (): RouteStats => ({ trieNodesVisited: 0, exchangesVisited: 0 });

describe('topic routing through the trie equals the reference matcher', () => {
  test('for random binding keys, routing keys and unbinds', () => {
    fc.assert(
      fc.property(
        fc.array(bindingKey, { minLength: 1, maxLength: 30 }),
        fc.array(fc.boolean(), { maxLength: 30 }),
        fc.array(routingKey, { minLength: 1, maxLength: 10 }),
        (keys, removed, routingKeys) => {
          const t = setUp([declareExchange('x', 'topic'), ...keys.map((_, i) => declareQueue(`q${i}`))]);
          setUp(keys.map((key, i) => bind('x', queue(`q${i}`), key)), t);
          setUp(keys.flatMap((key, i) => (removed[i] === true ? [unbind('x', queue(`q${i}`), key)] : [])), t);
          for (const key of routingKeys) {
            const expected = keys
              .map((bindingKey, i) => ({ queue: `q${i}`, live: removed[i] !== true && referenceMatches(words(bindingKey), words(key)) }))
              .filter(({ live }) => live)
              .map(({ queue: name }) => name)
              .sort();
            expect(route(t, 'x', key).queues).toEqual(expected);
          }
        },
      ),
      { numRuns: 500, seed: 20261130 },
    );
  });

  test('unbinding everything leaves an empty trie that matches nothing', () => {
    fc.assert(
      fc.property(fc.uniqueArray(bindingKey, { minLength: 1, maxLength: 20 }), (keys) => {
        const t = setUp([declareExchange('x', 'topic'), declareQueue('q'), ...keys.map((key) => bind('x', queue('q'), key))]);
        setUp(keys.map((key) => unbind('x', queue('q'), key)), t);
        const counters = stats();
        expect(route(t, 'x', 'a.b', undefined, counters).unroutable).toBe(true);
        expect(counters.trieNodesVisited).toBe(1);
      }),
      { numRuns: 100, seed: 7 },
    );
  });
});

describe('topic routing is not a scan of every binding', () => {
  const bindingsCount = 10_000;
  const t = new Topology();
  setUp([declareExchange('x', 'topic'), declareQueue('audit'), declareQueue('created')], t);
  for (let i = 0; i < bindingsCount; i++) {
    setUp([declareQueue(`svc${i}`), bind('x', queue(`svc${i}`), `svc${i}.events.*`)], t);
  }
  setUp([bind('x', queue('audit'), '#'), bind('x', queue('created'), '*.*.created')], t);

  test('10,000 bindings, three matches: the walk touches a handful of trie nodes', () => {
    const counters = stats();
    expect(route(t, 'x', 'svc4242.events.created', undefined, counters).queues).toEqual(['audit', 'created', 'svc4242']);
    // The root, "#" at each of the 4 word positions, svc4242 / events / *, and * / * / created:
    // what the matching branches need, whatever the number of other bindings.
    expect(counters.trieNodesVisited).toBe(11);
    expect(counters.trieNodesVisited * 100).toBeLessThan(bindingsCount);
  });

  test('many "#" in one binding key: each (node, position) pair is visited at most once', () => {
    const hashes = Array.from({ length: 20 }, () => '#').join('.');
    const p = setUp([declareExchange('x', 'topic'), declareQueue('q'), bind('x', queue('q'), `${hashes}.z`)]);
    const key = Array.from({ length: 100 }, () => 'a').join('.');
    const counters = stats();
    expect(route(p, 'x', key, undefined, counters).unroutable).toBe(true);
    const trieNodes = 22;
    expect(counters.trieNodesVisited).toBeLessThanOrEqual(trieNodes * 101);
    expect(route(p, 'x', `${key}.z`).queues).toEqual(['q']);
  });
});
