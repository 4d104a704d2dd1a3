import * as grpc from '@grpc/grpc-js';
import { quorumq } from '@quorumq/proto';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { connect, QuorumqError, type QuorumqClient } from '../src/index.js';
import { decodeHeaders } from '../src/headers.js';
import { FakeBroker } from './fake-broker.js';

let broker: FakeBroker;
let client: QuorumqClient;

beforeEach(async () => {
  broker = await FakeBroker.start();
  broker.state.declareQueue('jobs');
  client = connect({ nodes: [broker.address], failoverTimeoutMs: 500 });
});

afterEach(async () => {
  await client.close();
  broker.kill();
});

describe('publish', () => {
  it('confirms a routed message and sends body, properties, headers, delay and dedup fields', async () => {
    const notBefore = new Date(Date.now() + 60_000);
    const result = await client.publish('', 'jobs', 'hello', {
      properties: { contentType: 'text/plain', messageId: 'm-1', correlationId: 'c-1', priority: 3, expirationMs: 5000, timestamp: new Date(1_700_000_000_000), headers: { a: 1 } },
      headers: { trace: 'abc', n: 2.5, when: new Date(1000) },
      delayMs: 250,
      notBefore,
      producerId: 'p1',
      sequence: 7,
    });
    expect(result).toEqual({ outcome: 'confirmed', queues: ['jobs'] });
    const request = broker.publishRequests[0];
    expect(request).toBeDefined();
    const message = request?.message;
    expect(Buffer.from(message?.body ?? []).toString()).toBe('hello');
    expect(message?.routingKey).toBe('jobs');
    expect(message?.properties?.contentType).toBe('text/plain');
    expect(message?.properties?.messageId).toBe('m-1');
    expect(message?.properties?.correlationId).toBe('c-1');
    expect(message?.properties?.priority).toBe(3);
    expect(Number(message?.properties?.expirationMs)).toBe(5000);
    expect(Number(message?.properties?.timestampMs)).toBe(1_700_000_000_000);
    expect(Number(message?.delayMs)).toBe(250);
    expect(Number(message?.notBeforeMs)).toBe(notBefore.getTime());
    expect(decodeHeaders(message?.headers)).toEqual({ a: 1, trace: 'abc', n: 2.5, when: new Date(1000) });
    expect(request?.producerId).toBe('p1');
    expect(Number(request?.sequence)).toBe(7);
  });

  it('reports unroutable (with the returned message when mandatory), rejected and duplicate outcomes', async () => {
    expect(await client.publish('', 'nowhere', 'x')).toEqual({ outcome: 'unroutable', queues: [] });
    const returned = await client.publish('', 'nowhere', Buffer.from('back'), { mandatory: true, headers: { k: 'v' } });
    expect(returned.outcome).toBe('unroutable');
    expect(returned.returned?.body.toString()).toBe('back');
    expect(returned.returned?.headers).toEqual({ k: 'v' });
    broker.state.declareQueue('small', { maxLength: 0, overflow: 'reject-publish' });
    expect(await client.publish('', 'small', 'x')).toEqual({ outcome: 'rejected', queues: [], reason: 'QUEUE_FULL' });
    expect((await client.publish('', 'jobs', 'a', { producerId: 'p', sequence: 1 })).outcome).toBe('confirmed');
    expect(await client.publish('', 'jobs', 'a', { producerId: 'p', sequence: 1 })).toEqual({ outcome: 'duplicate', queues: ['jobs'] });
    expect(broker.state.queues.get('jobs')?.ready).toHaveLength(1);
  });

  it('rejects a FAILED outcome with a QuorumqError whose code is the status code', async () => {
    broker.forcedOutcomes.push({ outcome: quorumq.v1.PublishOutcome.PUBLISH_OUTCOME_FAILED, statusCode: grpc.status.UNAVAILABLE, reason: 'NO_QUORUM' });
    const error = await client.publish('', 'jobs', 'x').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(QuorumqError);
    expect(error).toMatchObject({ code: 'UNAVAILABLE', reason: 'NO_QUORUM', retriable: true });
    broker.forcedOutcomes.push({ outcome: quorumq.v1.PublishOutcome.PUBLISH_OUTCOME_FAILED, statusCode: grpc.status.RESOURCE_EXHAUSTED, reason: 'MESSAGE_TOO_LARGE' });
    expect(await client.publish('', 'jobs', 'x').catch((e: unknown) => e)).toMatchObject({ code: 'RESOURCE_EXHAUSTED', reason: 'MESSAGE_TOO_LARGE', retriable: false });
    const missing = await client.publish('no-such-exchange', 'k', 'x').catch((e: unknown) => e);
    expect(missing).toMatchObject({ code: 'NOT_FOUND', reason: 'EXCHANGE_NOT_FOUND', retriable: false });
  });

  it("takes a FAILED outcome's error_reason as the reason (a publish stream in a memory alarm), with the broker's message", async () => {
    const details = 'node n1 is using 209715200 bytes (200.0 MiB) of resident memory, above its high watermark';
    const failed = { outcome: quorumq.v1.PublishOutcome.PUBLISH_OUTCOME_FAILED, statusCode: grpc.status.RESOURCE_EXHAUSTED, reason: details, errorReason: 'MEMORY_ALARM' };
    broker.forcedOutcomes.push(failed);
    const error = await client.createPublisher().publish('jobs', 'x').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(QuorumqError);
    expect(error).toMatchObject({ code: 'RESOURCE_EXHAUSTED', reason: 'MEMORY_ALARM', retriable: true });
    expect((error as QuorumqError).message).toContain(details);
  });

  it('maps a status error with trailers', async () => {
    broker.failNext('publish', { code: grpc.status.INVALID_ARGUMENT, reason: 'BAD_PRIORITY', details: 'priority out of range' });
    const error = await client.publish('', 'jobs', 'x').catch((e: unknown) => e);
    expect(error).toMatchObject({ code: 'INVALID_ARGUMENT', reason: 'BAD_PRIORITY', retriable: false, message: 'priority out of range' });
    const invalid = await client.publish('', 'jobs', 'x', { properties: { priority: 300 } }).catch((e: unknown) => e);
    expect(invalid).toMatchObject({ code: 'INVALID_ARGUMENT', retriable: false });
  });
});
