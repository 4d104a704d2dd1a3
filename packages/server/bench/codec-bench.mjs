// The hand-written codecs against the generated code they could be replaced by (or that
// replaced them), in µs per message (per command, delivery, outcome; per entry of an append):
// each variant runs in a process of its own, is warmed up for 300 ms, then timed 9 times for
// about 20 ms; each figure is the median of the 11. A hand path is
// kept only where it measurably pays; the figures are recorded next to each codec and in
// docs/architecture.md ("Codecs").
//   npm run build && node packages/server/bench/codec-bench.mjs     (about 40 seconds; ONLY=text for the comparisons named so)
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

import * as proto from '@quorumq/proto';

import { DEFAULTS } from '../dist/config.js';
import {
  decodeQueueCommand,
  decodeQueueEntry,
  decodeQueueSnapshot,
  encodeQueueBatch,
  encodeQueueCommand,
  encodeQueueEntry,
  encodeQueueSnapshot,
  queueCommandProblem,
} from '../dist/log-format.js';
import { decodeRaftBatch, encodeRaftBatch, messageFromWire, messageToWire } from '../dist/raft-codec.js';
import { checkMessageBytes } from '../dist/request-limits.js';
import { encodeConsumeResponse } from '../dist/wire.js';

const { quorumq, readPublishBatch, readPublishOutcomes, encodePublishBatch, messageParts } = proto;
const pb = quorumq.v1;
const RUNS = 11;
const BATCH = 256;

/** The comparisons, registered below; each runs in a process of its own. */
const groups = [];

/** Registers a comparison: `setup` returns its variants (`[name, f]`, f handling `items` items). */
function group(name, items, setup, cold = 0) {
  groups.push({ name, items, setup, cold });
}

/** Runs `f` for about 300 ms (the JIT's tiers have then compiled it); the repetitions that take about 20 ms. */
function warm(f) {
  let reps = 1;
  const start = process.hrtime.bigint();
  let perCall = 0;
  while (Number(process.hrtime.bigint() - start) < 300e6) {
    const t = process.hrtime.bigint();
    for (let i = 0; i < reps; i++) f();
    perCall = Number(process.hrtime.bigint() - t) / reps;
    if (perCall * reps < 5e6) reps *= 2;
  }
  return Math.max(1, Math.round(20e6 / perCall));
}

/** Median µs per item of one variant over RUNS runs of about 20 ms, after warming it up. */
function run({ items, setup, cold }, variant) {
  const [, f] = setup()[variant];
  if (cold > 0) {
    // A cold group: the mean of the first `cold` calls in a new process, no warm-up (what a
    // new client pays while its JIT has not compiled the code yet).
    const t = process.hrtime.bigint();
    for (let i = 0; i < cold; i++) f();
    return Number(process.hrtime.bigint() - t) / 1000 / cold / items;
  }
  const reps = warm(f);
  const runs = [];
  for (let r = 0; r < RUNS; r++) {
    const t = process.hrtime.bigint();
    for (let i = 0; i < reps; i++) f();
    runs.push(Number(process.hrtime.bigint() - t) / 1000 / reps / items);
  }
  return runs.sort((a, b) => a - b)[Math.floor(RUNS / 2)];
}

const sizes = [16, 1024, 16 * 1024];
const sizeName = (n) => (n >= 1024 ? `${n / 1024} KiB` : `${n} B`);
const message = (size) => ({ body: Buffer.alloc(size, 7), routingKey: 'orders', properties: {}, headers: {} });

// ------------------------------------------------------------------------------------
// The SDK: a publish batch, from the caller's messages to the bytes on the wire.
for (const size of sizes) {
  group(`sdk: encode a publish batch, ${sizeName(size)} bodies`, BATCH, () => {
    const requests = Array.from({ length: BATCH }, (_, i) => ({ publishId: i + 1, exchange: '', message: message(size), mandatory: false }));
    const hand = () => {
      const wire = requests.map((r) => ({ publishId: r.publishId, exchange: r.exchange, mandatory: r.mandatory, producerId: undefined, sequence: undefined, ...messageParts(r.message) }));
      encodePublishBatch(wire);
    };
    return [
      ['hand (publish.js)', hand],
      ['generated', () => pb.PublishBatch.encode({ publishes: requests }).finish()],
    ];
  });
}

