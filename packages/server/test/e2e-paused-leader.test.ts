/**
 * A paused (SIGSTOP) queue leader does not stall confirms for the whole pause (issue 12,
 * item 14): a node that forwarded publishes to it re-sends the deduplicated ones to the new
 * leader once one is elected, instead of waiting out the request timeout.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { TestCluster } from './cluster.js';

const REQUEST_TIMEOUT_MS = 20_000;
let cluster: TestCluster;

beforeAll(async () => {
  cluster = await TestCluster.start({ env: { QUORUMQ_REQUEST_TIMEOUT_MS: String(REQUEST_TIMEOUT_MS) } });
});

afterAll(async () => {
  await cluster?.close();
});

describe('publishing through a follower while the queue leader is paused', () => {
  it('confirms deduplicated publishes soon after a new leader is elected, each stored once', async () => {
    const admin = cluster.client();
    await admin.declareQueue('paused.leader');
    const leader = await cluster.leaderOf('paused.leader', admin);
    const via = cluster.nodes.find((n) => n.id !== leader)!;
    // Publishes go to `via` only, which forwards them to the queue's leader.
    const client = cluster.client({ nodes: [via.address], leaderRouting: false });
    const publisher = client.createPublisher({ producerId: 'paused-leader-test', maxInFlight: 16 });
    await publisher.publish('paused.leader', 'before');

    cluster.local.pause(leader);
    let resumed = false;
    try {
      const started = Date.now();
      const results = await Promise.all(Array.from({ length: 20 }, (_, i) => publisher.publish('paused.leader', `during-${i}`)));
      const elapsed = Date.now() - started;
      expect(results.map((r) => r.outcome)).toEqual(Array.from({ length: 20 }, () => 'confirmed'));
      // A new leader is elected in about a second; the old behaviour waited the whole request
      // timeout at the paused leader, then failed as OUTCOME_UNKNOWN.
      expect(elapsed).toBeLessThan(REQUEST_TIMEOUT_MS / 2);
      cluster.local.resume(leader);
      resumed = true;
    } finally {
      if (!resumed) cluster.local.resume(leader);
    }
    await publisher.close();
    // Every message once: nothing lost, nothing stored twice by the re-sending.
    const seen: string[] = [];
    for (;;) {
      const delivery = await admin.get('paused.leader');
      if (delivery === null) break;
      seen.push(delivery.body.toString());
    }
    expect(seen.sort()).toEqual(['before', ...Array.from({ length: 20 }, (_, i) => `during-${i}`)].sort());
  });

  it('an SDK publishing straight to the paused leader fails over and confirms, each stored once', async () => {
    const admin = cluster.client();
    await admin.declareQueue('paused.direct');
    const leader = await cluster.leaderOf('paused.direct', admin);
    // The leader first: the publisher's stream goes to it (the paused node), not through another.
    const leaderAddress = cluster.nodes.find((n) => n.id === leader)!.address;
    const client = cluster.client({ nodes: [leaderAddress, ...cluster.addresses.filter((a) => a !== leaderAddress)] });
    const publisher = client.createPublisher({ producerId: 'paused-direct-test', maxInFlight: 16 });
    await publisher.publish('paused.direct', 'before');
    cluster.local.pause(leader);
    let resumed = false;
    // However this goes, the leader runs again after 12 s (so a stall fails the assertion below).
    const backstop = setTimeout(() => {
      if (!resumed) cluster.local.resume(leader);
      resumed = true;
    }, 12_000);
    try {
      const started = Date.now();
      const results = await Promise.all(Array.from({ length: 20 }, (_, i) => publisher.publish('paused.direct', `during-${i}`)));
      const elapsed = Date.now() - started;
      expect(results.map((r) => r.outcome)).toEqual(Array.from({ length: 20 }, () => 'confirmed'));
      expect(elapsed).toBeLessThan(REQUEST_TIMEOUT_MS / 2);
    } finally {
      clearTimeout(backstop);
      if (!resumed) cluster.local.resume(leader);
      resumed = true;
    }
    await publisher.close();
    const seen: string[] = [];
    for (;;) {
      const delivery = await client.get('paused.direct');
      if (delivery === null) break;
      seen.push(delivery.body.toString());
    }
    expect(seen.sort()).toEqual(['before', ...Array.from({ length: 20 }, (_, i) => `during-${i}`)].sort());
  });
});
