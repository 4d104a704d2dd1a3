import { Metadata, Server, ServerCredentials } from '@grpc/grpc-js';
import type { Entry, Message } from '@quorumq/raft';
import { pino } from 'pino';
import { Writable } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';

import type { GroupMessage } from '../src/raft-codec.js';
import type { PeerCertificate } from 'node:tls';

import { ClusterDirectory } from '../src/cluster-directory.js';
import { PeerAuthenticator, type PeerCall } from '../src/peer-auth.js';
import { PeerTransport, raftStreamHandler, serveRaftStreams, type RaftRefusal } from '../src/transport.js';
import { DEFERRED_APPEND_ENTRIES_MAX, DEFERRED_APPEND_MS, HEDGE_AFTER_MS } from '../src/append-fanout.js';

const closers: Array<() => void> = [];
afterEach(() => {
  for (const close of closers.splice(0)) close();
});

const SECRET = 'a-cluster-secret-for-tests';
const PEERS = new Map([
  ['n1', '127.0.0.1:1'],
  ['n2', '127.0.0.1:2'],
  ['n3', '127.0.0.1:3'],
]);

/** A node's Raft stream endpoint on a free loopback port. */
async function endpoint(
  selfId: string,
  received: GroupMessage[],
  refused: Array<[string, string]>,
  refusals: Array<[RaftRefusal, string | null, string]> = [],
  peers: ConstructorParameters<typeof PeerAuthenticator>[1] = PEERS,
): Promise<string> {
  // The node's own limit (server.ts).
  const server = new Server({ 'grpc.max_receive_message_length': 64 * 1024 * 1024 });
  serveRaftStreams(
    server,
    raftStreamHandler({
      selfId,
      authenticator: new PeerAuthenticator(selfId, peers, SECRET),
      onMessage: (m) => received.push(m),
      onWrongNode: (to, from) => refused.push([to, from]),
      onRefused: (reason, peer, from) => refusals.push([reason, peer, from]),
    }),
  );
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', ServerCredentials.createInsecure(), (error, bound) => (error ? reject(error) : resolve(bound))),
  );
  closers.push(() => server.forceShutdown());
  return `127.0.0.1:${port}`;
}

function capturingLogger(lines: string[]) {
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      lines.push(chunk.toString());
      done();
    },
  });
  return pino({ level: 'info' }, sink);
}

const heartbeat = (to: string): Message => ({ type: 'heartbeat', from: 'n2', to, term: 3, commit: 7, readSeq: 0, quiesce: false });

async function until(condition: () => boolean, ms = 5000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!condition() && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
}

