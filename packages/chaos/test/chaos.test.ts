/**
 * Chaos against real node processes (2 cores: three nodes and the load generator share them).
 * 1. A short seeded run with kill -9 of queue leaders and of followers and one partition:
 *    nothing confirmed is lost, nothing unexpected is consumed.
 * 2. The deliberately broken build (QUORUMQ_TEST_ONLY_CONFIRM_BEFORE_COMMIT=1): the same kind of
 *    leader kill under a fast publisher loses confirmed values, and the checker says so. The
 *    same scenario against the correct build loses nothing (the scenario is not the cause).
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

import { runLeaderKillRounds } from '../src/rounds.js';
import { runChaos, summaryLine, type ChaosReport } from '../src/runner.js';
import { parseFaults } from '../src/schedule.js';

const dir = mkdtempSync(join(tmpdir(), 'quorumq-chaos-test-'));
const log = (line: string): void => {
  process.stderr.write(`${line}\n`);
};

afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
});

describe('chaos run against the process cluster', () => {
  it('kill -9 of leaders and followers, a partition and a storage fault: lost = 0 and unexpected = 0', async () => {
    const seed = Number(process.env.QUORUMQ_CHAOS_SEED ?? 42);
    const report: ChaosReport = await runChaos({
      seed,
      durationS: 45,
      faults: parseFaults('kill-leader,kill-random,kill-leader,kill-random,partition,storage-fault'),
      rate: 60,
      report: join(dir, 'report.json'),
      log,
    });
    log(summaryLine(report));
    const kinds = report.faults.map((f) => f.kind);
    expect(kinds.filter((k) => k === 'kill-leader').length).toBeGreaterThanOrEqual(2);
    expect(kinds).toContain('kill-random');
    expect(kinds).toContain('partition');
    expect(kinds).toContain('storage-fault');
    expect(report.faultsSurvived).toBe(report.faultsInjected);
    expect(report.counts.confirmed).toBeGreaterThan(1000);
    expect(report.drainVerified).toBe(true);
    expect(report.counts.lost, `lost ${report.counts.examples.lost.join(' ')}; replay: ${report.replay}`).toBe(0);
    expect(report.counts.unexpected, report.counts.examples.unexpected.join(' ')).toBe(0);
    // Producer dedup on: no producer-id value was enqueued twice.
    expect(report.counts.dedupViolations, report.counts.examples.dedupViolations.join(' ')).toBe(0);
    expect(report.ok).toBe(true);
    // The report file holds the same report, with its timeline.
    const written = JSON.parse(readFileSync(join(dir, 'report.json'), 'utf8')) as ChaosReport;
    expect(written.seed).toBe(seed);
    expect(written.timeline.some((e) => e.type === 'fault-start')).toBe(true);
    expect(written.timeline.some((e) => e.type === 'storage-damage')).toBe(true);
    expect(written.leaderElections.length).toBeGreaterThanOrEqual(1);
  }, 240_000);
});

describe('the checker catches a broker that confirms before commit', () => {
  it('broken build: a leader kill under a fast publisher loses confirmed values (lost > 0)', async () => {
    const report = await runLeaderKillRounds({
      seed: 1,
      rounds: 4,
      isolateBeforeKillMs: 800,
      env: { QUORUMQ_TEST_ONLY_CONFIRM_BEFORE_COMMIT: '1' },
      log,
    });
    expect(report.lossInRound).not.toBeNull();
    expect(report.counts.lost).toBeGreaterThan(0);
    expect(report.counts.ok).toBe(false);
  }, 180_000);

  it('correct build, same scenario: nothing confirmed is lost', async () => {
    const report = await runLeaderKillRounds({ seed: 1, rounds: 2, isolateBeforeKillMs: 800, log });
    expect(report.rounds.length).toBe(2);
    expect(report.counts.confirmed).toBeGreaterThan(0);
    expect(report.counts.lost, report.counts.examples.lost.join(' ')).toBe(0);
    expect(report.counts.unexpected).toBe(0);
  }, 180_000);
});
