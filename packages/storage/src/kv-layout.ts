/**
 * What NodeStorage keeps in the KV store, per group:
 *
 *   group/<id>          membership marker (empty value)
 *   floor/<id>          JSON WalPosition: WAL records of the group before it are ignored
 *                       (its log was reset by a snapshot install, or the group was deleted)
 *   hardstate/<id>      JSON Checkpoint: the hard state, and the position of the WAL record
 *                       it was copied from (null: written directly, newer than anything
 *                       before the floor)
 *   overwrites/<id>     JSON [{seq, index}]: the group's log overwrote its suffix from `index`
 *                       in segment `seq`, so its records at `index` or above in older
 *                       segments are dead; kept here once the segment holding the
 *                       overwriting records may be deleted before those older segments
 *   snapshot-meta/<id>  JSON SnapshotMeta
 *   snapshot-file/<id>  JSON SnapshotFileRef: the file holding the snapshot's bytes (its name
 *                       in the snapshot directory, length and CRC-32C; see snapshot-files.ts)
 *   snapshot-data/<id>  the snapshot's bytes, as stores written before snapshot files kept
 *                       them (read when there is no snapshot-file/<id>; removed by the next
 *                       snapshot of the group)
 *   termbound/<id>      JSON number: no hard state of the group with a higher term was ever
 *                       written (raised, ahead, before a hard state would pass it), so a
 *                       replica whose WAL lost its hard state knows a term it never acted in
 *   recovering/<id>     JSON {term, reason}: the group's durable state was damaged and
 *                       repaired (see repair.ts); it recovers until its log holds an entry
 *                       of at least that term
 *
 * Values are validated when read: a malformed value is an invariant violation, not data.
 */
import type { ClusterConfig, HardState, SnapshotMeta } from '@quorumq/raft';
import { assert } from './assert.js';
import type { WalPosition } from './wal.js';

export const KV_PREFIX = {
  member: 'group/',
  floor: 'floor/',
  checkpoint: 'hardstate/',
  overwrites: 'overwrites/',
  snapshotMeta: 'snapshot-meta/',
  snapshotData: 'snapshot-data/',
  snapshotFile: 'snapshot-file/',
  termBound: 'termbound/',
  recovering: 'recovering/',
} as const;

export type KvKind = keyof typeof KV_PREFIX;

export function kvKey(kind: KvKind, groupId: string): string {
  return `${KV_PREFIX[kind]}${groupId}`;
}

/** A hard state copied out of the WAL so the segments holding it can be deleted. */
export interface Checkpoint {
  readonly hardState: HardState;
  /** The WAL record it was copied from; later records override it. */
  readonly position: WalPosition | null;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder('utf-8', { fatal: true });

export function encodeJson(value: unknown): Uint8Array {
  return encoder.encode(JSON.stringify(value));
}

export const EMPTY_VALUE = new Uint8Array(0);

export function decodePosition(bytes: Uint8Array, key: string): WalPosition {
  return parsePosition(parseJson(bytes, key), key);
}

export function decodeCheckpoint(bytes: Uint8Array, key: string): Checkpoint {
  const value = asObject(parseJson(bytes, key), key);
  const hardState = asObject(value['hardState'], key);
  const vote = hardState['vote'];
  assert(vote === null || typeof vote === 'string', () => `${key}: bad vote`);
  return {
    hardState: { term: uint(hardState['term'], key), vote, commit: uint(hardState['commit'], key) },
    position: value['position'] === null ? null : parsePosition(value['position'], key),
  };
}

export interface Overwrite {
  readonly seq: number;
  readonly index: number;
}

export function decodeOverwrites(bytes: Uint8Array, key: string): Overwrite[] {
  const value = parseJson(bytes, key);
  assert(Array.isArray(value), () => `${key}: expected an array`);
  return value.map((item: unknown) => {
    const object = asObject(item, key);
    return { seq: uint(object['seq'], key), index: uint(object['index'], key) };
  });
}

export function decodeSnapshotFileRef(bytes: Uint8Array, key: string): { file: string; bytes: number; crc: number } {
  const value = asObject(parseJson(bytes, key), key);
  const file = value['file'];
  assert(typeof file === 'string' && /^[0-9a-f]+-\d+-\d+\.snap$/.test(file), () => `${key}: bad snapshot file name`);
  return { file, bytes: uint(value['bytes'], key), crc: uint(value['crc'], key) };
}

export function decodeSnapshotMeta(bytes: Uint8Array, key: string): SnapshotMeta {
  const value = asObject(parseJson(bytes, key), key);
  const config = asObject(value['config'], key);
  const clusterConfig: ClusterConfig = {
    voters: stringArray(config['voters'], key),
    learners: stringArray(config['learners'], key),
  };
  return { index: uint(value['index'], key), term: uint(value['term'], key), config: clusterConfig };
}

export function decodeTermBound(bytes: Uint8Array, key: string): number {
  return uint(parseJson(bytes, key), key);
}

/** A group repaired after damage: it recovers until its log holds an entry of `term` (see RecoveryMark). */
export interface RecoveringMark {
  readonly term: number;
  readonly reason: string;
}

export function decodeRecovering(bytes: Uint8Array, key: string): RecoveringMark {
  const value = asObject(parseJson(bytes, key), key);
  const reason = value['reason'];
  assert(typeof reason === 'string', () => `${key}: bad reason`);
  return { term: uint(value['term'], key), reason };
}

function parseJson(bytes: Uint8Array, key: string): unknown {
  try {
    return JSON.parse(decoder.decode(bytes));
  } catch (error) {
    assert(false, () => `${key}: value is not JSON (${String(error)})`);
  }
}

function parsePosition(value: unknown, key: string): WalPosition {
  const object = asObject(value, key);
  return { seq: uint(object['seq'], key), offset: uint(object['offset'], key) };
}

function asObject(value: unknown, key: string): Record<string, unknown> {
  assert(isObject(value), () => `${key}: expected an object`);
  return value;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function uint(value: unknown, key: string): number {
  assert(typeof value === 'number' && Number.isSafeInteger(value) && value >= 0, () => `${key}: bad integer ${String(value)}`);
  return value;
}

function stringArray(value: unknown, key: string): string[] {
  assert(Array.isArray(value) && value.every((item) => typeof item === 'string'), () => `${key}: expected strings`);
  return value;
}
