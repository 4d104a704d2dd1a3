import { quorumq } from '@quorumq/proto';
import { DEFAULT_ARGUMENTS, type Effect } from '@quorumq/queue';
import type { Entry } from '@quorumq/raft';
import { afterAll, describe, expect, it } from 'vitest';

import { ENTRY_SPAN, QueueReplica } from '../src/queue-replica.js';
import { encodeQueueEntry } from '../src/log-format.js';
import { TestStores } from './test-message-store.js';

import pb = quorumq.v1;

const stores = new TestStores();
const store = await stores.open();
afterAll(() => stores.closeAll());

const entry = (index: number, data: Uint8Array): Entry => ({ index, term: 1, type: 'normal', data });

function publish(body: string): Uint8Array {
  const message = Buffer.from(pb.Message.encode({ body: Buffer.from(body), routingKey: 'q', headers: { tenant: { stringValue: 'acme' } } }).finish());
  return encodeQueueEntry({ type: 'enqueue', sizeBytes: body.length, exchange: '', routingKeys: ['q'] }, message, 1000);
}

describe('reject-publish-dlx on a queue replica', () => {
  for (const strategy of ['at-least-once', 'at-most-once'] as const) {
    it(`keeps the refused message for its dead-letter (${strategy}), on leader and follower alike`, () => {
      const args = { ...DEFAULT_ARGUMENTS, maxLength: 1, overflow: 'reject-publish-dlx' as const, deadLetterExchange: 'dlx', deadLetterStrategy: strategy };
      const seen: Array<{ effect: Effect; body: string | undefined }> = [];
      const leader: QueueReplica = new QueueReplica(
        'q',
        'q/1/q',
        args,
        {
          onEffects: (r, effects) => {
            for (const effect of effects) if (effect.type === 'deadLetter') seen.push({ effect, body: r.message(effect.messageId)?.body?.toString() });
          },
        },
        store,
      );
      const follower = new QueueReplica('q', 'q/1/q', args, { onEffects: () => {} }, store);
      for (const r of [leader, follower]) {
        expect(r.apply(entry(1, publish('first')), r === leader).reply.type).toBe('enqueued');
        expect(r.apply(entry(2, publish('second')), r === leader).reply).toEqual({ type: 'rejected', reason: 'maxlen' });
      }
      expect(seen).toHaveLength(1);
      expect(seen[0]!.effect).toMatchObject({ type: 'deadLetter', reason: 'maxlen', messageId: 2 * ENTRY_SPAN });
      expect(seen[0]!.body).toBe('second');
      expect(leader.message(2 * ENTRY_SPAN)?.headers?.tenant?.stringValue).toBe('acme');
      expect([...follower.bodies.keys()]).toEqual([...leader.bodies.keys()]);
    });
  }
});
