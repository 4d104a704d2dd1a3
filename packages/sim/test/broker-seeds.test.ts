import { describe, expect, test } from 'vitest';
import { runBrokerSeed } from '../src/index.js';
import type { BrokerSimBug, BrokerSimResult } from '../src/index.js';

// The broker simulation runs three BrokerNodes (the shipped node: queue replicas, the queue
// machine, forwarding, dead-letter worker) under crashes, partitions and message loss.
test('broker seeds 0-99 run clean: no confirmed message lost, replicas agree, with faults, dead-letters and moves', { timeout: 300_000 }, async () => {
  const results: BrokerSimResult[] = [];
  const failures: string[] = [];
  for (let seed = 0; seed < 100; seed++) {
    const result = await runBrokerSeed({ seed });
    results.push(result);
    if (!result.ok) failures.push(`seed ${seed}: ${result.violation?.message ?? 'unknown'}`);
  }
  expect(failures).toEqual([]);
  const sum = (pick: (r: BrokerSimResult) => number): number => results.reduce((s, r) => s + pick(r), 0);
  expect(sum((r) => r.confirmed)).toBeGreaterThan(10_000);
  expect(sum((r) => r.deadLettered)).toBeGreaterThan(1_500);
  expect(sum((r) => r.moved)).toBeGreaterThan(1_000);
  expect(sum((r) => r.crashes)).toBeGreaterThan(100);
  expect(sum((r) => r.partitions)).toBeGreaterThan(50);
  expect(results.filter((r) => r.confirmed === 0)).toEqual([]);
});

test('a broker seed replays exactly', { timeout: 60_000 }, async () => {
  for (const seed of [1, 4]) {
    const first = await runBrokerSeed({ seed });
    const second = await runBrokerSeed({ seed });
    expect(second.traceHash).toBe(first.traceHash);
    expect(second.events).toBe(first.events);
    expect(second.confirmed).toBe(first.confirmed);
  }
});

const SEEDS_MAX = 200;

async function firstCaught(bug: BrokerSimBug, properties: readonly string[]): Promise<BrokerSimResult | null> {
  for (let seed = 0; seed < SEEDS_MAX; seed++) {
    const result = await runBrokerSeed({ seed, bugs: new Set([bug]) });
    if (result.violation !== null && properties.includes(result.violation.property)) return result;
  }
  return null;
}

// Proof that the queue-level checks can fail: each planted bug, in the glue or in Raft, is
// caught by a safety check on the broker's own code within 200 seeds, and replays.
describe('bugs planted in the broker are caught', { timeout: 300_000 }, () => {
  const cases: Array<[BrokerSimBug, readonly string[]]> = [
    // Glue: the dead-letter worker confirms to the source before the target committed.
    ['confirmDeadLetterBeforeTarget', ['ConfirmedNotLost']],
    // Glue: the move worker confirms to the source before the destination committed.
    ['confirmMoveBeforeTarget', ['ConfirmedNotLost']],
    // Glue: a queue snapshot saved before the message store made the bytes it references
    // durable (a crash then loses bodies the WAL no longer holds).
    ['snapshotBeforeBodiesDurable', ['ConfirmedNotLost']],
    // Glue: a follower installs the leader's snapshot (references into the leader's store)
    // without fetching the bytes it lists; once it leads, deliveries lack their bodies.
    ['installWithoutBodies', ['ConfirmedNotLost']],
    ['ackBeforeFsync', ['ConfirmedNotLost', 'ReplicasAgree', 'StateMachineSafety', 'LogMatching']],
    ['voteWithoutLogCheck', ['ConfirmedNotLost', 'ReplicasAgree', 'StateMachineSafety', 'LogMatching']],
  ];
  for (const [bug, properties] of cases) {
    test(bug, async () => {
      const failure = await firstCaught(bug, properties);
      expect(failure, `${bug} was not caught by ${properties.join('/')} within ${SEEDS_MAX} seeds`).not.toBeNull();
      const replay = await runBrokerSeed({ seed: failure!.seed, bugs: new Set([bug]) });
      expect(replay.violation).toEqual(failure!.violation);
      expect(replay.traceHash).toBe(failure!.traceHash);
    });
  }
});
