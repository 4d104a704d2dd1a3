/**
 * The records of a persist keep one hidden class whether or not the update carries entries
 * (see walRecordsOf): an array of another elements kind deoptimises the WAL's optimised code.
 * Compared with V8's own %HaveSameMap, after walRecordsOf itself is optimised, since the
 * baseline and the optimised Array.prototype.map differ in the kind they return.
 */
import { setFlagsFromString } from 'node:v8';
import { describe, expect, it } from 'vitest';
import type { Entry, HardState } from '@quorumq/raft';
import { walRecordsOf } from '../src/record.js';

setFlagsFromString('--allow-natives-syntax');
const haveSameMap = new Function('a', 'b', 'return %HaveSameMap(a, b);') as (a: object, b: object) => boolean;
const prepare = new Function('f', '%PrepareFunctionForOptimization(f);') as (f: unknown) => void;
const optimizeNext = new Function('f', '%OptimizeFunctionOnNextCall(f);') as (f: unknown) => void;
setFlagsFromString('--no-allow-natives-syntax');

const hardState: HardState = { term: 3, vote: 'n1', commit: 7 };
const entry = (index: number): Entry => ({ index, term: 3, type: 'normal', data: Buffer.from('x') }) as Entry;

describe('walRecordsOf', () => {
  it('returns records in order: the entries, then the hard state', () => {
    const records = walRecordsOf('q/1', [entry(1), entry(2)], hardState);
    expect(records.map((r) => r.kind)).toEqual(['entry', 'entry', 'hardState']);
    expect(records.every((r) => r.groupId === 'q/1')).toBe(true);
    expect(walRecordsOf('q/1', [], null)).toEqual([]);
  });

  it('returns arrays of one hidden class, optimised, with and without entries', () => {
    prepare(walRecordsOf);
    for (let i = 0; i < 200; i++) walRecordsOf('q/1', [entry(i), entry(i + 1)], hardState);
    optimizeNext(walRecordsOf);
    const withEntries = walRecordsOf('q/1', [entry(1)], hardState);
    const commitOnly = walRecordsOf('q/1', [], hardState);
    const entriesOnly = walRecordsOf('q/1', [entry(2)], null);
    expect(haveSameMap(withEntries, commitOnly)).toBe(true);
    expect(haveSameMap(withEntries, entriesOnly)).toBe(true);
  });
});
