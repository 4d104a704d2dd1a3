import { assert } from './errors.js';
import type { Headers } from './header-value.js';
import { compileHeadersPattern, headersMatch, type HeadersPattern } from './headers-match.js';
import type { Binding, ExchangeType } from './model.js';
import { TopicTrie } from './topic-trie.js';

/** Counters one publish may fill in, so tests can check how much work routing did. */
export interface RouteStats {
  trieNodesVisited: number;
  exchangesVisited: number;
}

/**
 * The bindings of one exchange, indexed for its type. The exchange's behaviour is chosen
 * once, when the router is created, instead of switching on the type at every publish.
 */
export interface ExchangeRouter {
  add(id: string, binding: Binding): void;
  remove(id: string, binding: Binding): void;
  /**
   * The bindings that match any of the routing keys (a message has several after
   * dead-lettering with its original keys, or with CC). A binding may appear more than once;
   * `route` deduplicates the queues and visits each exchange once.
   */
  match(routingKeys: readonly string[], headers: Headers, stats: RouteStats | undefined): Binding[];
}

export function createRouter(type: ExchangeType): ExchangeRouter {
  switch (type) {
    case 'direct':
      return new DirectRouter();
    case 'fanout':
      return new FanoutRouter();
    case 'topic':
      return new TopicRouter();
    case 'headers':
      return new HeadersRouter();
  }
}

/** Direct: the binding key equals the routing key, found by one map lookup. */
class DirectRouter implements ExchangeRouter {
  private readonly byKey = new Map<string, Map<string, Binding>>();

  add(id: string, binding: Binding): void {
    const bindings = this.byKey.get(binding.bindingKey) ?? new Map<string, Binding>();
    assert(!bindings.has(id), () => `binding ${id} already routed`);
    bindings.set(id, binding);
    this.byKey.set(binding.bindingKey, bindings);
  }

  remove(id: string, binding: Binding): void {
    const bindings = this.byKey.get(binding.bindingKey);
    assert(bindings?.delete(id) === true, () => `binding ${id} is not routed`);
    if (bindings.size === 0) this.byKey.delete(binding.bindingKey);
  }

  match(routingKeys: readonly string[]): Binding[] {
    return routingKeys.flatMap((routingKey) => [...(this.byKey.get(routingKey)?.values() ?? [])]);
  }
}

/** Fanout: every binding, whatever the key and headers. */
class FanoutRouter implements ExchangeRouter {
  private readonly bindings = new Map<string, Binding>();

  add(id: string, binding: Binding): void {
    assert(!this.bindings.has(id), () => `binding ${id} already routed`);
    this.bindings.set(id, binding);
  }

  remove(id: string): void {
    assert(this.bindings.delete(id), () => `binding ${id} is not routed`);
  }

  match(): Binding[] {
    return [...this.bindings.values()];
  }
}

class TopicRouter implements ExchangeRouter {
  private readonly trie = new TopicTrie<Binding>();

  add(id: string, binding: Binding): void {
    this.trie.add(binding.bindingKey, id, binding);
  }

  remove(id: string, binding: Binding): void {
    this.trie.remove(binding.bindingKey, id);
  }

  match(routingKeys: readonly string[], _headers: Headers, stats: RouteStats | undefined): Binding[] {
    return routingKeys.flatMap((routingKey) => this.trie.match(routingKey, stats));
  }
}

/**
 * Headers: each binding is a pattern over header values, so every binding is compared
 * (as in RabbitMQ); patterns are compiled at bind time. The binding key is ignored.
 */
class HeadersRouter implements ExchangeRouter {
  private readonly patterns = new Map<string, { readonly binding: Binding; readonly pattern: HeadersPattern }>();

  add(id: string, binding: Binding): void {
    assert(!this.patterns.has(id), () => `binding ${id} already routed`);
    this.patterns.set(id, { binding, pattern: compileHeadersPattern(binding.arguments) });
  }

  remove(id: string): void {
    assert(this.patterns.delete(id), () => `binding ${id} is not routed`);
  }

  match(_routingKeys: readonly string[], headers: Headers): Binding[] {
    const matched: Binding[] = [];
    for (const { binding, pattern } of this.patterns.values()) {
      if (headersMatch(pattern, headers)) matched.push(binding);
    }
    return matched;
  }
}
