import { quorumq } from '@quorumq/proto';
import type { Message } from '@quorumq/raft';
import { describe, expect, it, vi } from 'vitest';

import { createRandom } from '@quorumq/raft';
import { decodeRaftBatch, encodeRaftBatch, messageFromWire, messageToWire, type GroupMessage, type WireMessage } from '../src/raft-codec.js';

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
  { ...envelope, type: 'heartbeat', commit: 17, readSeq: 4, quiesce: false },
  { ...envelope, type: 'heartbeatResp', readSeq: 4, wake: false },
  { ...envelope, type: 'heartbeat', commit: 18, readSeq: 0, quiesce: true },
  { ...envelope, type: 'heartbeatResp', readSeq: 0, wake: true },
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

  it('writes an append response byte for byte as the generated encoder does, zeros and empty names omitted', () => {
    const responses: Message[] = [
      { ...envelope, type: 'appendResp', reject: true, index: 5, hintIndex: 3, hintTerm: 2 },
      { ...envelope, type: 'appendResp', reject: false, index: 2 ** 50, hintIndex: 0, hintTerm: 0 },
      { from: 'n3', to: 'n1', term: 0, type: 'appendResp', reject: false, index: 0, hintIndex: 0, hintTerm: 0 },
      { from: 'n3-ü', to: 'n1', term: 300, type: 'appendResp', reject: true, index: 0, hintIndex: 127, hintTerm: 128 },
    ];
    for (const groupId of ['q:orders-ü:3', '']) {
      const batch = responses.map((message) => ({ groupId, message }));
      const ours = encodeRaftBatch(batch);
      const theirs = pb.RaftBatch.encode({ messages: batch.map(({ message }) => messageToWire(groupId, message)) }).finish();
      expect(Buffer.from(ours).toString('hex')).toBe(Buffer.from(theirs).toString('hex'));
    }
    // Between other kinds, each keeps its place.
    const mixed: GroupMessage[] = [samples[7]!, responses[0]!, samples[4]!, responses[3]!].map((message) => ({ groupId: 'g', message }));
    const decoded = pb.RaftBatch.decode(encodeRaftBatch(mixed)).messages.map((m) => messageFromWire(m as pb.RaftMessage));
    expect(decoded.map((m) => (m === null ? null : plain(m)))).toEqual(mixed.map(plain));
  });

  it('an empty batch is empty', () => {
    expect(encodeRaftBatch([]).byteLength).toBe(0);
  });
});

describe('messages the codec refuses', () => {
  /** Encodes with the generated code (which writes any uint64) and decodes as a node does. */
  const roundTrip = (wire: pb.RaftMessage.$Properties): GroupMessage | null =>
    messageFromWire(pb.RaftMessage.decode(pb.RaftMessage.encode(wire).finish()));
  const base = { groupId: 'meta', from: 'n1', to: 'n2', term: 3 };

  it('a term, index or size past 2^53 (not exact as a number) is refused', () => {
    expect(roundTrip({ ...base, heartbeat: { commit: 1, readSeq: 0 } })).not.toBeNull();
    expect(roundTrip({ ...base, term: 2 ** 60, heartbeat: { commit: 1, readSeq: 0 } })).toBeNull();
    expect(roundTrip({ ...base, term: Number.MAX_SAFE_INTEGER + 1, heartbeat: { commit: 1, readSeq: 0 } })).toBeNull();
    expect(roundTrip({ ...base, heartbeat: { commit: 2 ** 54, readSeq: 0 } })).toBeNull();
    expect(roundTrip({ ...base, vote: { lastLogIndex: 2 ** 63, lastLogTerm: 1 } })).toBeNull();
    expect(roundTrip({ ...base, append: { prevLogIndex: 1, prevLogTerm: 1, commit: 1, entries: [{ index: 2, term: 2 ** 55 }] } })).toBeNull();
    expect(roundTrip({ ...base, append: { prevLogIndex: 1, prevLogTerm: 1, commit: 1, entries: [{ index: 2 ** 56, term: 1 }] } })).toBeNull();
    expect(roundTrip({ ...base, snapshot: { meta: { index: 2 ** 60, term: 1 }, offset: 0, totalBytes: 1, chunk: new Uint8Array(1), done: true } })).toBeNull();
    expect(roundTrip({ ...base, snapshotResponse: { snapshotIndex: 1, nextOffset: 2 ** 57 } })).toBeNull();
    // 10^12 is a safe integer: such a term is refused by who may send it (transport, node), not here.
    expect(roundTrip({ ...base, term: 1e12, heartbeat: { commit: 1, readSeq: 0 } })?.message.term).toBe(1e12);
  });

  it('a message without a sender or an addressee is refused', () => {
    expect(roundTrip({ ...base, from: '', heartbeat: { commit: 1, readSeq: 0 } })).toBeNull();
    expect(roundTrip({ ...base, to: '', heartbeat: { commit: 1, readSeq: 0 } })).toBeNull();
  });
});

