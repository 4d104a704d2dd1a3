/**
 * Logs written before commands were QueueCommand messages still apply, to the same result.
 * fixtures/queue-log-v1.json holds queue logs the JSON encoder wrote (every command type,
 * single and batch entries, messages with headers and death records), with the replies,
 * effects, state hashes and snapshots the replica of that version produced applying them
 * (fixtures/make-queue-log-v1.mjs, run once before the format changed).
 */
import { quorumq } from '@quorumq/proto';
import { stateHash, type Command, type Effect, type QueueArguments } from '@quorumq/queue';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';

import { ENTRY_CLOCK_BYTES, decodeQueueEntry, encodeQueueBatch, encodeQueueEntry } from '../src/log-format.js';
import { QueueReplica } from '../src/queue-replica.js';

import pb = quorumq.v1;

interface FixtureEntry {
  readonly index: number;
  readonly term: number;
  readonly data: string;
  readonly commands: Command[];
  readonly result: unknown;
  readonly effects: unknown;
}

interface FixtureLog {
  readonly args: QueueArguments;
  readonly entries: FixtureEntry[];
  readonly snapshotAfter: { readonly index: number; readonly snapshot: string; readonly stateHash: string };
  readonly final: { readonly stateHash: string; readonly bodies: number[]; readonly snapshot: string };
}

const fixture = JSON.parse(readFileSync(new URL('./fixtures/queue-log-v1.json', import.meta.url), 'utf8')) as { logs: Record<string, FixtureLog> };
const logs = Object.entries(fixture.logs);
const bytes = (base64: string): Buffer => Buffer.from(base64, 'base64');
const plain = (value: unknown): unknown => JSON.parse(JSON.stringify(value));

interface Run {
  readonly replica: QueueReplica;
  readonly results: unknown[];
  readonly effects: unknown[];
  /** The snapshot taken after entry `snapshotAt` (as the fixture's writer took one). */
  readonly snapshot?: string;
}

/**
 * Applies `entries` (as a follower would read them: copies) to a replica of `args`, as its
 * leader, taking a snapshot after entry `snapshotAt`.
 */
function replay(
  name: string,
  args: QueueArguments,
  entries: ReadonlyArray<{ index: number; term: number; data: Uint8Array }>,
  snapshotAt: number,
  replica?: QueueReplica,
): Run {
  let effects: Array<readonly Effect[]> = [];
  const r = replica ?? new QueueReplica(name, `queue/${name}`, args, { onEffects: (_replica, e) => effects.push(e) });
  const results: unknown[] = [];
  const allEffects: unknown[] = [];
  let snapshot: string | undefined;
  for (const { index, term, data } of entries) {
    effects = [];
    results.push(plain(r.apply({ index, term, type: 'normal', data: Buffer.from(data) }, true)));
    allEffects.push(plain(effects));
    if (index === snapshotAt) snapshot = Buffer.from(r.snapshot()).toString('base64');
  }
  return { replica: r, results, effects: allEffects, ...(snapshot === undefined ? {} : { snapshot }) };
}

/** A command as today's format reads it back: a null routing key of a move is written as none. */
function withoutNulls(command: Command): Command {
  return Object.fromEntries(Object.entries(command).filter(([, value]) => value !== null)) as Command;
}

/** The same commands and messages as an old entry, written by today's encoder. */
function reencoded(data: Uint8Array): Uint8Array {
  const decoded = decodeQueueEntry(data);
  const commands = decoded.commands.map(({ command, message }) => ({ command, message }));
  return decoded.batch ? encodeQueueBatch(commands, decoded.now) : encodeQueueEntry(commands[0]!.command, commands[0]!.message, decoded.now);
}

describe.each(logs)('the old-format queue log %s', (name, log) => {
  const old = log.entries.map((e) => ({ index: e.index, term: e.term, data: bytes(e.data) }));

  it('holds entries of the format before: commands as JSON, no format field', () => {
    for (const { data } of old) {
      const entry = pb.QueueEntry.decode(data.subarray(ENTRY_CLOCK_BYTES));
      expect(entry.format).toBe(pb.QueueEntryFormat.QUEUE_ENTRY_FORMAT_JSON);
      expect(entry.queueCommand).toBeNull();
    }
  });

  it('decodes to the commands that were written', () => {
    for (const [i, { data }] of old.entries()) expect(decodeQueueEntry(data).commands.map((c) => c.command)).toStrictEqual(log.entries[i]!.commands);
  });

  it('applies to the replies, effects, state and snapshot it applied to when it was written', () => {
    const run = replay(name, log.args, old, log.snapshotAfter.index);
    expect(run.results).toEqual(log.entries.map((e) => e.result));
    expect(run.effects).toEqual(log.entries.map((e) => e.effects));
    expect(run.snapshot).toBe(log.snapshotAfter.snapshot);
    expect(stateHash(run.replica.state)).toBe(log.final.stateHash);
    expect([...run.replica.bodies.keys()]).toEqual(log.final.bodies);
    expect(Buffer.from(run.replica.snapshot()).toString('base64')).toBe(log.final.snapshot);
  });

  it('written again in today\'s format, applies to the same result', () => {
    const current = old.map((e) => ({ ...e, data: reencoded(e.data) }));
    for (const { data } of current) expect(pb.QueueEntry.decode(data.subarray(ENTRY_CLOCK_BYTES)).format).toBe(pb.QueueEntryFormat.QUEUE_ENTRY_FORMAT_COMMAND);
    for (const [i, { data }] of current.entries()) {
      expect(decodeQueueEntry(Buffer.from(data)).commands.map((c) => c.command)).toStrictEqual(log.entries[i]!.commands.map(withoutNulls));
    }
    const run = replay(name, log.args, current, log.snapshotAfter.index);
    expect(run.results).toEqual(log.entries.map((e) => e.result));
    expect(run.effects).toEqual(log.entries.map((e) => e.effects));
    expect(run.snapshot).toBe(log.snapshotAfter.snapshot);
    expect([...run.replica.bodies.keys()]).toEqual(log.final.bodies);
    expect(stateHash(run.replica.state)).toBe(log.final.stateHash);
    expect(Buffer.from(run.replica.snapshot()).toString('base64')).toBe(log.final.snapshot);
  });

  it('its snapshot of that version restores, and the rest of the log applies after it', () => {
    const replica = new QueueReplica(name, `queue/${name}`, log.args, { onEffects: () => {} });
    replica.restore(bytes(log.snapshotAfter.snapshot));
    expect(stateHash(replica.state)).toBe(log.snapshotAfter.stateHash);
    const rest = old.filter((e) => e.index > log.snapshotAfter.index);
    const run = replay(name, log.args, rest, -1, replica);
    expect(run.results).toEqual(log.entries.filter((e) => e.index > log.snapshotAfter.index).map((e) => e.result));
    expect(stateHash(replica.state)).toBe(log.final.stateHash);
  });
});
