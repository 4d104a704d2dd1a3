import { test, expect } from 'vitest';
import { TestCluster } from '/work/main/packages/raft/test/cluster.js';
test('smoke', () => {
  const c = new TestCluster(['a','b','c']);
  c.elect('a');
  for (let i=0;i<10;i++) c.propose('a', 'm'+i);
  c.stabilize();
  c.tickAll(1); c.stabilize();
  for (const id of ['a','b','c']) expect(c.node(id).machine).toEqual(Array.from({length:10},(_,i)=>'m'+i));
  c.crash('a'); 
  for (let i=0;i<40 && c.leader()===null;i++){ c.tickAll(); c.stabilize(); }
  const l = c.leader()!; expect(l).not.toBe('a');
  c.propose(l, 'x'); c.stabilize(); c.tickAll(); c.stabilize();
  c.restart('a'); for (let i=0;i<5;i++){ c.tickAll(); c.stabilize(); }
  expect(c.node('a').machine.at(-1)).toBe('x');
  // snapshot + lagging follower
  c.isolate('c'); for (let i=0;i<600;i++) c.propose(c.leader()!, 'y'+i); c.stabilize();
  c.snapshot(c.leader()!); c.heal(); for (let i=0;i<5;i++){ c.tickAll(); c.stabilize(); }
  expect(c.node('c').machine.length).toBe(611);
  expect(c.raft('c').status().commitIndex).toBe(c.raft(c.leader()!).status().commitIndex);
});
