/**
 * The Raft core is deterministic: the same seed and inputs give the same outputs. Its source
 * (no clock, timers, randomness, I/O, asynchrony or outside imports) is checked, with the
 * queue machine's, by packages/queue/test/purity.test.ts.
 */
import { describe, expect, test } from 'vitest';
import { RaftNode, createRandom } from '../src/index.js';
import { TestCluster } from './cluster.js';

describe('the Raft core is deterministic', () => {
  test('the same seed and inputs give the same messages, byte for byte', () => {
    const run = (): string => {
      const cluster = new TestCluster(['a', 'b', 'c'], {}, 42);
      for (let i = 0; i < 60; i++) {
        cluster.tickAll();
        cluster.stabilize();
        const leader = cluster.leader();
        if (leader !== null && i % 3 === 0) cluster.propose(leader, `m${i}`);
      }
      return JSON.stringify(cluster.delivered, (_key, value: unknown) => (value instanceof Uint8Array ? [...value] : value));
    };
    const first = run();
    expect(first.length).toBeGreaterThan(1000);
    expect(run()).toBe(first);
  });

  test('different seeds give different election timing', () => {
    const timeouts = [1, 2, 3, 4, 5].map((seed) => {
      const node = new RaftNode(
        { id: 'a', random: createRandom(seed), initialConfig: { voters: ['a', 'b', 'c'], learners: [] } },
        { hardState: { term: 0, vote: null, commit: 0 }, snapshot: null, entries: [] },
      );
      let ticks = 0;
      while (node.currentRole === 'follower' && ticks < 100) {
        node.tick();
        ticks++;
      }
      return ticks;
    });
    expect(new Set(timeouts).size).toBeGreaterThan(1);
    for (const ticks of timeouts) {
      expect(ticks).toBeGreaterThanOrEqual(10);
      expect(ticks).toBeLessThan(20);
    }
  });
});
