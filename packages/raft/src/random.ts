import type { Random } from './types.js';

/**
 * A small seeded PRNG (SplitMix32 seeding a xoshiro128**), so that a seed fully determines
 * every randomized election timeout. Drivers seed it from real entropy; the simulator
 * seeds it from the run's seed.
 */
export function createRandom(seed: number): Random {
  let s = seed >>> 0;
  const splitMix = (): number => {
    s = (s + 0x9e3779b9) >>> 0;
    let z = s;
    z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0;
    z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0;
    return (z ^ (z >>> 16)) >>> 0;
  };
  let a = splitMix();
  let b = splitMix();
  let c = splitMix();
  let d = splitMix();
  const next = (): number => {
    const result = Math.imul(rotl(Math.imul(b, 5) >>> 0, 7), 9) >>> 0;
    const t = (b << 9) >>> 0;
    c ^= a;
    d ^= b;
    b ^= c;
    a ^= d;
    c ^= t;
    d = rotl(d, 11);
    return result;
  };
  return {
    nextInt(maxExclusive: number): number {
      if (!Number.isInteger(maxExclusive) || maxExclusive <= 0) {
        throw new RangeError(`nextInt needs a positive integer bound, got ${maxExclusive}`);
      }
      return Math.floor((next() / 0x1_0000_0000) * maxExclusive);
    },
  };
}

function rotl(x: number, k: number): number {
  return ((x << k) | (x >>> (32 - k))) >>> 0;
}
