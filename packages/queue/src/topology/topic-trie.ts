import { assert } from './errors.js';

/**
 * Topic matching as in RabbitMQ: keys are `.`-separated words, the empty key has zero
 * words, and empty words are words ("a..b" has three). In a binding key `*` matches
 * exactly one word and `#` zero or more; in a routing key they are ordinary words.
 */
export function topicWords(key: string): string[] {
  return key === '' ? [] : key.split('.');
}

/** Counts work done by one match, so tests can prove routing is not a scan. */
export interface TopicMatchStats {
  trieNodesVisited: number;
}

class TrieNode<T> {
  readonly id: number;
  readonly parent: TrieNode<T> | null;
  /** The binding-key word on the edge from the parent (`*`, `#` or a literal). */
  readonly word: string;
  readonly literals = new Map<string, TrieNode<T>>();
  star: TrieNode<T> | null = null;
  hash: TrieNode<T> | null = null;
  /** Bindings whose key ends at this node, by binding id. */
  readonly values = new Map<string, T>();

  constructor(id: number, parent: TrieNode<T> | null, word: string) {
    this.id = id;
    this.parent = parent;
    this.word = word;
  }

  child(word: string): TrieNode<T> | null {
    if (word === '*') return this.star;
    if (word === '#') return this.hash;
    return this.literals.get(word) ?? null;
  }

  isEmpty(): boolean {
    return this.values.size === 0 && this.literals.size === 0 && this.star === null && this.hash === null;
  }
}

/**
 * The bindings of one topic exchange, keyed by the words of their binding keys, so that
 * matching a routing key walks only the branches that can match instead of every binding.
 * A match visits each (node, word position) pair at most once, which bounds the work by
 * nodes × words even with several `#` in a key.
 */
export class TopicTrie<T> {
  private readonly root: TrieNode<T>;
  private nextNodeId = 1;
  /** Invariant: nodeCount equals the number of nodes reachable from the root. */
  private nodeCount = 1;

  constructor() {
    this.root = new TrieNode<T>(0, null, '');
  }

  add(bindingKey: string, id: string, value: T): void {
    let node = this.root;
    for (const word of topicWords(bindingKey)) node = node.child(word) ?? this.addChild(node, word);
    assert(!node.values.has(id), () => `binding ${id} already in the topic trie`);
    node.values.set(id, value);
  }

  remove(bindingKey: string, id: string): void {
    let node: TrieNode<T> | null = this.root;
    for (const word of topicWords(bindingKey)) {
      node = node.child(word);
      assert(node !== null, () => `binding key ${JSON.stringify(bindingKey)} is not in the topic trie`);
    }
    assert(node.values.delete(id), () => `binding ${id} is not in the topic trie`);
    this.prune(node);
  }

  /** Every value whose binding key matches `routingKey`, each once, in trie order. */
  match(routingKey: string, stats?: TopicMatchStats): T[] {
    const words = topicWords(routingKey);
    const found = new Map<string, T>();
    const visited = new Set<number>();
    // An explicit stack instead of recursion: a long key of `#` words must not overflow.
    const stack: Array<[TrieNode<T>, number]> = [[this.root, 0]];
    for (let next = stack.pop(); next !== undefined; next = stack.pop()) {
      const [node, position] = next;
      const visitKey = node.id * (words.length + 1) + position;
      if (visited.has(visitKey)) continue;
      visited.add(visitKey);
      if (stats !== undefined) stats.trieNodesVisited += 1;
      this.expand(node, position, words, stack, found);
    }
    return [...found.values()];
  }

  private expand(
    node: TrieNode<T>,
    position: number,
    words: readonly string[],
    stack: Array<[TrieNode<T>, number]>,
    found: Map<string, T>,
  ): void {
    // `#` may absorb zero words: try what follows it at the same position.
    if (node.hash !== null) stack.push([node.hash, position]);
    const word = words[position];
    if (word === undefined) {
      for (const [id, value] of node.values) found.set(id, value);
      return;
    }
    // Having arrived over a `#` edge, the `#` may absorb one more word.
    if (node.word === '#' && node !== this.root) stack.push([node, position + 1]);
    const literal = node.literals.get(word);
    if (literal !== undefined) stack.push([literal, position + 1]);
    if (node.star !== null) stack.push([node.star, position + 1]);
  }

  private addChild(node: TrieNode<T>, word: string): TrieNode<T> {
    const child = new TrieNode<T>(this.nextNodeId++, node, word);
    this.nodeCount += 1;
    if (word === '*') node.star = child;
    else if (word === '#') node.hash = child;
    else node.literals.set(word, child);
    return child;
  }

  /** Removes `node` and its ancestors while they hold nothing, so the trie does not leak. */
  private prune(start: TrieNode<T>): void {
    let node = start;
    while (node.parent !== null && node.isEmpty()) {
      const parent: TrieNode<T> = node.parent;
      if (node.word === '*') parent.star = null;
      else if (node.word === '#') parent.hash = null;
      else parent.literals.delete(node.word);
      this.nodeCount -= 1;
      node = parent;
    }
    assert(this.nodeCount >= 1, 'topic trie lost its root');
  }
}
