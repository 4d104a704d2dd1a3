/**
 * End to end against three real node processes allowed batches of 100,000 publishes: one
 * such batch confirms every publish (issue 12 item 16). Handled in the turn that decoded it,
 * it held the leader's event loop for seconds: a new leader was elected, overwrote the
 * entries, and all but the first 4,096 or 8,192 publishes timed out.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, credentials, status as grpcStatus, type StatusObject } from '@grpc/grpc-js';
import type { QuorumqClient } from '@quorumq/client';
import { BrokerService, quorumq } from '@quorumq/proto';

import { TestCluster } from './cluster.js';

import pb = quorumq.v1;

let cluster: TestCluster;
let client: QuorumqClient;

beforeAll(async () => {
  cluster = await TestCluster.start({ env: { QUORUMQ_MAX_PUBLISHES_PER_BATCH: '100000' } });
  client = cluster.client();
});

afterAll(async () => {
  await cluster?.close();
});

/** Sends one PublishBatch on a new stream to `address`; every outcome and the status. */
function publishBatch(address: string, publishes: pb.PublishRequest.$Properties[]): Promise<{ outcomes: pb.PublishResponse.$Properties[]; status: StatusObject }> {
  const node = new Client(address, credentials.createInsecure(), { 'grpc.max_receive_message_length': -1 });
  return new Promise((resolve) => {
    const outcomes: pb.PublishResponse.$Properties[] = [];
    const call = node.makeBidiStreamRequest(BrokerService.publishStream.path, BrokerService.publishStream.requestSerialize, BrokerService.publishStream.responseDeserialize);
    call.on('data', (response: pb.PublishOutcomes) => outcomes.push(...response.outcomes));
    call.on('error', () => undefined);
    call.on('status', (status: StatusObject) => {
      node.close();
      resolve({ outcomes, status });
    });
    call.write({ publishes });
    call.end();
  });
}

describe('item 16: a batch of many entries', () => {
  it('one PublishBatch of 100,000 publishes to the leader: every outcome CONFIRMED, every message stored once', async () => {
    await client.declareQueue('hundred-thousand');
    const leader = await cluster.leaderOf('hundred-thousand', client);
    const publishes = Array.from({ length: 100_000 }, (_, i) => ({ publishId: i + 1, message: { body: Buffer.from(`m${i}`), routingKey: 'hundred-thousand' } }));
    const { outcomes, status } = await publishBatch(cluster.nodes.find((n) => n.id === leader)!.address, publishes);
    expect(status.code).toBe(grpcStatus.OK);
    const failed = outcomes.filter((o) => o.outcome !== pb.PublishOutcome.PUBLISH_OUTCOME_CONFIRMED);
    expect({ failed: failed.length, first: failed[0]?.reason }).toEqual({ failed: 0, first: undefined });
    expect(new Set(outcomes.map((o) => Number(o.publishId))).size).toBe(100_000);
    expect((await client.queueStatus('hundred-thousand')).ready).toBe(100_000);
  });
});
