import { quorumq } from '@quorumq/proto';
import type { Message } from '@quorumq/raft';
import { describe, expect, it } from 'vitest';

import { encodeRaftBatch, messageFromWire, messageToWire, type GroupMessage } from '../src/raft-codec.js';

import pb = quorumq.v1;

const envelope = { from: 'n1', to: 'n2', term: 7 };
const data = (text: string): Buffer => Buffer.from(text);

const samples: Message[] = [
  { ...envelope, type: 'preVote', lastLogIndex: 10, lastLogTerm: 6 },
  { ...envelope, type: 'preVoteResp', reject: true },
  { ...envelope, type: 'vote', lastLogIndex: 2 ** 40, lastLogTerm: 6, leaderTransfer: true },
  { ...envelope, type: 'voteResp', reject: false },
  {
    ...envelope,
    type: 'append',
    prevLogIndex: 99,
    prevLogTerm: 6,
    commit: 98,
    entries: [
      { index: 100, term: 7, type: 'normal', data: data('a'.repeat(300)) },
      { index: 101, term: 7, type: 'config', data: data('{"voters":["n1"]}') },
      { index: 2 ** 52, term: 2 ** 33, type: 'normal', data: new Uint8Array(0) },
    ],
  },
  { ...envelope, type: 'append', prevLogIndex: 0, prevLogTerm: 0, commit: 0, entries: [] },
  { ...envelope, type: 'appendResp', reject: true, index: 5, hintIndex: 3, hintTerm: 2 },
  { ...envelope, type: 'heartbeat', commit: 17, readSeq: 4 },
  { ...envelope, type: 'heartbeatResp', readSeq: 4 },
  {
    ...envelope,
    type: 'snapshot',
    meta: { index: 50, term: 5, config: { voters: ['n1', 'n2', 'n3'], learners: ['n4'] } },
    offset: 1024,
    totalBytes: 4096,
    chunk: data('chunk'),
    done: false,
  },
  { ...envelope, type: 'snapshotResp', snapshotIndex: 50, nextOffset: 2048, reject: false },
  { ...envelope, type: 'timeoutNow' },
];

/** Byte arrays as hex, so that a Buffer and a Uint8Array of the same bytes compare equal. */
function plain(value: unknown): unknown {
  if (value instanceof Uint8Array) return Buffer.from(value).toString('hex');
  if (Array.isArray(value)) return value.map(plain);
  if (value !== null && typeof value === 'object') return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, plain(v)]));
  return value;
}

describe('RaftBatch written by hand', () => {
  it('decodes with the generated code to the same messages, for every kind, in order', () => {
    const batch: GroupMessage[] = samples.map((message, i) => ({ groupId: i % 2 === 0 ? 'meta' : 'q:orders-ü:3', message }));
    const decoded = pb.RaftBatch.decode(encodeRaftBatch(batch)).messages.map((m) => messageFromWire(m as pb.RaftMessage));
    expect(decoded.map((m) => (m === null ? null : plain(m)))).toEqual(batch.map(plain));
  });

  it('writes an append byte for byte as the generated encoder does', () => {
    const append = samples[4]!;
    const ours = encodeRaftBatch([{ groupId: 'g', message: append }]);
    const theirs = pb.RaftBatch.encode({ messages: [messageToWire('g', append)] }).finish();
    expect(Buffer.from(ours)).toEqual(Buffer.from(theirs));
  });

  it('an empty batch is empty', () => {
    expect(encodeRaftBatch([]).byteLength).toBe(0);
  });
});
