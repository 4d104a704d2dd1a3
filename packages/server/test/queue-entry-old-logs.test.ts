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
import { afterAll, describe, expect, it } from 'vitest';

import { ENTRY_CLOCK_BYTES, decodeQueueEntry, decodeQueueSnapshot, encodeQueueBatch, encodeQueueEntry, encodeQueueSnapshot } from '../src/log-format.js';
import { QueueReplica } from '../src/queue-replica.js';
import { portableOf, TestStores } from './test-message-store.js';

import pb = quorumq.v1;

const stores = new TestStores();
const store = await stores.open();
afterAll(() => stores.closeAll());

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
  const r = replica ?? new QueueReplica(name, `queue/${name}`, args, { onEffects: (_replica, e) => effects.push(e) }, store);
  const results: unknown[] = [];
  const allEffects: unknown[] = [];
  let snapshot: string | undefined;
  for (const { index, term, data } of entries) {
    effects = [];
    results.push(plain(r.apply({ index, term, type: 'normal', data: Buffer.from(data) }, true)));
    allEffects.push(plain(effects));
    if (index === snapshotAt) snapshot = portableSnapshot(r);
  }
  return { replica: r, results, effects: allEffects, ...(snapshot === undefined ? {} : { snapshot }) };
}

/**
 * A snapshot of `replica` now in the portable form (the one releases before the message store
 * saved, and what a leader sends today): the local one it takes, expanded. It lists exactly
 * the messages the machine holds, each with its bytes, as that version wrote them.
 */
function portableSnapshot(replica: QueueReplica): string {
  const local = replica.snapshot();
  expect(decodeQueueSnapshot(local).refs?.storeId).toBe(store.storeId);
  const portable = decodeQueueSnapshot(portableOf(replica, local)!);
  expect(portable.refs).toBeNull();
  const live = [...portable.messages];
  expect(live.map(([id]) => id)).toEqual(replica.state.messages.keys().sort((a, b) => a - b));
  return Buffer.from(encodeQueueSnapshot(portable.machine, live)).toString('base64');
}

/**
 * The ids of the messages the replica holds bytes for, among those its machine holds. (That
 * version also kept, until its next sweep, the bytes of a message that left from the middle
 * of the queue; a snapshot now drops those.)
 */
function heldBodies(replica: QueueReplica, ids: Iterable<number> = replica.bodies.keys()): number[] {
  return [...ids].filter((id) => replica.state.messages.has(id));
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

/**
 * The effects an entry had when the fixture was written, as today's machine gives them: a
 * purge's waiting messages leave with one `dropWaiting` effect (their count) where each had a
 * `drop` effect. Effects are the leader's actions (here, a metric), not replicated state.
 */
function effectsToday(effects: unknown): unknown {
  if (!Array.isArray(effects)) return effects;
  return effects.map((perCommand: unknown) => {
    if (!Array.isArray(perCommand)) return perCommand;
    const out: unknown[] = [];
    for (const effect of perCommand as Effect[]) {
      const last = out[out.length - 1] as Effect | undefined;
      if (effect.type !== 'drop' || (effect.reason as string) !== 'purged') out.push(effect);
      else if (last?.type === 'dropWaiting') out[out.length - 1] = { ...last, count: last.count + 1 };
      else out.push({ type: 'dropWaiting', reason: 'purged', count: 1 });
    }
    return out;
  });
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
    expect(run.effects).toEqual(log.entries.map((e) => effectsToday(e.effects)));
    expect(run.snapshot).toBe(log.snapshotAfter.snapshot);
    expect(stateHash(run.replica.state)).toBe(log.final.stateHash);
    expect(heldBodies(run.replica)).toEqual(heldBodies(run.replica, log.final.bodies));
    expect(portableSnapshot(run.replica)).toBe(log.final.snapshot);
  });

  it('written again in today\'s format, applies to the same result', () => {
    const current = old.map((e) => ({ ...e, data: reencoded(e.data) }));
    for (const { data } of current) expect(pb.QueueEntry.decode(data.subarray(ENTRY_CLOCK_BYTES)).format).toBe(pb.QueueEntryFormat.QUEUE_ENTRY_FORMAT_COMMAND);
    for (const [i, { data }] of current.entries()) {
      expect(decodeQueueEntry(Buffer.from(data)).commands.map((c) => c.command)).toStrictEqual(log.entries[i]!.commands.map(withoutNulls));
    }
    const run = replay(name, log.args, current, log.snapshotAfter.index);
    expect(run.results).toEqual(log.entries.map((e) => e.result));
    expect(run.effects).toEqual(log.entries.map((e) => effectsToday(e.effects)));
    expect(run.snapshot).toBe(log.snapshotAfter.snapshot);
    expect(heldBodies(run.replica)).toEqual(heldBodies(run.replica, log.final.bodies));
    expect(stateHash(run.replica.state)).toBe(log.final.stateHash);
    expect(portableSnapshot(run.replica)).toBe(log.final.snapshot);
  });

  it('its snapshot of that version restores, and the rest of the log applies after it', () => {
    const saved = bytes(log.snapshotAfter.snapshot);
    // Written before the message store: the bodies inline, no references.
    expect(decodeQueueSnapshot(saved).refs).toBeNull();
    const replica = new QueueReplica(name, `queue/${name}`, log.args, { onEffects: () => {} }, store);
    replica.restore(saved);
    expect(stateHash(replica.state)).toBe(log.snapshotAfter.stateHash);
    // Its bodies moved into the store: read back, they are the snapshot's.
    const inline = decodeQueueSnapshot(saved).messages;
    expect([...replica.bodies.keys()]).toEqual([...inline.keys()]);
    for (const [id, message] of inline) expect(Buffer.from(replica.encoded(id) ?? []), `message ${id}`).toEqual(Buffer.from(message));
    // And the replica is due to replace it by a local snapshot as soon as it applied something.
    expect(replica.snapshotDue(1)).toBe(false);
    const rest = old.filter((e) => e.index > log.snapshotAfter.index);
    const run = replay(name, log.args, rest, -1, replica);
    expect(run.results).toEqual(log.entries.filter((e) => e.index > log.snapshotAfter.index).map((e) => e.result));
    expect(stateHash(replica.state)).toBe(log.final.stateHash);
    if (rest.length > 0) expect(replica.snapshotDue(Number.MAX_SAFE_INTEGER)).toBe(true);
    // The bodies of the messages it holds (the replica that wrote the log kept some it had not swept yet).
    const live = (ids: Iterable<number>): number[] => [...ids].filter((id) => replica.state.messages.has(id));
    expect(live(replica.bodies.keys())).toEqual(live(log.final.bodies));
    expect(portableSnapshot(replica)).toBe(log.final.snapshot);
  });
});
