import { describe, expect, test } from 'vitest';
import { quorumMatchIndex } from '../src/config.js';
import { createRandom } from '../src/random.js';

/** The definition: the matches sorted from the highest, the one a majority reaches. */
function bySorting(matches: readonly number[]): number {
  if (matches.length === 0) return 0;
  return [...matches].sort((x, y) => y - x)[Math.floor(matches.length / 2)]!;
}

function config(n: number) {
  return { voters: Array.from({ length: n }, (_, i) => `n${i + 1}`), learners: [] };
}

describe('quorumMatchIndex', () => {
  test('is the highest match a majority of voters reaches', () => {
    expect(quorumMatchIndex(config(3), (id) => ({ n1: 9, n2: 4, n3: 7 })[id]!)).toBe(7);
    expect(quorumMatchIndex(config(3), (id) => ({ n1: 9, n2: 9, n3: 0 })[id]!)).toBe(9);
    expect(quorumMatchIndex(config(1), () => 5)).toBe(5);
    expect(quorumMatchIndex(config(2), (id) => (id === 'n1' ? 8 : 3))).toBe(3);
    expect(quorumMatchIndex(config(4), (id) => ({ n1: 10, n2: 8, n3: 6, n4: 4 })[id]!)).toBe(6);
    expect(quorumMatchIndex({ voters: [], learners: ['n1'] }, () => 5)).toBe(0);
  });

  test('learners do not count', () => {
    const withLearner = { voters: ['n1', 'n2', 'n3'], learners: ['n4'] };
    expect(quorumMatchIndex(withLearner, (id) => ({ n1: 5, n2: 1, n3: 1, n4: 5 })[id]!)).toBe(1);
  });

  test('agrees with sorting for random matches, with ties, across voter counts (the scratch is reused)', () => {
    const random = createRandom(7);
    for (let round = 0; round < 2000; round++) {
      const n = 1 + random.nextInt(7);
      const matches = Array.from({ length: n }, () => random.nextInt(round % 2 === 0 ? 4 : 1_000_000));
      const voters = config(n);
      expect(quorumMatchIndex(voters, (id) => matches[Number(id.slice(1)) - 1]!)).toBe(bySorting(matches));
    }
  });
});