// The node: a publish batch, from the bytes to requests whose messages it can log as they
// came, each message checked against the limits first.
for (const size of sizes) {
  group(`node: read a publish batch, ${sizeName(size)} bodies`, BATCH, () => {
    const publishes = Array.from({ length: BATCH }, (_, i) => ({ publishId: i + 1, exchange: '', message: message(size) }));
    const bytes = Buffer.from(pb.PublishBatch.encode({ publishes }).finish());
    const check = (m) => checkMessageBytes(m, DEFAULTS);
    const reencoded = () => {
      for (const p of pb.PublishBatch.decode(bytes).publishes) pb.Message.encode(p.message).finish();
    };
    return [
      ['hand (publish.js), bytes kept', () => readPublishBatch(bytes, check)],
      ['hand (the reader before), bytes kept', () => oldReadPublishBatch(bytes, check)],
      ['generated, then messages encoded', reencoded],
      ['generated alone (no bytes to log)', () => pb.PublishBatch.decode(bytes)],
    ];
  });
}

// Publish outcomes: written by the node, read by the SDK.
const outcomes = () => Array.from({ length: BATCH }, (_, i) => ({ publishId: i + 1, outcome: pb.PublishOutcome.PUBLISH_OUTCOME_CONFIRMED, queues: ['orders'] }));
group('node: encode publish outcomes', BATCH, () => {
  const list = outcomes();
  return [
    ['generated', () => pb.PublishOutcomes.encode({ outcomes: list }).finish()],
    ['hand (the writer before)', () => handOutcomes(list)],
  ];
});
group('sdk: decode publish outcomes', BATCH, () => {
  const bytes = Buffer.from(pb.PublishOutcomes.encode({ outcomes: outcomes() }).finish());
  return [
    ['hand (readPublishOutcomes, the SDK)', () => readPublishOutcomes(bytes)],
    ['generated', () => pb.PublishOutcomes.decode(bytes)],
  ];
});

// One outcome at a time, as a publisher at one in flight reads them, in a new process: the
// figure a warm loop hides (the SDK reads outcomes by hand for it; docs/architecture.md).
group(
  'sdk: decode one publish outcome, first 2,000 calls of a process',
  1,
  () => {
    const bytes = Buffer.from(pb.PublishOutcomes.encode({ outcomes: outcomes().slice(0, 1) }).finish());
    return [
      ['hand (readPublishOutcomes, the SDK)', () => readPublishOutcomes(bytes)],
      ['generated', () => pb.PublishOutcomes.decode(bytes)],
    ];
  },
  2000,
);

// ------------------------------------------------------------------------------------
// The log: commands, entries, snapshots.
const enqueue = { type: 'enqueue', sizeBytes: 1024, exchange: '', routingKeys: ['orders'], producerId: 'n1/p', sequence: 1_700_000_000_000_000 };
const ack = { type: 'ack', consumerId: 'n1/7f3c2a', deliveryTag: 12345, multiple: true };
const deaths = {
  records: [{ queue: 'orders', reason: 'rejected', count: 1, exchange: '', routingKeys: ['orders'], firstTime: 1_700_000_000_000, lastTime: 1_700_000_000_000, originalExpirationMs: null }],
  first: { reason: 'rejected', queue: 'orders', exchange: '' },
  last: { reason: 'rejected', queue: 'orders', exchange: '' },
};
const deadLettered = { ...enqueue, exchange: 'dlx', deaths };
for (const [name, command] of [['an enqueue', enqueue], ['an ack', ack], ['a dead-lettered enqueue', deadLettered]]) {
  group(`log: encode + decode ${name}`, 1, () => {
    const json = () => {
      const text = JSON.stringify(command);
      const bytes = Buffer.allocUnsafe(Buffer.byteLength(text));
      bytes.write(text);
      JSON.parse(bytes.toString('utf8'));
    };
    return [
      ['QueueCommand (protobuf)', () => decodeQueueCommand(encodeQueueCommand(command))],
      ['JSON (the format before)', json],
    ];
  });
}

const messageOf = (size) => Buffer.from(pb.Message.encode(message(size)).finish());