describe('RaftBatch read by hand', () => {
  /** What the generated decoder makes of a batch, as the stream handler sees it. */
  const generated = (bytes: Buffer): WireMessage[] =>
    pb.RaftBatch.decode(bytes).messages.map((wire) => ({ from: wire.from ?? '', to: wire.to ?? '', decoded: messageFromWire(wire as pb.RaftMessage) }));
  /** The outcome of reading: the messages (byte arrays as hex), or that it threw. */
  const outcome = (read: () => WireMessage[]): unknown => {
    try {
      return plain(read());
    } catch {
      return 'threw';
    }
  };
  const batchOf = (groupId: string): GroupMessage[] => samples.map((message) => ({ groupId, message }));

  it('reads every kind as the generated decoder does, from this writer and from the generated one', () => {
    for (const groupId of ['meta', 'q:orders-ü:3', '']) {
      const batch = batchOf(groupId);
      for (const bytes of [encodeRaftBatch(batch), Buffer.from(pb.RaftBatch.encode({ messages: batch.map((m) => messageToWire(m.groupId, m.message)) }).finish())]) {
        expect(outcome(() => decodeRaftBatch(bytes))).toEqual(outcome(() => generated(bytes)));
      }
    }
    const ours = decodeRaftBatch(encodeRaftBatch(batchOf('meta')));
    expect(ours.map((m) => (m.decoded === null ? null : plain(m.decoded)))).toEqual(batchOf('meta').map(plain));
  });

  it('appends and append responses as this node writes them never reach the generated decoder', () => {
    const hot = [samples[4]!, samples[5]!, samples[6]!].map((message) => ({ groupId: 'q:1', message }));
    const bytes = encodeRaftBatch(hot);
    const decode = vi.spyOn(pb.RaftMessage, 'decode');
    const batchDecode = vi.spyOn(pb.RaftBatch, 'decode');
    try {
      expect(decodeRaftBatch(bytes).map((m) => plain(m.decoded))).toEqual(hot.map(plain));
      expect(decode).not.toHaveBeenCalled();
      expect(batchDecode).not.toHaveBeenCalled();
      // A heartbeat among them goes to the generated decoder alone.
      decodeRaftBatch(encodeRaftBatch([...hot, { groupId: 'q:1', message: samples[7]! }]));
      expect(decode).toHaveBeenCalledTimes(1);
    } finally {
      decode.mockRestore();
      batchDecode.mockRestore();
    }
  });

  it('an entry read by hand is a view of the batch, as the generated decoder gives it', () => {
    const bytes = encodeRaftBatch([{ groupId: 'g', message: samples[4]! }]);
    const [read] = decodeRaftBatch(bytes);
    const entry = (read!.decoded!.message as Extract<Message, { type: 'append' }>).entries[0]!;
    expect(entry.data.buffer).toBe(bytes.buffer);
  });

  it('bytes changed at random read the same both ways, or fail both ways (3,000 mutations)', () => {
    const random = createRandom(11);
    const seeds = [encodeRaftBatch(batchOf('q:1')), encodeRaftBatch(batchOf('meta').slice(4, 7)), encodeRaftBatch([{ groupId: 'g', message: samples[6]! }])];
    let read = 0;
    for (let round = 0; round < 3000; round++) {
      const bytes = Buffer.from(seeds[round % seeds.length]!);
      const changes = 1 + random.nextInt(3);
      let mutated = bytes;
      for (let c = 0; c < changes; c++) {
        const at = random.nextInt(mutated.byteLength);
        switch (random.nextInt(4)) {
          case 0:
            mutated[at] = random.nextInt(256);
            break;
          case 1:
            mutated[at] = mutated[at]! ^ (1 << random.nextInt(8));
            break;
          case 2:
            mutated = mutated.subarray(0, at);
            break;
          default:
            mutated = Buffer.concat([mutated.subarray(0, at), Buffer.from([random.nextInt(256)]), mutated.subarray(at)]);
        }
        if (mutated.byteLength === 0) break;
      }
      const theirs = outcome(() => generated(mutated));
      expect(outcome(() => decodeRaftBatch(mutated))).toEqual(theirs);
      if (theirs !== 'threw') read += 1;
    }
    // Many mutations still read (a changed value, a changed byte of a body): both readers' messages were compared, not only their failures.
    expect(read).toBeGreaterThan(300);
  });
});
