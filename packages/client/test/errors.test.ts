import * as grpc from '@grpc/grpc-js';
import { describe, expect, it } from 'vitest';
import { QuorumqError, SdkReason, isRetriable, toQuorumqError } from '../src/errors.js';
import { Reason } from '../src/index.js';

function serviceError(code: grpc.status, details: string, trailers: Record<string, string>): grpc.ServiceError {
  const metadata = new grpc.Metadata();
  for (const [k, v] of Object.entries(trailers)) metadata.set(k, v);
  return Object.assign(new Error(`${code} ${grpc.status[code]}: ${details}`), { code, details, metadata });
}

describe('QuorumqError', () => {
  it('is an Error with code, reason and retriable', () => {
    const error = new QuorumqError('no queue', { code: 'NOT_FOUND', reason: 'QUEUE_NOT_FOUND' });
    expect(error).toBeInstanceOf(Error);
    expect(error).toBeInstanceOf(QuorumqError);
    expect(error.name).toBe('QuorumqError');
    expect(error.message).toBe('no queue');
    expect(error.code).toBe('NOT_FOUND');
    expect(error.reason).toBe('QUEUE_NOT_FOUND');
    expect(error.retriable).toBe(false);
    expect(new QuorumqError('x', { code: 'INTERNAL', retriable: true }).retriable).toBe(true);
    expect(new QuorumqError('x', { code: 'INTERNAL' }).reason).toBe('');
  });

  it('classifies retriable statuses', () => {
    expect(isRetriable('UNAVAILABLE', '')).toBe(true);
    expect(isRetriable('DEADLINE_EXCEEDED', '')).toBe(true);
    expect(isRetriable('RESOURCE_EXHAUSTED', 'DISK_ALARM')).toBe(true);
    expect(isRetriable('RESOURCE_EXHAUSTED', Reason.MEMORY_ALARM)).toBe(true);
    expect(isRetriable('RESOURCE_EXHAUSTED', 'MESSAGE_TOO_LARGE')).toBe(false);
    expect(isRetriable('INTERNAL', 'STREAM_BROKEN')).toBe(true);
    for (const code of ['NOT_FOUND', 'INVALID_ARGUMENT', 'FAILED_PRECONDITION', 'ALREADY_EXISTS']) expect(isRetriable(code, '')).toBe(false);
  });

  it('maps a grpc ServiceError with trailers', () => {
    const error = toQuorumqError(serviceError(grpc.status.UNAVAILABLE, 'no quorum', { 'quorumq-reason': 'NO_QUORUM', 'quorumq-leader': '127.0.0.1:7002' }), '127.0.0.1:7001');
    expect(error.code).toBe('UNAVAILABLE');
    expect(error.reason).toBe('NO_QUORUM');
    expect(error.leader).toBe('127.0.0.1:7002');
    expect(error.node).toBe('127.0.0.1:7001');
    expect(error.retriable).toBe(true);
    expect(error.message).toBe('no quorum');
    const locked = toQuorumqError(serviceError(grpc.status.FAILED_PRECONDITION, 'locked', { 'quorumq-reason': 'RESOURCE_LOCKED' }));
    expect([locked.code, locked.reason, locked.retriable, locked.leader]).toEqual(['FAILED_PRECONDITION', 'RESOURCE_LOCKED', false, undefined]);
  });

  it('reports a reset stream as a retriable broken stream', () => {
    const error = toQuorumqError(serviceError(grpc.status.INTERNAL, 'Received RST_STREAM with code 2', {}));
    expect(error.code).toBe('UNAVAILABLE');
    expect(error.reason).toBe('STREAM_BROKEN');
    expect(error.retriable).toBe(true);
    const other = toQuorumqError(new TypeError('boom'));
    expect([other.code, other.retriable, other.message]).toEqual(['UNKNOWN', false, 'boom']);
  });
});

describe('reasons', () => {
  it("the SDK's own reasons are none a node sends, and both lists are exported", () => {
    const sent: readonly string[] = Object.values(Reason);
    expect(Object.values(SdkReason).filter((reason) => sent.includes(reason))).toEqual([]);
    expect(Object.values(SdkReason)).toContain('STREAM_BROKEN');
    expect(sent).toEqual(expect.arrayContaining(['QUEUE_NOT_FOUND', 'NOT_LEADER', 'OUTCOME_UNKNOWN', 'RESOURCE_LOCKED', 'DISK_ALARM', 'MEMORY_ALARM']));
  });
});