// One command per entry (one operation in flight: a publish's enqueue, a consumer's ack), warm
// and in a new process (the first 2,000 entries, before the JIT has compiled either path).
for (const cold of [0, 2000]) {
  for (const [name, command, bytes] of [['an enqueue of 1 KiB', enqueue, messageOf(1024)], ['an ack', ack, null]]) {
    group(`log: encode a single entry, ${name}${cold > 0 ? ', cold' : ''}`, 1, () => [
      ['hand (log-format.ts)', () => encodeQueueEntry(command, bytes, 1_700_000_000_000)],
      ['generated (the writer it replaced)', () => generatedSingle(command, bytes, 1_700_000_000_000)],
    ], cold);
  }
}
for (const [count, size] of [[64, 16], [64, 1024], [16, 16 * 1024]]) {
  const commands = () => Array.from({ length: count }, () => ({ command: { ...enqueue, sizeBytes: size }, message: messageOf(size) }));
  const what = `${count} enqueues of ${sizeName(size)}`;
  group(`log: encode a batch entry, ${what}`, count, () => {
    const list = commands();
    return [
      ['generated (log-format.ts)', () => encodeQueueBatch(list, 1_700_000_000_000)],
      ['hand (the writer it replaced)', () => handBatch(list, 1_700_000_000_000)],
    ];
  });
  group(`log: decode a batch entry, ${what}, on a follower`, count, () => {
    const follower = Buffer.from(encodeQueueBatch(commands(), 1_700_000_000_000)); // a copy: its commands are decoded
    return [
      ['hand (log-format.ts)', () => decodeQueueEntry(follower)],
      ['generated', () => generatedDecode(follower)],
    ];
  });
  // The leader applies the entries it proposed: the buffer it encoded, whose commands it knows.
  group(`log: decode a batch entry, ${what}, on its leader`, count, () => {
    const own = encodeQueueBatch(commands(), 1_700_000_000_000);
    return [
      ['hand (log-format.ts), commands known', () => decodeQueueEntry(own)],
      ['generated', () => generatedDecode(own)],
    ];
  });
}
const snapshotOf = () => {
  const stored = messageOf(1024);
  return { machine: Buffer.alloc(64 * 1024, 1), live: Array.from({ length: 1024 }, (_, i) => [i * 4096, stored]) };
};
group('log: encode a snapshot, 1,024 messages of 1 KiB', 1024, () => {
  const { machine, live } = snapshotOf();
  return [
    ['hand (log-format.ts)', () => encodeQueueSnapshot(machine, live)],
    ['generated', () => pb.QueueSnapshot.encode({ machine, messages: live.map(([id, m]) => ({ id, message: m })) }).finish()],
  ];
});
group('log: decode a snapshot, 1,024 messages of 1 KiB', 1024, () => {
  const { machine, live } = snapshotOf();
  const snapshot = encodeQueueSnapshot(machine, live);
  return [
    ['generated (log-format.ts)', () => decodeQueueSnapshot(snapshot)],
    ['hand (the reader it replaced)', () => handSnapshotRead(snapshot)],
  ];
});

// ------------------------------------------------------------------------------------
// Peers and consumers.
group('raft: encode an append of 8 entries of 66 KiB', 8, () => {
  const data = encodeQueueBatch(Array.from({ length: 64 }, () => ({ command: enqueue, message: messageOf(1024) })), 1_700_000_000_000);
  const entries = Array.from({ length: 8 }, (_, i) => ({ index: 100 + i, term: 3, type: 'normal', data }));
  const messages = [{ groupId: 'queue/orders/1', message: { type: 'append', from: 'n1', to: 'n2', term: 3, prevLogIndex: 99, prevLogTerm: 3, entries, commit: 98 } }];
  return [
    ['hand (raft-codec.ts)', () => encodeRaftBatch(messages)],
    ['generated', () => pb.RaftBatch.encode({ messages: messages.map((m) => messageToWire(m.groupId, m.message)) }).finish()],
  ];
});
group('raft: encode an append response', 1, () => {
  const messages = [{ groupId: 'queue/orders/1', message: { type: 'appendResp', from: 'n2', to: 'n1', term: 3, reject: false, index: 123_456, hintIndex: 0, hintTerm: 0 } }];
  return [
    ['hand (raft-codec.ts)', () => encodeRaftBatch(messages)],
    ['generated', () => pb.RaftBatch.encode({ messages: messages.map((m) => messageToWire(m.groupId, m.message)) }).finish()],
  ];
});
/** A batch read into the messages the stream handler takes, by the generated decoder. */
const generatedRaftRead = (bytes) =>
  pb.RaftBatch.decode(bytes).messages.map((wire) => ({ from: wire.from ?? '', to: wire.to ?? '', decoded: messageFromWire(wire) }));
