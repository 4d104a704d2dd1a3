import * as grpc from '@grpc/grpc-js';
import { quorumq } from '@quorumq/proto';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { connect, QuorumqError, type PublishResult, type QuorumqClient } from '../src/index.js';
import { wireNumber } from '../src/longs.js';
import { BATCH_BYTES_MAX, BATCH_PUBLISHES_MAX, DEDUP_WINDOW } from '../src/publisher.js';
import { FakeBroker, FakeState, waitFor } from './fake-broker.js';

const cleanup: Array<() => Promise<void> | void> = [];
/** The stream kind the clients of the running block use: the SDK's own HTTP/2 (the default) or grpc-js's. */
let nativeStreams = true;
afterEach(async () => {
  for (const fn of cleanup.splice(0).reverse()) await fn();
});

async function cluster(n: number): Promise<{ brokers: FakeBroker[]; client: QuorumqClient }> {
  const state = new FakeState();
  state.declareQueue('jobs');
  const brokers: FakeBroker[] = [];
  for (let i = 0; i < n; i++) brokers.push(await FakeBroker.start(state));
  const client = connect({ nodes: brokers.map((b) => b.address), failoverTimeoutMs: 2_000, initialBackoffMs: 10, maxBackoffMs: 50, nativeStreams });
  cleanup.push(() => {
    for (const b of brokers) b.kill();
  });
  cleanup.push(() => client.close());
  return { brokers, client };
}

