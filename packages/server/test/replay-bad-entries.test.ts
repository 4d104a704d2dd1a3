/**
 * Issue 12 item 4: a log holding entries no machine can apply is replayed. A real node (its
 * WAL, its Raft groups) commits such entries to its metadata group and to a queue's group,
 * then restarts from its data directory: it replays them, starts, and keeps serving.
 */
import { freePort } from '@quorumq/cli';
import { connect, type QuorumqClient } from '@quorumq/client';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';

import { loadConfig, type NodeConfig } from '../src/config.js';
import { encodeJson } from '../src/json-codec.js';
import type { MetaReply } from '../src/meta-machine.js';
import type { QueueApplyResult } from '../src/queue-replica.js';
import { startNode, type RunningNode } from '../src/server.js';
import { ENTRY_CLOCK_BYTES, encodeQueueEntry } from '../src/log-format.js';

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** Metadata entries the machine cannot apply. */
const BAD_META: readonly Uint8Array[] = [
  Buffer.from('{"type":"wipeEverything"}'),
  Buffer.from('null'),
  Buffer.from('not json at all'),
  encodeJson({ type: 'topology', command: null }),
  encodeJson({ type: 'declareQueue', name: 'evil', args: null, passive: false, members: 'n1' }),
  encodeJson({ type: 'deleteQueue' }),
];

function rawQueueEntry(body: string): Uint8Array {
  const json = Buffer.from(body);
  return Buffer.concat([Buffer.alloc(ENTRY_CLOCK_BYTES), Buffer.from([0x12, json.byteLength]), json]);
}

/** Queue entries the replica cannot apply. */
const BAD_QUEUE: readonly Uint8Array[] = [
  rawQueueEntry('{"type":"wipe"}'),
  rawQueueEntry('null'),
  rawQueueEntry('{"type":'),
  Uint8Array.from([1, 2, 3]),
  // A message whose bytes do not decode, then a get that hands it out.
  encodeQueueEntry({ type: 'enqueue', sizeBytes: 3, exchange: '', routingKeys: ['q'] }, Uint8Array.from([0x0a, 0x7f, 0x01]), 1),
  encodeQueueEntry({ type: 'get', ackMode: 'auto' }, null, 2),
];

async function start(config: NodeConfig, fatals: unknown[]): Promise<RunningNode> {
  const running = await startNode(config, { logger: pino({ level: 'silent' }), onFatal: (error) => fatals.push(error) });
  expect(await running.node.waitForMetaLeader(10_000)).toBe(true);
  return running;
}

function client(address: string): QuorumqClient {
  const c = connect({ nodes: [address] });
  cleanups.push(() => c.close());
  return c;
}

describe('a node whose log holds entries that cannot be applied', () => {
  it('applies them as errors, restarts, replays them, and keeps serving', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'quorumq-replay-'));
    cleanups.push(() => rmSync(dataDir, { recursive: true, force: true }));
    const config = loadConfig(null, {}, { nodeId: 'n1', listen: `127.0.0.1:${await freePort()}`, dataDir, logLevel: 'silent', snapshotInterval: 100_000 });
    const fatals: unknown[] = [];

    const first = await start(config, fatals);
    let running: RunningNode | null = first;
    cleanups.push(() => running?.stop());
    const c1 = client(config.advertise);
    await c1.declareQueue('q');
    await c1.publish('', 'q', Buffer.from('before'));
    // Straight into the groups: what a forged or buggy proposer would have put in the log.
    for (const data of BAD_META) {
      const reply: MetaReply = await first.node.metaGroup.propose(data, Date.now() + 5000);
      expect(reply).toMatchObject({ ok: false, code: 'INVALID_ARGUMENT' });
    }
    const queue = first.node.queues.get('q');
    expect(queue).toBeDefined();
    for (const data of BAD_QUEUE) {
      const result: QueueApplyResult | undefined = await queue?.group.propose(data, Date.now() + 5000);
      expect(result?.reply.type).not.toBe('ok');
    }
    await c1.publish('', 'q', Buffer.from('after'));
    expect(fatals).toEqual([]);
    expect([...first.node.meta.queues.keys()]).toEqual(['q']);
    await first.stop();
    running = null;

    // The restart replays every entry above from the WAL.
    const second = await start(config, fatals);
    running = second;
    expect(fatals).toEqual([]);
    expect([...second.node.meta.queues.keys()]).toEqual(['q']);
    const c2 = client(config.advertise);
    await c2.publish('', 'q', Buffer.from('restarted'));
    const bodies: string[] = [];
    for (let i = 0; i < 4; i++) bodies.push((await c2.get('q'))?.body.toString() ?? '(none)');
    // "before" left with the forged get; the undecodable message reads as an empty one.
    expect(bodies).toEqual(['', 'after', 'restarted', '(none)']);
    await c2.declareQueue('another');
    expect(fatals).toEqual([]);
  }, 60_000);

  it('refuses forwarded entries it cannot apply with INVALID_ARGUMENT, before they reach the log', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'quorumq-forward-'));
    cleanups.push(() => rmSync(dataDir, { recursive: true, force: true }));
    const config = loadConfig(null, {}, { nodeId: 'n1', listen: `127.0.0.1:${await freePort()}`, dataDir, logLevel: 'silent' });
    const fatals: unknown[] = [];
    const running = await start(config, fatals);
    cleanups.push(() => running.stop());
    await client(config.advertise).declareQueue('q');
    const definition = running.node.meta.queues.get('q');
    const groupId = `q/${definition?.createdIndex}/q`;
    const metaLast = running.node.metaGroup.raft.lastIndex;
    const forwardedMeta = [
      ...BAD_META,
      // Well-formed, but its replicas are not nodes of this cluster.
      encodeJson({ type: 'declareQueue', name: 'elsewhere', args: {}, passive: false, members: ['n1', 'stranger'] }),
    ];
    for (const data of forwardedMeta) {
      await expect(running.node.router.handleForwarded('meta', Buffer.from(data))).rejects.toMatchObject({ code: 3, reason: 'MALFORMED_COMMAND' });
    }
    expect(running.node.metaGroup.raft.lastIndex).toBe(metaLast);
    const queueGroup = running.node.queues.get('q')?.group;
    const queueLast = queueGroup?.raft.lastIndex;
    for (const data of BAD_QUEUE.slice(0, 5)) {
      await expect(running.node.router.handleForwarded(groupId, Buffer.from(data))).rejects.toMatchObject({ code: 3, reason: 'MALFORMED_COMMAND' });
    }
    expect(queueGroup?.raft.lastIndex).toBe(queueLast);
    // A good forwarded command still goes through.
    const reply = await running.node.router.handleForwarded('meta', Buffer.from(encodeJson({ type: 'barrier' })));
    expect(Buffer.from(reply).toString()).toContain('"ok":true');
    expect(fatals).toEqual([]);
  }, 60_000);
});