group('raft: read an append of one 1 KiB entry (one in flight)', 1, () => {
  const data = encodeQueueBatch([{ command: enqueue, message: messageOf(1024) }], 1_700_000_000_000);
  const entries = [{ index: 100, term: 3, type: 'normal', data }];
  const bytes = encodeRaftBatch([{ groupId: 'queue/orders/1', message: { type: 'append', from: 'n1', to: 'n2', term: 3, prevLogIndex: 99, prevLogTerm: 3, entries, commit: 98 } }]);
  return [
    ['hand (decodeRaftBatch)', () => decodeRaftBatch(bytes)],
    ['generated', () => generatedRaftRead(bytes)],
  ];
});
group('raft: read an append response', 1, () => {
  const bytes = encodeRaftBatch([{ groupId: 'queue/orders/1', message: { type: 'appendResp', from: 'n2', to: 'n1', term: 3, reject: false, index: 123_456, hintIndex: 0, hintTerm: 0 } }]);
  return [
    ['hand (decodeRaftBatch)', () => decodeRaftBatch(bytes)],
    ['generated', () => generatedRaftRead(bytes)],
  ];
});
for (const size of [16, 1024]) {
  group(`node: encode a delivery batch, ${sizeName(size)} bodies`, BATCH, () => {
    const stored = Buffer.from(pb.Message.encode({ body: Buffer.alloc(size, 3), routingKey: 'orders', properties: { contentType: 'text/plain' } }).finish());
    const fields = (i) => ({ queue: 'orders', consumerTag: 'c1', deliveryTag: i + 1, deliveryCount: 0, redelivered: false, exchange: '', routingKeys: ['orders'] });
    const deliveries = Array.from({ length: BATCH }, (_, i) => ({ ...fields(i), encodedMessage: stored }));
    const generated = () =>
      pb.ConsumeResponse.encode({ deliveries: { deliveries: deliveries.map((d, i) => ({ ...fields(i), message: pb.Message.decode(d.encodedMessage) })) } }).finish();
    return [
      ['hand (wire.ts), stored bytes sent', () => encodeConsumeResponse({ deliveries: { deliveries } })],
      ['generated, stored message decoded', generated],
    ];
  });
}

// ------------------------------------------------------------------------------------
// The generated counterparts of the hand paths.

/**
 * How log-format.ts wrote a one-command entry before: the checks, the entry as an object (a
 * computed key for the command's case, a spread for the format) through the generated
 * encoder, into a reused writer, and the command noted for the leader's apply.
 */
const singleWriter = proto.Writer.create();
const noted = new WeakMap();
function generatedSingle(command, m, now) {
  const problem = queueCommandProblem(command);
  if (problem !== null) throw new Error(problem);
  const queueCommand = { [command.type]: command };
  const entry = m === null ? { queueCommand } : { message: m, queueCommand };
  singleWriter.pos = 0;
  singleWriter.states = null;
  singleWriter.double(now);
  const out = pb.QueueEntry.encode({ ...entry, format: pb.QueueEntryFormat.QUEUE_ENTRY_FORMAT_COMMAND }, singleWriter).finish();
  noted.set(out, command);
  return out;
}

/**
 * The hand-written QueueEntry batch writer log-format.ts had (sized first, then written into
 * one buffer, each message copied once), with the same checks, for comparison.
 */
function handBatch(commands, now) {
  const { bytesFieldBytes, writeBytesField, writeVarint } = proto;
  const sized = commands.map(({ command, message: m }) => {
    const encoded = encodeQueueCommand(command);
    return { command: encoded, message: m, size: bytesFieldBytes(encoded.byteLength) + (m === null ? 0 : bytesFieldBytes(m.byteLength)) };
  });
  let size = 8 + 2;
  for (const s of sized) size += bytesFieldBytes(s.size);
  const out = Buffer.allocUnsafe(size);
  out.writeDoubleLE(now, 0);
  let at = 8;
  for (const s of sized) {
    out[at++] = 0x22;
    at = writeVarint(out, at, s.size);
    if (s.message !== null) at = writeBytesField(out, at, 0x1a, s.message);
    at = writeBytesField(out, at, 0x32, s.command);
  }
  out[at++] = 0x28;
  out[at++] = pb.QueueEntryFormat.QUEUE_ENTRY_FORMAT_COMMAND;
  return out;
}

function generatedDecode(data) {
  const entry = pb.QueueEntry.decode(data.subarray(8));
  return entry.batch.map((element) => {
    const object = pb.QueueCommand.toObject(element.queueCommand, { defaults: true });
    const [type] = Object.keys(object);
    return { command: { type, ...object[type] }, message: element.message };
  });
}

