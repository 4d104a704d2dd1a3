/**
 * Issue 18: what exists can be listed: exchanges (the built-in ones flagged), bindings (with
 * their arguments as they were given, filtered by source or destination), and a queue's
 * consumers from its leader, through any node.
 */
import type { QuorumqClient } from '@quorumq/client';
import { afterAll, beforeAll, expect, it } from 'vitest';

import { TestCluster, waitFor } from './cluster.js';

let cluster: TestCluster;
let client: QuorumqClient;

beforeAll(async () => {
  cluster = await TestCluster.start();
  client = cluster.client();
  await client.declareExchange('orders', 'topic', { alternateExchange: 'amq.fanout' });
  await client.declareExchange('by-header', 'headers');
  await client.declareQueue('eu');
  await client.declareQueue('all');
  await client.declareQueue('single', { singleActiveConsumer: true });
  await client.bind({ source: 'orders', queue: 'eu', bindingKey: 'eu.#' });
  await client.bind({ source: 'orders', exchange: 'by-header', bindingKey: '#' });
  await client.bind({ source: 'by-header', queue: 'all', arguments: { 'x-match': 'all', big: 2n ** 60n, present: null } });
}, 120_000);

afterAll(async () => {
  await cluster?.close();
});

it('lists exchanges sorted by name, built-in ones flagged, with their type and alternate exchange', async () => {
  const exchanges = await client.listExchanges();
  expect(exchanges.find((e) => e.name === 'orders')).toEqual({ name: 'orders', type: 'topic', autoDelete: false, alternateExchange: 'amq.fanout', builtIn: false });
  expect(exchanges.find((e) => e.name === 'amq.direct')).toMatchObject({ type: 'direct', builtIn: true });
  expect(exchanges.map((e) => e.name)).toEqual([...exchanges.map((e) => e.name)].sort());
  expect(exchanges.some((e) => e.name === '')).toBe(false);
});

it('lists bindings with their arguments, and filters by source, queue or exchange', async () => {
  const all = await client.listBindings();
  expect(all).toHaveLength(3);
  expect(await client.listBindings({ source: 'orders' })).toHaveLength(2);
  expect(await client.listBindings({ queue: 'eu' })).toEqual([{ source: 'orders', destination: { queue: 'eu' }, bindingKey: 'eu.#', arguments: {} }]);
  expect((await client.listBindings({ exchange: 'by-header' })).map((b) => b.source)).toEqual(['orders']);
  const [headers] = await client.listBindings({ queue: 'all' });
  expect(headers?.arguments).toEqual({ 'x-match': 'all', big: 2n ** 60n, present: null });
});

it("lists a queue's consumers from its leader through any node: tag, prefetch, unacked, which one is active", async () => {
  await client.publish('', 'single', 'one');
  const first = client.consume('single', { prefetch: 5, consumerTag: 'first' });
  await first.ready();
  const second = client.consume('single', { prefetch: 7, consumerTag: 'second' });
  await second.ready();
  for (const address of cluster.addresses) {
    const viaNode = cluster.client({ nodes: [address], leaderRouting: false });
    await waitFor(async () => (await viaNode.listConsumers('single'))[0]?.unacked === 1);
    expect(await viaNode.listConsumers('single')).toEqual([
      { consumerTag: 'first', prefetch: 5, priority: 0, unacked: 1, active: true },
      { consumerTag: 'second', prefetch: 7, priority: 0, unacked: 0, active: false },
    ]);
  }
  await first.cancel();
  await second.cancel();
  expect(await client.listConsumers('single')).toEqual([]);
  await expect(client.listConsumers('no-such-queue')).rejects.toMatchObject({ code: 'NOT_FOUND' });
});
