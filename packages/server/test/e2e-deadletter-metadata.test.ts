/**
 * Dead-lettering decided on a queue leader whose copy of the metadata lags: a dead-letter
 * must not be dropped as unroutable for a bind it has not applied yet (issue 12, item 2),
 * and `reject-publish-dlx` dead-letters the refused message itself, body, properties and
 * headers included (item 3).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { QuorumqClient } from '@quorumq/client';

import { TestCluster, waitFor } from './cluster.js';

let cluster: TestCluster;
let client: QuorumqClient;

beforeAll(async () => {
  cluster = await TestCluster.start();
  client = cluster.client();
});

afterAll(async () => {
  await cluster?.close();
});

describe('dead-lettering right after the DLX binding was made', () => {
  it('never drops a rejected message for a bind the source leader has not applied yet (16 tries)', async () => {
    const tries = 16;
    const lost: string[] = [];
    for (let i = 0; i < tries; i++) {
      const source = `fresh.src.${i}`;
      const dlq = `fresh.dlq.${i}`;
      const dlx = `fresh.dlx.${i}`;
      await client.declareExchange(dlx, 'fanout');
      await client.declareQueue(dlq);
      await client.declareQueue(source, { deadLetterExchange: dlx });
      await client.publish('', source, `m${i}`);
      const leader = await cluster.leaderOf(source, client);
      // Bind through another node: it waits until *it* applied the bind, not the source's leader.
      const other = cluster.nodes.find((n) => n.id !== leader)!;
      const binder = cluster.client({ nodes: [other.address] });
      await binder.bind({ source: dlx, queue: dlq });
      const got = await client.get(source, { manualAck: true });
      expect(got?.body.toString()).toBe(`m${i}`);
      await got!.reject();
      await waitFor(async () => {
        const s = await client.queueStatus(source);
        return s.deadLettering === 0 && s.unacked === 0;
      });
      const inDlq = (await client.queueStatus(dlq)).ready;
      const back = (await client.queueStatus(source)).ready;
      if (inDlq !== 1 || back !== 0) lost.push(`${source}: dlq ${inDlq}, source ${back}`);
    }
    expect(lost).toEqual([]);
  });
});

describe('moving right after the destination binding was made', () => {
  it('moves every message even when the source leader has not applied the bind yet (16 tries)', async () => {
    const failed: string[] = [];
    for (let i = 0; i < 16; i++) {
      const source = `mv.src.${i}`;
      const exchange = `mv.x.${i}`;
      const target = `mv.dst.${i}`;
      await client.declareExchange(exchange, 'fanout');
      await client.declareQueue(target);
      await client.declareQueue(source);
      await client.publish('', source, `m${i}`);
      const leader = await cluster.leaderOf(source, client);
      const other = cluster.nodes.find((n) => n.id !== leader)!;
      await cluster.client({ nodes: [other.address] }).bind({ source: exchange, queue: target });
      const final = await client.move({ sourceQueue: source, destinationExchange: exchange });
      if (final.moved !== 1 || final.total !== 1) failed.push(`${source}: moved ${final.moved} of ${final.total}`);
    }
    expect(failed).toEqual([]);
  });
});

describe('reject-publish-dlx', () => {
  it('dead-letters the refused message with its body, properties and headers', async () => {
    await client.declareExchange('rpdlx.dlx', 'fanout');
    await client.declareQueue('rpdlx.dlq');
    await client.bind({ source: 'rpdlx.dlx', queue: 'rpdlx.dlq' });
    await client.declareQueue('rpdlx', { maxLength: 1, overflow: 'reject-publish-dlx', deadLetterExchange: 'rpdlx.dlx' });
    await client.publish('', 'rpdlx', 'first');
    const refused = await client.publish('', 'rpdlx', 'second', { headers: { tenant: 'acme', attempt: 7 }, properties: { contentType: 'text/plain', messageId: 'm-2' } });
    expect(refused.outcome).toBe('rejected');
    await waitFor(async () => (await client.queueStatus('rpdlx.dlq')).ready === 1);
    const dead = await client.get('rpdlx.dlq');
    expect(dead?.body.toString()).toBe('second');
    expect(dead?.headers.tenant).toBe('acme');
    expect(dead?.headers.attempt).toBe(7);
    expect(dead?.properties.contentType).toBe('text/plain');
    expect(dead?.properties.messageId).toBe('m-2');
    expect(dead?.deaths[0]).toMatchObject({ queue: 'rpdlx', reason: 'maxlen', count: 1 });
    const first = await client.get('rpdlx');
    expect(first?.body.toString()).toBe('first');
  });
});