/** The node's hand-written PublishOutcomes writer before issue 13 (wire.ts), for comparison. */
function handOutcomes(outcomes) {
  const { bytesFieldBytes, stringFieldBytes, varintBytes, varintFieldBytes, writeStringField, writeVarint, writeVarintField } = proto;
  const size = (o) => {
    let n = varintFieldBytes(o.publishId) + varintFieldBytes(o.outcome) + stringFieldBytes(o.reason ?? '') + varintFieldBytes(o.statusCode ?? 0);
    for (const q of o.queues ?? []) n += 1 + varintBytes(Buffer.byteLength(q)) + Buffer.byteLength(q);
    return n;
  };
  const sizes = outcomes.map(size);
  let total = 0;
  for (const s of sizes) total += bytesFieldBytes(s);
  const out = Buffer.allocUnsafe(total);
  let at = 0;
  for (let i = 0; i < outcomes.length; i++) {
    const o = outcomes[i];
    out[at++] = 0x0a;
    at = writeVarint(out, at, sizes[i]);
    at = writeVarintField(out, at, 0x08, o.publishId);
    at = writeVarintField(out, at, 0x10, o.outcome);
    at = writeStringField(out, at, 0x1a, o.reason ?? '');
    for (const q of o.queues ?? []) {
      out[at++] = 0x2a;
      const length = Buffer.byteLength(q);
      at = writeVarint(out, at, length);
      at += out.write(q, at, length, 'utf8');
    }
    at = writeVarintField(out, at, 0x30, o.statusCode ?? 0);
  }
  return out;
}

/** The hand-written QueueSnapshot reader log-format.ts had (wire.ts before issue 13), for comparison. */
function handSnapshotRead(data) {
  const reader = proto.Reader.create(data);
  let machine = new Uint8Array(0);
  const messages = new Map();
  while (reader.pos < reader.len) {
    const t = reader.uint32();
    if (t === 0x0a) machine = reader.bytes();
    else if (t === 0x12) {
      const end = reader.uint32() + reader.pos;
      let id = 0;
      let message = null;
      while (reader.pos < end) {
        const s = reader.uint32();
        if (s === 0x08) id = reader.uint64();
        else if (s === 0x12) message = Buffer.from(reader.bytes());
        else reader.skipType(s & 7);
      }
      if (message !== null) messages.set(id, message);
    } else reader.skipType(t & 7);
  }
  return { machine, messages };
}

/**
 * The node's PublishBatch reader before issue 13 (wire.ts): a Reader per publish and per
 * check, each message's bytes kept in a WeakMap. For comparison.
 */
const oldRawMessages = new WeakMap();
function oldReadPublish(bytes, check) {
  const reader = proto.Reader.create(bytes);
  const request = new pb.PublishRequest();
  let raw = null;
  while (reader.pos < reader.len) {
    const t = reader.uint32();
    if (t === 0x08) request.publishId = reader.uint64();
    else if (t === 0x12) request.exchange = reader.string();
    else if (t === 0x1a) {
      raw = reader.bytes();
      check(raw);
    } else if (t === 0x20) request.mandatory = reader.bool();
    else if (t === 0x2a) request.producerId = reader.string();
    else if (t === 0x30) request.sequence = reader.uint64();
    else reader.skipType(t & 7);
  }
  if (raw !== null) {
    const message = pb.Message.decode(raw);
    request.message = message;
    oldRawMessages.set(message, raw);
  }
  return request;
}
function oldReadPublishBatch(bytes, check) {
  const batch = new pb.PublishBatch();
  const reader = proto.Reader.create(bytes);
  while (reader.pos < reader.len) {
    const t = reader.uint32();
    if (t === 0x0a) batch.publishes.push(oldReadPublish(reader.bytes(), check));
    else reader.skipType(t & 7);
  }
  return batch;
}

// ------------------------------------------------------------------------------------
// Each variant of each comparison in a fresh process: its own JIT and heap, so that one
// variant's garbage is not collected in another's time.
const [onlyGroup, onlyVariant] = process.argv.slice(2).map(Number);
if (onlyGroup !== undefined && onlyVariant !== undefined) {
  process.stdout.write(JSON.stringify(run(groups[onlyGroup], onlyVariant)));
} else {
  const started = Date.now();
  for (const [i, g] of groups.entries()) {
    // ONLY=text: the comparisons whose name holds it.
    if (process.env.ONLY !== undefined && !g.name.includes(process.env.ONLY)) continue;
    const names = g.setup().map(([name]) => name);
    for (const [v, variant] of names.entries()) {
      const median = Number(execFileSync(process.execPath, [fileURLToPath(import.meta.url), String(i), String(v)], { encoding: 'utf8' }));
      console.log(`${g.name.padEnd(62)} ${variant.padEnd(38)} ${median.toFixed(2).padStart(7)} µs`);
    }
  }
  console.log(`(${groups.length} comparisons, ${((Date.now() - started) / 1000).toFixed(0)} s)`);
}
