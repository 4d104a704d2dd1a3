/**
 * The fault schedule, made from a seed before the run starts (so it can be printed and
 * replayed): the fault kinds of `--faults`, shuffled per cycle, each with its seeded
 * targets, hold time and the gap after it. Targets named "leader" are resolved at run time.
 */
import { Prng } from './prng.js';

export const FAULT_KINDS = ['kill-leader', 'kill-random', 'kill-two', 'pause', 'restart-all', 'partition', 'partition-leader', 'storage-fault'] as const;
export type FaultKind = (typeof FAULT_KINDS)[number];
/**
 * Kinds that need the nodes' data directories on this machine (the process cluster): a
 * storage fault stops a node, damages a file in its data directory and starts it again.
 */
export const PROCESS_ONLY_FAULTS: readonly FaultKind[] = ['storage-fault'];

/** What a storage fault damages: a byte flipped in the middle of the node's oldest WAL segment, or in its snapshot files. */
export type StorageDamage = 'wal-flip' | 'snapshot-flip';

export interface ScheduledFault {
  readonly index: number;
  /** Planned start, ms after the workload started (faults run one after another). */
  readonly atMs: number;
  readonly kind: FaultKind;
  /** The queue whose leader a leader-targeted fault hits. */
  readonly queue: string;
  /** Seeded node choices for faults that hit random nodes (first one or two are used). */
  readonly nodes: readonly string[];
  /** pause: whether the paused node is the queue's leader (else nodes[0]). */
  readonly leader: boolean;
  /** How long the fault lasts (nodes down / paused / partitioned), ms. */
  readonly holdMs: number;
  /** storage-fault: what is damaged, and where in the file (a fraction of its length). */
  readonly damage: StorageDamage;
  readonly damageAt: number;
  /** Quiet time after the fault healed, ms. */
  readonly gapMs: number;
}

const HOLD: Record<FaultKind, [number, number]> = {
  'kill-leader': [1000, 4000],
  'kill-random': [1000, 4000],
  'kill-two': [2000, 5000],
  // Longer than the election timeout (10 ticks of 50 ms, randomised up to 2x).
  pause: [1500, 4000],
  'restart-all': [500, 2500],
  partition: [2000, 6000],
  'partition-leader': [2000, 6000],
  'storage-fault': [1000, 3000],
};

/** A rough allowance for restarts and elections after each fault, for the planned times. */
const RECOVERY_MS = 2500;

export function parseFaults(list: string): FaultKind[] {
  const kinds = list
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '');
  if (kinds.length === 0) throw new Error('--faults: empty list');
  for (const kind of kinds) {
    if (!(FAULT_KINDS as readonly string[]).includes(kind)) throw new Error(`--faults: unknown fault ${JSON.stringify(kind)} (known: ${FAULT_KINDS.join(', ')})`);
  }
  return kinds as FaultKind[];
}

export function makeSchedule(seed: number, durationMs: number, kinds: readonly FaultKind[], nodeIds: readonly string[], queues: readonly string[], warmupMs = 2000): ScheduledFault[] {
  const rng = new Prng(seed);
  const schedule: ScheduledFault[] = [];
  let at = warmupMs;
  while (at < durationMs) {
    const cycle = [...kinds];
    for (let i = cycle.length - 1; i > 0; i--) {
      const j = rng.int(0, i);
      [cycle[i], cycle[j]] = [cycle[j] as FaultKind, cycle[i] as FaultKind];
    }
    for (const kind of cycle) {
      if (at >= durationMs) break;
      const [lo, hi] = HOLD[kind];
      const shuffled = [...nodeIds];
      for (let i = shuffled.length - 1; i > 0; i--) {
        const j = rng.int(0, i);
        [shuffled[i], shuffled[j]] = [shuffled[j] as string, shuffled[i] as string];
      }
      const fault: ScheduledFault = {
        index: schedule.length,
        atMs: at,
        kind,
        queue: rng.pick(queues),
        nodes: shuffled,
        leader: rng.chance(0.5),
        holdMs: rng.int(lo, hi),
        gapMs: rng.int(1000, 3000),
        damage: kind === 'storage-fault' && rng.chance(0.5) ? 'snapshot-flip' : 'wal-flip',
        damageAt: kind === 'storage-fault' ? rng.int(20, 80) / 100 : 0,
      };
      schedule.push(fault);
      at += fault.holdMs + RECOVERY_MS + fault.gapMs;
    }
  }
  return schedule;
}

export function describeFault(f: ScheduledFault): string {
  const target = (() => {
    switch (f.kind) {
      case 'kill-leader':
      case 'partition-leader':
        return `leader(${f.queue})`;
      case 'kill-random':
      case 'partition':
        return f.nodes[0] ?? '?';
      case 'storage-fault':
        return `${f.nodes[0] ?? '?'} (${f.damage} at ${Math.round(f.damageAt * 100)}%)`;
      case 'kill-two':
        return `${f.nodes[0]},${f.nodes[1]}`;
      case 'pause':
        return f.leader ? `leader(${f.queue})` : (f.nodes[0] ?? '?');
      case 'restart-all':
        return 'all';
    }
  })();
  return `#${f.index} +${(f.atMs / 1000).toFixed(1)}s ${f.kind} ${target} hold ${f.holdMs}ms gap ${f.gapMs}ms`;
}