describe('peer streams', () => {
  it('deliver messages addressed to the node', async () => {
    const received: GroupMessage[] = [];
    const address = await endpoint('n1', received, []);
    const transport = new PeerTransport('n2', new Map([['n1', address]]), SECRET, capturingLogger([]));
    closers.push(() => transport.close());
    transport.send('meta', [heartbeat('n1')]);
    await until(() => received.length > 0);
    expect(received).toEqual([{ groupId: 'meta', message: heartbeat('n1') }]);
  });

  it("deliver a turn's messages larger in all than gRPC's 64 MiB message limit, in order (a leader catching a follower up)", async () => {
    const received: GroupMessage[] = [];
    const address = await endpoint('n1', received, []);
    const transport = new PeerTransport('n2', new Map([['n1', address]]), SECRET, capturingLogger([]));
    closers.push(() => transport.close());
    transport.send('meta', [heartbeat('n1')]);
    await until(() => received.length > 0);
    // 24 appends of 4 MiB (the core's appendBytesMax): 96 MiB in one turn.
    const appends: Message[] = Array.from({ length: 24 }, (_, i) => ({
      type: 'append',
      from: 'n2',
      to: 'n1',
      term: 3,
      prevLogIndex: i,
      prevLogTerm: 3,
      commit: 0,
      entries: [{ index: i + 1, term: 3, type: 'normal', data: new Uint8Array(4 * 1024 * 1024).fill(i) }],
    }));
    transport.send('q/1/big', appends);
    await until(() => received.length >= 25, 20_000);
    expect(received.length).toBe(25);
    expect(received.slice(1).map((r) => (r.message.type === 'append' ? r.message.prevLogIndex : -1))).toEqual(appends.map((_, i) => i));
    expect(transport.isConnected('n1')).toBe(true);
  });

  it('keepAlive reopens a peer stream with nothing to send, so the peer reads as reachable', async () => {
    const address = await endpoint('n1', [], []);
    const transport = new PeerTransport('n2', new Map([['n1', address]]), SECRET, capturingLogger([]));
    closers.push(() => transport.close());
    expect(transport.isConnected('n1')).toBe(false);
    transport.keepAlive();
    await until(() => transport.isConnected('n1'));
    expect(transport.isConnected('n1')).toBe(true);
  });

  it('a node refuses messages for another node (a stale address) and the sender resolves the name again', async () => {
    // n2 believes n3 lives at n1's address: what a container restart with a reused IP does.
    const received: GroupMessage[] = [];
    const refused: Array<[string, string]> = [];
    const address = await endpoint('n1', received, refused);
    const lines: string[] = [];
    const transport = new PeerTransport('n2', new Map([['n3', address]]), SECRET, capturingLogger(lines));
    closers.push(() => transport.close());
    for (let i = 0; i < 20 && refused.length === 0; i++) {
      transport.send('meta', [heartbeat('n3')]);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    expect(refused[0]).toEqual(['n3', 'n2']);
    expect(received).toEqual([]);
    await until(() => lines.some((line) => line.includes('peer address reached another node')));
    expect(lines.find((line) => line.includes('peer address reached another node'))).toMatch(/WRONG_NODE: this is node n1, not n3/);
  });

  it('a stream without the cluster secret is refused UNAUTHENTICATED and steps nothing', async () => {
    const received: GroupMessage[] = [];
    const refusals: Array<[RaftRefusal, string | null, string]> = [];
    const address = await endpoint('n1', received, [], refusals);
    const lines: string[] = [];
    // n2 with the wrong secret: a node of another cluster, or a client guessing.
    const transport = new PeerTransport('n2', new Map([['n1', address]]), 'not-the-cluster-secret', capturingLogger(lines));
    closers.push(() => transport.close());
    const forged: Message = { type: 'heartbeat', from: 'n2', to: 'n1', term: 1e12, commit: 0, readSeq: 0, quiesce: false };
    for (let i = 0; i < 10 && refusals.length === 0; i++) {
      transport.send('meta', [forged]);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    await until(() => lines.some((line) => line.includes('refused this node')));
    expect(received).toEqual([]);
    expect(refusals[0]).toEqual(['unauthenticated', null, 'n2']);
    expect(transport.isConnected('n1')).toBe(false);
    expect(lines.filter((line) => line.includes('refused this node')).length).toBe(1);
  });

  it('a node the registry names as removed is told so on its stream, not refused as unauthenticated; a node without the secret is not', async () => {
    // n1's registry names n2 as removed (n2 left the metadata group before the entry that says so).
    const received: GroupMessage[] = [];
    const address = await endpoint('n1', received, [], [], { has: (id) => id === 'n3', isRemoved: (id) => id === 'n2' });
    const told: string[] = [];
    const lines: string[] = [];
    const removed = new PeerTransport('n2', new Map([['n1', address]]), SECRET, capturingLogger(lines), () => {}, { onToldRemoved: (peer) => told.push(peer) });
    closers.push(() => removed.close());
    const toN1: Message = { ...heartbeat('n1'), from: 'n2' };
    for (let i = 0; i < 20 && told.length === 0; i++) {
      removed.send('meta', [toN1]);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    expect(told[0]).toBe('n1');
    expect(received).toEqual([]);
    await until(() => lines.some((line) => line.includes('says this node was removed')));
    expect(lines.find((line) => line.includes('says this node was removed'))).toMatch(/NODE_REMOVED: node n2 was removed from the cluster/);
    // The same id with another secret learns nothing.
    const told2: string[] = [];
    const forger = new PeerTransport('n2', new Map([['n1', address]]), 'not-the-cluster-secret', capturingLogger([]), () => {}, { onToldRemoved: (peer) => told2.push(peer) });
    closers.push(() => forger.close());
    for (let i = 0; i < 10; i++) {
      forger.send('meta', [toN1]);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    expect(told2).toEqual([]);
  });

  it('a peer removed while its stream is open is told so at its next batch', async () => {
    const received: GroupMessage[] = [];
    const removedIds = new Set<string>();
    const address = await endpoint('n1', received, [], [], { has: (id) => id !== 'n1' && !removedIds.has(id), isRemoved: (id) => removedIds.has(id) });
    const told: string[] = [];
    const transport = new PeerTransport('n2', new Map([['n1', address]]), SECRET, capturingLogger([]), () => {}, { onToldRemoved: (peer) => told.push(peer) });
    closers.push(() => transport.close());
    const toN1: Message = { ...heartbeat('n1'), from: 'n2' };
    transport.send('meta', [toN1]);
    await until(() => received.length === 1);
    expect(transport.isConnected('n1')).toBe(true);
    // The registry on n1 now names n2 as removed; n2's open stream carries on until its next batch.
    removedIds.add('n2');
    transport.send('meta', [toN1]);
    await until(() => told.length > 0);
    expect(told).toEqual(['n1']);
    expect(received.length).toBe(1);
  });

  it('an authenticated peer cannot send messages in another node\'s name', async () => {
    const received: GroupMessage[] = [];
    const refusals: Array<[RaftRefusal, string | null, string]> = [];
    const address = await endpoint('n1', received, [], refusals);
    const transport = new PeerTransport('n2', new Map([['n1', address]]), SECRET, capturingLogger([]));
    closers.push(() => transport.close());
    const spoofed: Message = { type: 'heartbeat', from: 'n3', to: 'n1', term: 1e12, commit: 0, readSeq: 0, quiesce: false };
    transport.send('meta', [spoofed, heartbeat('n1')]);
    await until(() => received.length > 0);
    expect(received).toEqual([{ groupId: 'meta', message: heartbeat('n1') }]);
    expect(refusals).toEqual([['sender_mismatch', 'n2', 'n3']]);
  });
});

/** A verified peer certificate as grpc-js hands it over (only the parts the checks read). */
const certificate = (cn: string | null, dnsNames: string[] = []): PeerCertificate =>
  ({ raw: Buffer.from('der'), subject: cn === null ? {} : { CN: cn }, subjectaltname: dnsNames.map((n) => `DNS:${n}`).concat('IP Address:127.0.0.1').join(', ') }) as unknown as PeerCertificate;

describe('appends a commit does not wait for (append-fanout.ts)', () => {
  const append = (to: string): Message => ({ type: 'append', from: 'n2', to, term: 3, prevLogIndex: 1, prevLogTerm: 3, entries: [], commit: 1 });

  /** Two followers' endpoints recording when each message arrived; the transport of leader n2. */
  async function leaderWithTwoFollowers(deferredAppendMs?: number, hedgeAfterMs?: number) {
    const arrivals = new Map<string, Array<{ message: GroupMessage; at: number }>>([
      ['n1', []],
      ['n3', []],
    ]);
    const received = (id: string): GroupMessage[] => {
      const list: GroupMessage[] = [];
      list.push = (...items: GroupMessage[]): number => {
        for (const message of items) arrivals.get(id)!.push({ message, at: performance.now() });
        return Array.prototype.push.apply(list, items);
      };
      return list;
    };
    const peers = new Map([
      ['n1', await endpoint('n1', received('n1'), [])],
      ['n3', await endpoint('n3', received('n3'), [])],
    ]);
    const transport = new PeerTransport('n2', peers, SECRET, capturingLogger([]), undefined, {
      ...(deferredAppendMs === undefined ? {} : { deferredAppendMs }),
      ...(hedgeAfterMs === undefined ? {} : { hedgeAfterMs }),
    });
    closers.push(() => transport.close());
    // Open both streams (a heartbeat each) and hear from both: both are healthy.
    transport.send('q/1', [heartbeat('n1'), heartbeat('n3')]);
    await until(() => arrivals.get('n1')!.length === 1 && arrivals.get('n3')!.length === 1 && transport.isConnected('n1') && transport.isConnected('n3'));
    return { transport, arrivals };
  }

  it('go to one of two followers at once and to the other a moment later; a follower not heard from is the one that waits', async () => {
    const { transport, arrivals } = await leaderWithTwoFollowers();
    transport.heardFrom('n1');
    transport.heardFrom('n3');
    let sentAt = performance.now();
    transport.send('q/1', [append('n1'), append('n3')]);
    await until(() => arrivals.get('n1')!.length === 2 && arrivals.get('n3')!.length === 2);
    expect(arrivals.get('n1')![1]!.message).toEqual({ groupId: 'q/1', message: append('n1') });
    expect(arrivals.get('n3')![1]!.message).toEqual({ groupId: 'q/1', message: append('n3') });
    // n3 (the later id) waited: n1 did not answer (this test never hears from it), so for HEDGE_AFTER_MS.
    expect(arrivals.get('n3')![1]!.at - sentAt).toBeGreaterThanOrEqual(HEDGE_AFTER_MS - 1);

    // Only n3 is heard from lately: n1 waits.
    await new Promise((resolve) => setTimeout(resolve, 300));
    transport.heardFrom('n3');
    sentAt = performance.now();
    transport.send('q/1', [append('n1'), append('n3')]);
    await until(() => arrivals.get('n1')!.length === 3 && arrivals.get('n3')!.length === 3);
    expect(arrivals.get('n1')![2]!.at - sentAt).toBeGreaterThanOrEqual(HEDGE_AFTER_MS - 1);
    expect(arrivals.get('n1')![2]!.at).toBeGreaterThan(arrivals.get('n3')![2]!.at);
  });

  it('a deferred append leaves with the next message to its follower, before it (a peer\'s messages stay in order)', async () => {
    const { transport, arrivals } = await leaderWithTwoFollowers();
    transport.heardFrom('n1');
    transport.heardFrom('n3');
    transport.send('q/1', [append('n1'), append('n3')]);
    // The turn's flush (a microtask) holds n3's append; a message for n3 in a later flush takes it along.
    await new Promise<void>((resolve) => queueMicrotask(resolve));
    await new Promise<void>((resolve) => queueMicrotask(resolve));
    transport.send('meta', [heartbeat('n3')]);
    await until(() => arrivals.get('n3')!.length === 3);
    expect(arrivals.get('n3')!.slice(1).map((a) => a.message)).toEqual([
      { groupId: 'q/1', message: append('n3') },
      { groupId: 'meta', message: heartbeat('n3') },
    ]);
  });

  it('held appends leave joined into one append once they carry enough entries, without waiting for the hold to end', async () => {
    // A hold no test waits out: only carrying enough makes the held appends leave.
    const { transport, arrivals } = await leaderWithTwoFollowers(3_600_000);
    transport.heardFrom('n1');
    transport.heardFrom('n3');
    const entry = (index: number): Entry => ({ index, term: 3, type: 'normal', data: new Uint8Array([index]) });
    const appendOf = (to: string, index: number): Message => ({ type: 'append', from: 'n2', to, term: 3, prevLogIndex: index - 1, prevLogTerm: 3, entries: [entry(index)], commit: index - 1 });
    // One entry per flush (a microtask each), as with one publish in flight; n1 answers each
    // (is heard from) in the same turn, so the hedge (HEDGE_AFTER_MS) never lets them go.
    for (let index = 1; index <= DEFERRED_APPEND_ENTRIES_MAX; index++) {
      transport.send('q/1', [appendOf('n1', index), appendOf('n3', index)]);
      await new Promise<void>((resolve) => queueMicrotask(resolve));
      await new Promise<void>((resolve) => queueMicrotask(resolve));
      transport.heardFrom('n1');
      await new Promise<void>((resolve) => setImmediate(resolve));
    }
    await until(() => arrivals.get('n1')!.length === 1 + DEFERRED_APPEND_ENTRIES_MAX && arrivals.get('n3')!.length === 2);
    const held = arrivals.get('n3')![1]!.message.message;
    expect(held.type).toBe('append');
    if (held.type !== 'append') return;
    expect({ prevLogIndex: held.prevLogIndex, commit: held.commit, indexes: held.entries.map((e) => e.index) }).toEqual({
      prevLogIndex: 0,
      commit: DEFERRED_APPEND_ENTRIES_MAX - 1,
      indexes: Array.from({ length: DEFERRED_APPEND_ENTRIES_MAX }, (_, i) => i + 1),
    });
    // The eager follower got each entry at once, one append each.
    expect(arrivals.get('n1')!.slice(1).map((a) => (a.message.message.type === 'append' ? a.message.message.entries.length : 0))).toEqual(
      Array.from({ length: DEFERRED_APPEND_ENTRIES_MAX }, () => 1),
    );
  });

  it('held appends leave DEFERRED_APPEND_MS after the first was held when nothing else lets them go', async () => {
    const { transport, arrivals } = await leaderWithTwoFollowers();
    transport.heardFrom('n1');
    transport.heardFrom('n3');
    const sentAt = performance.now();
    transport.send('q/1', [append('n1'), append('n3')]);
    await new Promise<void>((resolve) => queueMicrotask(resolve));
    await new Promise<void>((resolve) => queueMicrotask(resolve));
    transport.heardFrom('n1');
    await until(() => arrivals.get('n3')!.length === 2);
    expect(arrivals.get('n3')![1]!.at - sentAt).toBeGreaterThanOrEqual(DEFERRED_APPEND_MS - 1);
    expect(arrivals.get('n3')![1]!.message).toEqual({ groupId: 'q/1', message: append('n3') });
  });

  it('held appends leave HEDGE_AFTER_MS after an append sent at once went unanswered, and stay held while it is answered', async () => {
    const { transport, arrivals } = await leaderWithTwoFollowers(3_600_000);
    transport.heardFrom('n1');
    transport.heardFrom('n3');
    // n1 answers (is heard from) right after the flush: n3's append stays held.
    transport.send('q/1', [append('n1'), append('n3')]);
    await new Promise<void>((resolve) => queueMicrotask(resolve));
    await new Promise<void>((resolve) => queueMicrotask(resolve));
    transport.heardFrom('n1');
    await until(() => arrivals.get('n1')!.length === 2);
    await new Promise((resolve) => setTimeout(resolve, 10 * HEDGE_AFTER_MS));
    expect(arrivals.get('n3')).toHaveLength(1);

    // n1 does not answer the next one: both held appends leave for n3, joined, about HEDGE_AFTER_MS later.
    const next: Message = { type: 'append', from: 'n2', to: 'n3', term: 3, prevLogIndex: 1, prevLogTerm: 3, entries: [{ index: 2, term: 3, type: 'normal', data: Buffer.from([2]) }], commit: 2 };
    const sentAt = performance.now();
    transport.send('q/1', [{ ...next, to: 'n1' }, next]);
    await until(() => arrivals.get('n3')!.length === 2);
    expect(arrivals.get('n3')![1]!.at - sentAt).toBeGreaterThanOrEqual(HEDGE_AFTER_MS - 1);
    expect(arrivals.get('n3')![1]!.message).toEqual({ groupId: 'q/1', message: next });
  });

  it('go to both followers at once while the eager one has appends unanswered (a pipeline), taking the held ones along', async () => {
    // Neither the hold nor the hedge ends in this test: only the pipeline lets held appends go.
    const { transport, arrivals } = await leaderWithTwoFollowers(3_600_000, 3_600_000);
    transport.heardFrom('n1');
    transport.heardFrom('n3');
    const entry = (index: number): Entry => ({ index, term: 3, type: 'normal', data: new Uint8Array([index]) });
    const appendOf = (to: string, index: number): Message => ({ type: 'append', from: 'n2', to, term: 3, prevLogIndex: index - 1, prevLogTerm: 3, entries: [entry(index)], commit: index - 1 });
    // n1 answered everything before: n3's append is held.
    transport.send('q/1', [appendOf('n1', 1), appendOf('n3', 1)]);
    await until(() => arrivals.get('n1')!.length === 2);
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(arrivals.get('n3')).toHaveLength(1);
    // n1 has not answered it when the next entry comes: both go to n3 now, joined into one append.
    transport.send('q/1', [appendOf('n1', 2), appendOf('n3', 2)]);
    await until(() => arrivals.get('n3')!.length === 2, 2000);
    const joined = arrivals.get('n3')![1]!.message.message;
    expect(joined.type === 'append' ? joined.entries.map((e) => e.index) : null).toEqual([1, 2]);
  });

  it('an empty append waits with the held appends of its group, and one sent at once does not end the holding', async () => {
    // Neither the hold nor the hedge ends in this test.
    const { transport, arrivals } = await leaderWithTwoFollowers(3_600_000, 3_600_000);
    transport.heardFrom('n1');
    transport.heardFrom('n3');
    const entry = (index: number): Entry => ({ index, term: 3, type: 'normal', data: new Uint8Array([index]) });
    const appendOf = (to: string, index: number): Message => ({ type: 'append', from: 'n2', to, term: 3, prevLogIndex: index - 1, prevLogTerm: 3, entries: [entry(index)], commit: index - 1 });
    // What the leader's Raft sends a follower that is behind after its heartbeat answer.
    const empty = (to: string, prevLogIndex: number): Message => ({ type: 'append', from: 'n2', to, term: 3, prevLogIndex, prevLogTerm: 3, entries: [], commit: prevLogIndex });
    const turn = async (): Promise<void> => {
      await new Promise<void>((resolve) => queueMicrotask(resolve));
      await new Promise<void>((resolve) => queueMicrotask(resolve));
    };
    const oneEntry = async (index: number): Promise<void> => {
      transport.send('q/1', [appendOf('n1', index), appendOf('n3', index)]);
      await turn();
      transport.heardFrom('n1');
      await until(() => arrivals.get('n1')!.length === 1 + index);
    };
    await oneEntry(1);
    // n3 holds entry 1: the empty append for n3 alone waits with it, and entry 2 is held too.
    transport.send('q/1', [empty('n3', 1)]);
    await turn();
    await oneEntry(2);
    // Entry 3 is held from n3, and n1 has not answered it when the empty append comes: that
    // waits all the same (n1 being busy lets entries go at once, not an empty append).
    transport.send('q/1', [appendOf('n1', 3), appendOf('n3', 3)]);
    await turn();
    transport.send('q/1', [empty('n3', 3)]);
    await turn();
    await until(() => arrivals.get('n1')!.length === 4);
    transport.heardFrom('n1');
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(arrivals.get('n3')).toHaveLength(1);
    // Another message for n3 takes them along, joined into one append.
    transport.send('meta', [heartbeat('n3')]);
    await until(() => arrivals.get('n3')!.length === 3);
    const joined = arrivals.get('n3')![1]!.message.message;
    expect(joined.type === 'append' ? { entries: joined.entries.map((e) => e.index), commit: joined.commit } : null).toEqual({ entries: [1, 2, 3], commit: 3 });

    // n3 holds nothing now: an empty append goes at once, but it commits nothing, so the next entry is still held from n3.
    transport.send('q/1', [empty('n3', 3)]);
    await until(() => arrivals.get('n3')!.length === 4);
    await oneEntry(4);
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(arrivals.get('n3')).toHaveLength(4);
  });

  it('appends held after a hedge let the earlier ones go wait the whole hold again (the earlier hold leaves no timer behind)', async () => {
    const hold = 400;
    const { transport, arrivals } = await leaderWithTwoFollowers(hold);
    transport.heardFrom('n1');
    transport.heardFrom('n3');
    // An append with an entry (only entries are waited for, so only they make a hedge).
    const withEntry = (to: string, index: number): Message => ({ type: 'append', from: 'n2', to, term: 3, prevLogIndex: index - 1, prevLogTerm: 3, entries: [{ index, term: 3, type: 'normal', data: Buffer.from([index]) }], commit: index - 1 });
    // n1 does not answer: the hedge lets n3's held append go after HEDGE_AFTER_MS, long before the hold ends.
    const first = performance.now();
    transport.send('q/1', [withEntry('n1', 1), withEntry('n3', 1)]);
    await until(() => arrivals.get('n3')!.length === 2, hold / 2);
    expect(arrivals.get('n3')).toHaveLength(2);
    transport.heardFrom('n1');

    // A quarter of the hold later, the next append to n3 is held, and n1 answers at once (no
    // hedge): nothing lets it go before the hold ends, so it waits the whole hold from now,
    // not only what was left of the first one's.
    await new Promise((resolve) => setTimeout(resolve, Math.max(0, first + hold / 4 - performance.now())));
    const next = withEntry('n3', 2);
    const sentAt = performance.now();
    transport.send('q/1', [{ ...next, to: 'n1' }, next]);
    await new Promise<void>((resolve) => queueMicrotask(resolve));
    await new Promise<void>((resolve) => queueMicrotask(resolve));
    transport.heardFrom('n1');
    await until(() => arrivals.get('n3')!.length === 3, 4 * hold);
    expect(arrivals.get('n3')![2]!.message).toEqual({ groupId: 'q/1', message: next });
    expect(arrivals.get('n3')![2]!.at - sentAt).toBeGreaterThanOrEqual(hold - 1);
  });
});

describe('peer authentication', () => {
  const metadata = (entries: Record<string, string | string[]>, cert?: PeerCertificate): PeerCall => {
    const m = new Metadata();
    for (const [key, value] of Object.entries(entries)) for (const v of [value].flat()) m.add(key, v);
    return { metadata: m, getAuthContext: () => (cert === undefined ? {} : { transportSecurityType: 'ssl', sslPeerCertificate: cert }) };
  };
  const auth = new PeerAuthenticator('n1', PEERS, SECRET);

  it('accepts a configured peer with the secret, and nothing else', () => {
    expect(auth.authenticate(metadata({ 'quorumq-node-id': 'n2', 'quorumq-cluster-secret': SECRET }))).toBe('n2');
    expect(auth.authenticate(metadata({ 'quorumq-node-id': 'n3', 'quorumq-cluster-secret': SECRET }))).toBe('n3');
    expect(auth.authenticate(metadata({}))).toBeNull();
    expect(auth.authenticate(metadata({ 'quorumq-node-id': 'n2' }))).toBeNull();
    expect(auth.authenticate(metadata({ 'quorumq-node-id': 'n2', 'quorumq-cluster-secret': `${SECRET}x` }))).toBeNull();
    expect(auth.authenticate(metadata({ 'quorumq-node-id': 'n2', 'quorumq-cluster-secret': SECRET.slice(1) }))).toBeNull();
    expect(auth.authenticate(metadata({ 'quorumq-node-id': 'n2', 'quorumq-cluster-secret': [SECRET, SECRET] }))).toBeNull();
    // The secret is not enough: the caller must be one of the configured peers, not this node.
    expect(auth.authenticate(metadata({ 'quorumq-node-id': 'n9', 'quorumq-cluster-secret': SECRET }))).toBeNull();
    expect(auth.authenticate(metadata({ 'quorumq-node-id': 'n1', 'quorumq-cluster-secret': SECRET }))).toBeNull();
    expect(auth.authenticate(metadata({ 'quorumq-cluster-secret': SECRET }))).toBeNull();
  });

  it('with mutual TLS: the verified certificate must name the node the call claims to be, a peer other than this node', () => {
    const tls = new PeerAuthenticator('n1', PEERS, null, true);
    expect(tls.authenticate(metadata({ 'quorumq-node-id': 'n2' }, certificate('n2', ['n2', 'localhost'])))).toBe('n2');
    // A DNS name is enough; so is the CN alone.
    expect(tls.authenticate(metadata({ 'quorumq-node-id': 'n3' }, certificate('node three', ['n3'])))).toBe('n3');
    expect(tls.authenticate(metadata({ 'quorumq-node-id': 'n3' }, certificate('n3')))).toBe('n3');
    // No certificate (or one the handshake did not verify: grpc-js then gives none).
    expect(tls.authenticate(metadata({ 'quorumq-node-id': 'n2' }))).toBeNull();
    // A certificate for another node, or for a name that is no node, or one this node has.
    expect(tls.authenticate(metadata({ 'quorumq-node-id': 'n2' }, certificate('n3', ['n3'])))).toBeNull();
    expect(tls.authenticate(metadata({ 'quorumq-node-id': 'client' }, certificate('client')))).toBeNull();
    expect(tls.authenticate(metadata({ 'quorumq-node-id': 'n1' }, certificate('n1', ['n1'])))).toBeNull();
    expect(tls.authenticate(metadata({}, certificate('n2', ['n2'])))).toBeNull();
    // With a secret as well, both are checked.
    const both = new PeerAuthenticator('n1', PEERS, SECRET, true);
    expect(both.authenticate(metadata({ 'quorumq-node-id': 'n2', 'quorumq-cluster-secret': SECRET }, certificate('n2')))).toBe('n2');
    expect(both.authenticate(metadata({ 'quorumq-node-id': 'n2' }, certificate('n2')))).toBeNull();
    expect(both.authenticate(metadata({ 'quorumq-node-id': 'n2', 'quorumq-cluster-secret': SECRET }))).toBeNull();
  });

  it('a node the directory does not name is admitted by the peer address it tells, when the directory introduces it', () => {
    const directory = new ClusterDirectory('n1', PEERS);
    const introducing = new PeerAuthenticator('n1', directory, SECRET);
    const tlsIntroducing = new PeerAuthenticator('n1', new ClusterDirectory('n1', PEERS), null, true);
    const n4 = { 'quorumq-node-id': 'n4', 'quorumq-cluster-secret': SECRET };
    // No address, a malformed one, two of them, or the wrong secret: refused, and nobody is introduced.
    expect(introducing.authenticate(metadata(n4))).toBeNull();
    expect(introducing.authenticate(metadata({ ...n4, 'quorumq-peer-address': 'no-port' }))).toBeNull();
    expect(introducing.authenticate(metadata({ ...n4, 'quorumq-peer-address': ['h4:1', 'h5:1'] }))).toBeNull();
    expect(introducing.authenticate(metadata({ ...n4, 'quorumq-cluster-secret': `${SECRET}x`, 'quorumq-peer-address': 'h4:7001' }))).toBeNull();
    expect(introducing.authenticate(metadata({ 'quorumq-node-id': 'bad id', 'quorumq-cluster-secret': SECRET, 'quorumq-peer-address': 'h4:7001' }))).toBeNull();
    expect(directory.has('n4')).toBe(false);
    // With its address: admitted, and reachable there.
    expect(introducing.authenticate(metadata({ ...n4, 'quorumq-peer-address': 'h4:7001' }))).toBe('n4');
    expect(directory.peerAddress('n4')).toBe('h4:7001');
    expect(directory.activeIds()).toEqual(['n1', 'n2', 'n3']);
    // Mutual TLS: the certificate is checked first; a certificate for another name introduces nobody.
    expect(tlsIntroducing.authenticate(metadata({ 'quorumq-node-id': 'n5', 'quorumq-peer-address': 'h5:7001' }, certificate('n6', ['n6'])))).toBeNull();
    expect(tlsIntroducing.authenticate(metadata({ 'quorumq-node-id': 'n5', 'quorumq-peer-address': 'h5:7001' }, certificate('n5', ['n5'])))).toBe('n5');
    // A plain set of peers introduces nobody.
    expect(auth.authenticate(metadata({ ...n4, 'quorumq-peer-address': 'h4:7001' }))).toBeNull();
  });

  it('a refused call is UNAUTHENTICATED, but NODE_REMOVED for a node with the credentials that the registry names as removed', () => {
    const withRemoved = new PeerAuthenticator('n1', { has: (id) => id === 'n2', isRemoved: (id) => id === 'n3' }, SECRET);
    const n3 = metadata({ 'quorumq-node-id': 'n3', 'quorumq-cluster-secret': SECRET });
    expect(withRemoved.authenticate(n3)).toBeNull();
    expect(withRemoved.refusal(n3)).toEqual({ code: 9, details: 'NODE_REMOVED: node n3 was removed from the cluster; it takes no part any more and its id cannot be used again' });
    // Without the secret, or for an id the registry does not name as removed: nothing is told.
    for (const call of [
      metadata({ 'quorumq-node-id': 'n3', 'quorumq-cluster-secret': `${SECRET}x` }),
      metadata({ 'quorumq-node-id': 'n3' }),
      metadata({ 'quorumq-node-id': 'n9', 'quorumq-cluster-secret': SECRET }),
      metadata({ 'quorumq-node-id': 'n1', 'quorumq-cluster-secret': SECRET }),
    ]) {
      expect(withRemoved.authenticate(call)).toBeNull();
      expect(withRemoved.refusal(call).code).toBe(16);
    }
    // With mutual TLS the certificate must name it too.
    const tls = new PeerAuthenticator('n1', { has: () => false, isRemoved: (id) => id === 'n3' }, null, true);
    expect(tls.refusal(metadata({ 'quorumq-node-id': 'n3' }, certificate('n3'))).code).toBe(9);
    expect(tls.refusal(metadata({ 'quorumq-node-id': 'n3' }, certificate('n2'))).code).toBe(16);
    expect(tls.refusal(metadata({ 'quorumq-node-id': 'n3' })).code).toBe(16);
  });

  it('a node without a secret (a single node) refuses every peer call', () => {
    const single = new PeerAuthenticator('n1', new Map([['n1', '127.0.0.1:1']]), null);
    expect(single.authenticate(metadata({ 'quorumq-node-id': 'n2', 'quorumq-cluster-secret': '' }))).toBeNull();
    expect(single.authenticate(metadata({ 'quorumq-node-id': 'n1', 'quorumq-cluster-secret': SECRET }))).toBeNull();
  });
});
