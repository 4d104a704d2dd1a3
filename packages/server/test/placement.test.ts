import { expect, it } from 'vitest';

import { placeMembers } from '../src/placement.js';

it('places a queue on `size` distinct nodes, and spreads preferred leaders over the cluster', () => {
  const nodes = ['n3', 'n1', 'n2'];
  const firsts = new Set<string>();
  for (let i = 0; i < 30; i++) {
    const members = placeMembers(nodes, i, `queue-${i}`, 3);
    expect(new Set(members).size).toBe(3);
    expect([...members].sort()).toEqual(['n1', 'n2', 'n3']);
    firsts.add(members[0]!);
  }
  expect(firsts).toEqual(new Set(['n1', 'n2', 'n3']));
  expect(placeMembers(nodes, 0, 'q', 1)).toHaveLength(1);
  // The same inputs place the same way on every node that proposes.
  expect(placeMembers(['n2', 'n1', 'n3'], 7, 'orders', 2)).toEqual(placeMembers(['n3', 'n2', 'n1'], 7, 'orders', 2));
});
