/**
 * The memory a node may use, and its high watermark (spec 2 flow control): the container's
 * cgroup memory limit when one is set, else the machine's memory. In a container the
 * machine's memory is the wrong base: the kernel kills the process at the cgroup limit,
 * long before the machine runs out.
 */
import { readFileSync } from 'node:fs';
import { totalmem } from 'node:os';

import type { NodeConfig } from './config.js';
import { invariant } from './invariant.js';

/** cgroup v2: the limit of the container's cgroup, or "max" for none. */
export const CGROUP_V2_MEMORY_MAX = '/sys/fs/cgroup/memory.max';
/** cgroup v1: the limit, or a huge number (about 2^63, rounded to a page) for none. */
export const CGROUP_V1_MEMORY_LIMIT = '/sys/fs/cgroup/memory/memory.limit_in_bytes';

/** Where the limit is read from: injected so that a test can play any machine. */
export interface MemoryLimitSources {
  /** A file's content, or null when it cannot be read (no such cgroup file). */
  readonly readFile: (path: string) => string | null;
  readonly totalMemoryBytes: () => number;
}

export interface MemoryLimit {
  readonly bytes: number;
  readonly source: 'cgroup v2' | 'cgroup v1' | 'total memory';
}

export const systemMemorySources: MemoryLimitSources = {
  readFile: (path) => {
    try {
      return readFileSync(path, 'utf8');
    } catch {
      return null;
    }
  },
  totalMemoryBytes: () => totalmem(),
};

/** A cgroup limit file's bytes, or null for "max", an unreadable file or anything else. */
function cgroupLimitBytes(content: string | null): number | null {
  const text = content?.trim() ?? '';
  if (!/^\d+$/.test(text)) return null;
  const bytes = Number(text);
  return bytes > 0 ? bytes : null;
}

/**
 * The cgroup limit (v2, then v1) when one is set and below the machine's memory, else the
 * machine's memory. A limit at or above the machine's memory limits nothing: that is how
 * "no limit" reads in cgroup v1 (a number near 2^63), and how a limit larger than the machine
 * behaves.
 */
export function memoryLimit(sources: MemoryLimitSources = systemMemorySources): MemoryLimit {
  const total = sources.totalMemoryBytes();
  const cgroups = [
    [CGROUP_V2_MEMORY_MAX, 'cgroup v2'],
    [CGROUP_V1_MEMORY_LIMIT, 'cgroup v1'],
  ] as const;
  for (const [path, source] of cgroups) {
    const bytes = cgroupLimitBytes(sources.readFile(path));
    if (bytes !== null && bytes < total) return { bytes, source };
  }
  return { bytes: total, source: 'total memory' };
}

/** The resident memory above which publishes are refused: the bytes when set, else the fraction of the limit. */
export function memoryHighWatermarkBytes(config: Pick<NodeConfig, 'memoryHighWatermark' | 'memoryHighWatermarkBytes'>, limit: MemoryLimit): number {
  if (config.memoryHighWatermarkBytes !== null) return config.memoryHighWatermarkBytes;
  invariant(config.memoryHighWatermark > 0 && config.memoryHighWatermark <= 1, () => `memoryHighWatermark ${config.memoryHighWatermark} is not in (0, 1] (config.ts checks it)`);
  return Math.floor(config.memoryHighWatermark * limit.bytes);
}
