import { describe, expect, it } from 'vitest';

import { IdHandleIndex } from '../src/id-handle-index.js';

/** A small deterministic generator (the test replays). */
function random(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state * 1664525 + 1013904223) >>> 0;
    return state / 2 ** 32;
  };
}

describe('IdHandleIndex', () => {
  it('agrees with a Map under appends, lookups and removals in any order', () => {
    for (let seed = 1; seed <= 20; seed++) {
      const next = random(seed);
      const index = new IdHandleIndex();
      const model = new Map<number, number>();
      let id = 0;
      for (let step = 0; step < 5000; step++) {
        const roll = next();
        if (roll < 0.5) {
          id += 1 + Math.floor(next() * 5000);
          const handle = Math.floor(next() * 1e6);
          expect(index.set(id, handle)).toBeUndefined();
          model.set(id, handle);
        } else if (roll < 0.75 && model.size > 0) {
          // Remove from the front (in-order consumption) or anywhere.
          const keys = [...model.keys()];
          const victim = next() < 0.5 ? keys[0]! : keys[Math.floor(next() * keys.length)]!;
          expect(index.delete(victim)).toBe(model.get(victim));
          model.delete(victim);
        } else {
          const probe = Math.floor(next() * (id + 2));
          expect(index.get(probe)).toBe(model.get(probe));
        }
        expect(index.size).toBe(model.size);
      }
      expect([...index.keys()]).toEqual([...model.keys()]);
      expect(index.first()).toBe(model.size === 0 ? undefined : [...model.keys()][0]);
    }
  });

  it('replaces the handle of an id it has, and inserts an id out of order in place', () => {
    const index = new IdHandleIndex();
    index.set(10, 1);
    index.set(30, 3);
    expect(index.set(10, 7)).toBe(1);
    index.set(20, 2);
    expect([...index.keys()]).toEqual([10, 20, 30]);
    expect(index.get(20)).toBe(2);
    expect(index.delete(99)).toBeUndefined();
  });

  it('gives its memory back as it empties', () => {
    const index = new IdHandleIndex();
    for (let id = 1; id <= 100_000; id++) index.set(id, id);
    const full = (index as unknown as { ids: Float64Array }).ids.length;
    for (let id = 1; id <= 99_990; id++) index.delete(id);
    expect([...index.keys()]).toEqual(Array.from({ length: 10 }, (_, i) => 99_991 + i));
    expect((index as unknown as { ids: Float64Array }).ids.length).toBeLessThan(full / 100);
  });
});
