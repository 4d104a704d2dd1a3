/**
 * Spec 2 flow control: the memory limit the high watermark is a fraction of is the container's
 * cgroup limit (v2, else v1) when one is set, else the machine's memory.
 */
import { describe, expect, it } from 'vitest';

import { CGROUP_V1_MEMORY_LIMIT, CGROUP_V2_MEMORY_MAX, memoryHighWatermarkBytes, memoryLimit, type MemoryLimitSources } from '../src/memory-limit.js';

const GIB = 1024 ** 3;
const TOTAL = 16 * GIB;

/** A machine with 16 GiB and these cgroup files (any other file cannot be read). */
function machine(files: Readonly<Record<string, string>>): MemoryLimitSources {
  return { readFile: (path) => files[path] ?? null, totalMemoryBytes: () => TOTAL };
}

describe('the memory limit', () => {
  it('is the cgroup v2 limit when memory.max holds one', () => {
    expect(memoryLimit(machine({ [CGROUP_V2_MEMORY_MAX]: '2147483648\n' }))).toEqual({ bytes: 2 * GIB, source: 'cgroup v2' });
  });

  it('is the machine memory when memory.max is "max" (no limit)', () => {
    expect(memoryLimit(machine({ [CGROUP_V2_MEMORY_MAX]: 'max\n' }))).toEqual({ bytes: TOTAL, source: 'total memory' });
  });

  it('is the cgroup v1 limit when memory.limit_in_bytes holds one', () => {
    expect(memoryLimit(machine({ [CGROUP_V1_MEMORY_LIMIT]: '536870912\n' }))).toEqual({ bytes: 512 * 1024 ** 2, source: 'cgroup v1' });
  });

  it('is the machine memory when cgroup v1 says no limit (a number near 2^63)', () => {
    expect(memoryLimit(machine({ [CGROUP_V1_MEMORY_LIMIT]: '9223372036854771712\n' }))).toEqual({ bytes: TOTAL, source: 'total memory' });
  });

  it('is the machine memory without cgroup files, or with a limit above the machine, or unreadable content', () => {
    expect(memoryLimit(machine({}))).toEqual({ bytes: TOTAL, source: 'total memory' });
    expect(memoryLimit(machine({ [CGROUP_V2_MEMORY_MAX]: String(64 * GIB) }))).toEqual({ bytes: TOTAL, source: 'total memory' });
    expect(memoryLimit(machine({ [CGROUP_V2_MEMORY_MAX]: 'garbage', [CGROUP_V1_MEMORY_LIMIT]: '0' }))).toEqual({ bytes: TOTAL, source: 'total memory' });
  });

  it('prefers cgroup v2 to v1', () => {
    const both = machine({ [CGROUP_V2_MEMORY_MAX]: String(GIB), [CGROUP_V1_MEMORY_LIMIT]: String(2 * GIB) });
    expect(memoryLimit(both)).toEqual({ bytes: GIB, source: 'cgroup v2' });
  });
});

describe('the memory high watermark', () => {
  const limit = { bytes: 2 * GIB, source: 'cgroup v2' } as const;

  it('is the fraction of the limit, or the bytes when they are set', () => {
    expect(memoryHighWatermarkBytes({ memoryHighWatermark: 0.4, memoryHighWatermarkBytes: null }, limit)).toBe(Math.floor(0.4 * 2 * GIB));
    expect(memoryHighWatermarkBytes({ memoryHighWatermark: 1, memoryHighWatermarkBytes: null }, limit)).toBe(2 * GIB);
    expect(memoryHighWatermarkBytes({ memoryHighWatermark: 0.4, memoryHighWatermarkBytes: 123_456 }, limit)).toBe(123_456);
    expect(memoryHighWatermarkBytes({ memoryHighWatermark: 0.4, memoryHighWatermarkBytes: 0 }, limit)).toBe(0);
  });
});