describe.each([true, false])('Publisher (streams on the SDK own HTTP/2: %s)', (native) => {
  beforeEach(() => {
    nativeStreams = native;
  });

  it('matches outcomes by publish id over one stream', async () => {
    const { brokers, client } = await cluster(1);
    const publisher = client.createPublisher();
    const results = await Promise.all([
      publisher.publish('jobs', 'a'),
      publisher.publish('nowhere', 'b', { mandatory: true }),
      publisher.publish('jobs', new Uint8Array([99]), { headers: { h: true } }),
    ]);
    expect(results.map((r) => r.outcome)).toEqual(['confirmed', 'unroutable', 'confirmed']);
    expect(results[1]?.returned?.body.toString()).toBe('b');
    expect(brokers[0]?.calls.filter((c) => c === 'publishStream')).toHaveLength(1);
    expect(brokers[0]?.publishRequests.map((r) => wireNumber(r.publishId))).toEqual([1, 2, 3]);
    expect(brokers[0]?.state.queues.get('jobs')?.ready.map((m) => Buffer.from(m.message.body ?? []).toString())).toEqual(['a', 'c']);
    await publisher.close();
    await expect(publisher.publish('jobs', 'late')).rejects.toMatchObject({ code: 'CANCELLED', retriable: false });
  });

  it('splits what one turn published into batches the broker accepts (count and bytes)', async () => {
    const { brokers, client } = await cluster(1);
    const publisher = client.createPublisher({ maxInFlight: 5_000 });
    const small = await Promise.all(Array.from({ length: 2_500 }, (_, i) => publisher.publish('jobs', `m${i}`)));
    expect(small.every((r) => r.outcome === 'confirmed')).toBe(true);
    expect(brokers[0]?.publishBatchSizes).toEqual([BATCH_PUBLISHES_MAX, BATCH_PUBLISHES_MAX, 500]);
    const large = Buffer.alloc(BATCH_BYTES_MAX / 2 + 1);
    await Promise.all([publisher.publish('jobs', large), publisher.publish('jobs', large), publisher.publish('jobs', 'x')]);
    expect(brokers[0]?.publishBatchSizes.slice(3)).toEqual([1, 2]);
    await publisher.close();
    // In publish order.
    expect(brokers[0]?.publishRequests.slice(0, 2_500).map((r) => Buffer.from(r.message?.body ?? []).toString())).toEqual(Array.from({ length: 2_500 }, (_, i) => `m${i}`));
  });

  it('never has more than maxInFlight publishes outstanding at the broker', async () => {
    const { brokers, client } = await cluster(1);
    const broker = brokers[0];
    if (broker === undefined) throw new Error('no broker');
    broker.publishMode = 'hold';
    const publisher = client.createPublisher({ maxInFlight: 4 });
    const settled: number[] = [];
    const promises = Array.from({ length: 10 }, (_, i) => publisher.publish('jobs', `m${i}`).then((r) => {
      settled.push(i);
      return r;
    }));
    await waitFor(() => broker.publishRequests.length === 4, 2_000, '4 publishes');
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(broker.publishRequests).toHaveLength(4); // the 5th waits for room
    expect(publisher.inFlight).toBe(4);
    // Release batch after batch until all are through.
    while (settled.length < 10) {
      broker.releaseHeld();
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    await Promise.all(promises);
    expect(broker.maxOutstanding).toBe(4);
    expect(settled).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    // In publish order.
    expect(broker.publishRequests.map((r) => Buffer.from(r.message?.body ?? []).toString())).toEqual(Array.from({ length: 10 }, (_, i) => `m${i}`));
    await publisher.flush();
    expect(publisher.inFlight).toBe(0);
  });

  it('with a producerId, keeps every sequence in flight within maxInFlight of the oldest unconfirmed one', async () => {
    // The broker tells a producer's sequences apart only within a window below the highest it
    // stored. A message held up (on a node that lost its leadership) while later ones are
    // confirmed must not fall below that window: counting only the messages outstanding let
    // the newest sequence run arbitrarily far ahead of it.
    const { brokers, client } = await cluster(1);
    const broker = brokers[0];
    if (broker === undefined) throw new Error('no broker');
    broker.publishMode = 'hold';
    const publisher = client.createPublisher({ producerId: 'span', firstSequence: 1, maxInFlight: 4 });
    const results = Array.from({ length: 12 }, (_, i) => publisher.publish('jobs', `m${i}`));
    await waitFor(() => broker.publishRequests.length === 4, 2_000, '4 publishes');
    // Everything but the oldest is confirmed, again and again.
    for (let round = 0; round < 5; round++) {
      broker.releaseHeldExceptOldest(1);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    const sequences = broker.publishRequests.map((r) => wireNumber(r.sequence));
    expect(Math.max(...sequences)).toBeLessThan(1 + 4);
    expect(publisher.inFlight).toBe(1);
    while (broker.publishRequests.length < 12 || publisher.inFlight > 0) {
      broker.releaseHeld();
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    expect((await Promise.all(results)).map((r) => r.outcome)).toEqual(Array.from({ length: 12 }, () => 'confirmed'));
    expect(broker.publishRequests.map((r) => wireNumber(r.sequence))).toEqual(Array.from({ length: 12 }, (_, i) => i + 1));
  });

  it('with a producerId, re-sends unconfirmed messages with their original sequences on another node', async () => {
    const { brokers, client } = await cluster(2);
    const [a, b] = brokers;
    if (a === undefined || b === undefined) throw new Error('no brokers');
    // Node A commits the first two but its confirms are lost; it holds the other three.
    a.publishMode = 'commit-and-hold';
    const publisher = client.createPublisher({ producerId: 'orders-svc', firstSequence: 100, maxInFlight: 16 });
    const first = [publisher.publish('jobs', '0'), publisher.publish('jobs', '1')];
    await waitFor(() => a.publishRequests.length === 2, 2_000, 'two publishes at A');
    a.publishMode = 'hold';
    const rest = [2, 3, 4].map((i) => publisher.publish('jobs', String(i)));
    await waitFor(() => a.publishRequests.length === 5, 2_000, 'five publishes at A');
    expect(a.publishRequests.map((r) => wireNumber(r.sequence))).toEqual([100, 101, 102, 103, 104]);
    a.kill();
    const results: PublishResult[] = await Promise.all([...first, ...rest]);
    // A DUPLICATE for a re-sent message counts as confirmed.
    expect(results.map((r) => r.outcome)).toEqual(['confirmed', 'confirmed', 'confirmed', 'confirmed', 'confirmed']);
    expect(b.publishRequests.map((r) => wireNumber(r.sequence))).toEqual([100, 101, 102, 103, 104]);
    expect(b.publishRequests.every((r) => r.producerId === 'orders-svc')).toBe(true);
    // Exactly once in the queue.
    expect(b.state.queues.get('jobs')?.ready.map((m) => Buffer.from(m.message.body ?? []).toString())).toEqual(['0', '1', '2', '3', '4']);
    expect(publisher.node).toBe(b.address);
    // The next sequence keeps increasing.
    await publisher.publish('jobs', '5');
    expect(wireNumber(b.publishRequests.at(-1)?.sequence)).toBe(105);
  });

  it('without a producerId, rejects in-flight publishes with a retriable error when the stream breaks, then recovers', async () => {
    const { brokers, client } = await cluster(2);
    const [a, b] = brokers;
    if (a === undefined || b === undefined) throw new Error('no brokers');
    a.publishMode = 'hold';
    const publisher = client.createPublisher();
    const pending = [publisher.publish('jobs', 'x'), publisher.publish('jobs', 'y')];
    await waitFor(() => a.publishRequests.length === 2, 2_000, 'two publishes at A');
    a.kill();
    for (const p of pending) {
      const error = await p.catch((e: unknown) => e);
      expect(error).toBeInstanceOf(QuorumqError);
      expect(error).toMatchObject({ code: 'UNAVAILABLE', retriable: true });
    }
    expect(b.publishRequests).toHaveLength(0); // nothing re-sent without dedup
    expect((await publisher.publish('jobs', 'z')).outcome).toBe('confirmed');
    expect(b.publishRequests).toHaveLength(1);
    await publisher.close();
  });

  it('with a producerId, re-sends a message the broker answered UNAVAILABLE after committing it, and it is stored once', async () => {
    const { brokers, client } = await cluster(1);
    const [a] = brokers;
    if (a === undefined) throw new Error('no broker');
    // The first is committed but its leader moved before the confirm.
    a.commitThenUnknown = 1;
    const publisher = client.createPublisher({ producerId: 'billing', firstSequence: 7 });
    const results = await Promise.all([publisher.publish('jobs', 'a'), publisher.publish('jobs', 'b')]);
    expect(results.map((r) => r.outcome)).toEqual(['confirmed', 'confirmed']);
    // Both re-sent on a new stream, in order; the queue holds each once.
    expect(a.publishRequests.map((r) => wireNumber(r.sequence))).toEqual([7, 8, 7, 8]);
    expect(a.state.queues.get('jobs')?.ready.map((m) => Buffer.from(m.message.body ?? []).toString())).toEqual(['a', 'b']);
    await publisher.close();
  });

  it('with a producerId, re-sends a message the broker answered UNAVAILABLE without storing it before any later one', async () => {
    const { brokers, client } = await cluster(1);
    const [a] = brokers;
    if (a === undefined) throw new Error('no broker');
    // The broker tells sequences apart only within a window behind the highest it stored: the
    // failed message must go again before later ones are stored past it.
    a.forcedOutcomes.push({ outcome: quorumq.v1.PublishOutcome.PUBLISH_OUTCOME_FAILED, statusCode: grpc.status.UNAVAILABLE, errorReason: 'NO_LEADER' });
    const publisher = client.createPublisher({ producerId: 'orders', firstSequence: 1, maxInFlight: 64 });
    const bodies = Array.from({ length: 40 }, (_, i) => `m${i}`);
    const results = await Promise.all(bodies.map((body) => publisher.publish('jobs', body)));
    expect(results.every((r) => r.outcome === 'confirmed')).toBe(true);
    const sequences = a.publishRequests.map((r) => wireNumber(r.sequence));
    // After the failure, the next message the broker sees is the failed one, then the rest in order.
    const again = sequences.indexOf(1, 1);
    expect(again).toBeGreaterThan(0);
    const after = sequences.slice(again);
    expect(after).toEqual([...after].sort((x, y) => x - y));
    // Each once (the later ones of the first batch were stored before the first went again).
    expect(a.state.queues.get('jobs')?.ready.map((m) => Buffer.from(m.message.body ?? []).toString()).sort()).toEqual([...bodies].sort());
    await publisher.close();
  });

  it('without a producerId, rejects a publish the broker answered UNAVAILABLE, with the retriable error', async () => {
    const { brokers, client } = await cluster(1);
    const [a] = brokers;
    if (a === undefined) throw new Error('no broker');
    a.commitThenUnknown = 1;
    const publisher = client.createPublisher();
    const error = await publisher.publish('jobs', 'a').catch((e: unknown) => e);
    expect(error).toMatchObject({ code: 'UNAVAILABLE', reason: 'OUTCOME_UNKNOWN', retriable: true });
    expect(a.publishRequests).toHaveLength(1);
    await publisher.close();
  });

  it('with a producerId, stops re-sending a message the broker keeps answering UNAVAILABLE after the failover timeout', async () => {
    const { brokers, client } = await cluster(1);
    const [a] = brokers;
    if (a === undefined) throw new Error('no broker');
    for (let i = 0; i < 1000; i++) a.forcedOutcomes.push({ outcome: quorumq.v1.PublishOutcome.PUBLISH_OUTCOME_FAILED, statusCode: grpc.status.UNAVAILABLE, errorReason: 'NO_LEADER' });
    const publisher = client.createPublisher({ producerId: 'p' });
    const started = Date.now();
    const error = await publisher.publish('jobs', 'x').catch((e: unknown) => e);
    expect(error).toMatchObject({ code: 'UNAVAILABLE', reason: 'NO_LEADER', retriable: true });
    const elapsed = Date.now() - started;
    expect(elapsed).toBeGreaterThanOrEqual(1_000); // the cluster's failoverTimeoutMs is 2 s, back-off at most 50 ms
    expect(elapsed).toBeLessThan(5_000);
    expect(a.publishRequests.length).toBeGreaterThan(3);
    await publisher.close();
  });

  it('refuses more messages in flight than the dedup window with a producerId', async () => {
    const { client } = await cluster(1);
    expect(() => client.createPublisher({ producerId: 'p', maxInFlight: DEDUP_WINDOW + 1 })).toThrow(/at most 1024 with a producerId/);
    expect(() => client.createPublisher({ producerId: 'p', maxInFlight: DEDUP_WINDOW })).not.toThrow();
    expect(() => client.createPublisher({ maxInFlight: DEDUP_WINDOW + 1 })).not.toThrow();
  });

  it('gives up re-sending after the failover timeout with a retriable error', async () => {
    const dead = await FakeBroker.deadAddress();
    const client = connect({ nodes: [dead], failoverTimeoutMs: 200, initialBackoffMs: 10, maxBackoffMs: 20, nativeStreams });
    cleanup.push(() => client.close());
    const publisher = client.createPublisher({ producerId: 'p' });
    const started = Date.now();
    const error = await publisher.publish('jobs', 'x').catch((e: unknown) => e);
    expect(error).toMatchObject({ code: 'UNAVAILABLE', retriable: true });
    expect(Date.now() - started).toBeLessThan(2_000);
  });
});
