/**
 * The checker, the schedule and the proxy on their own (no cluster).
 */
import { connect as netConnect, createServer } from 'node:net';
import { describe, expect, it } from 'vitest';
import { freePort } from '@quorumq/cli';

import { check } from '../src/checker.js';
import { History } from '../src/history.js';
import { PairProxy } from '../src/proxy.js';
import { makeSchedule, parseFaults } from '../src/schedule.js';

const DLQ = new Set(['dlq']);

describe('checker', () => {
  it('counts lost, unexpected, duplicated, recovered and dedup violations', () => {
    const h = new History('t');
    const confirmed = (value: string, pid = false): void => h.confirm(h.attempt(value, 'q', pid));
    confirmed('t/p/0');
    confirmed('t/p/1'); // lost
    confirmed('t/p/2'); // dead-lettered, consumed from the DLQ
    confirmed('t/p/3'); // duplicated (redelivered after a lost ack)
    h.attempt('t/p/4', 'q', false); // unconfirmed but consumed: recovered
    h.attempt('t/p/5', 'q', false); // unconfirmed, gone: fine
    confirmed('t/pid/0', true); // enqueued twice despite the producer id
    const consume = (queue: string, value: string, count = 0, dead = false): void => {
      h.delivered(queue, value, count, dead);
      h.acked(queue, value);
    };
    consume('q', 't/p/0');
    consume('dlq', 't/p/2', 0, true);
    consume('q', 't/p/3');
    consume('q', 't/p/3', 1);
    consume('q', 't/p/4');
    consume('q', 't/pid/0');
    consume('q', 't/pid/0');
    consume('q', 't/p/99'); // never published
    expect(h.delivered('q', 'someone else', 0, false)).toBeNull();

    const r = check(h, DLQ);
    expect(r.lost).toBe(1);
    expect(r.examples.lost).toEqual(['t/p/1']);
    expect(r.unexpected).toBe(2);
    expect(r.examples.unexpected.sort()).toEqual(['someone else', 't/p/99']);
    expect(r.duplicated).toBe(2);
    expect(r.recovered).toBe(1);
    expect(r.deadLettered).toBe(1);
    expect(r.dedupViolations).toBe(1);
    expect(r.examples.dedupViolations).toEqual(['t/pid/0']);
    expect(r.confirmed).toBe(5);
    expect(r.ok).toBe(false);
  });

  it('a redelivery (delivery count above 0) is a duplicate delivery, not a dedup violation', () => {
    const h = new History('t');
    h.confirm(h.attempt('t/pid/0', 'q', true));
    h.delivered('q', 't/pid/0', 0, false);
    h.acked('q', 't/pid/0');
    h.delivered('q', 't/pid/0', 1, false);
    h.acked('q', 't/pid/0');
    const r = check(h, DLQ);
    expect(r).toMatchObject({ lost: 0, unexpected: 0, duplicated: 1, dedupViolations: 0, ok: true });
  });
});

describe('schedule', () => {
  it('the same seed gives the same schedule; every kind of a cycle appears', () => {
    const kinds = parseFaults('kill-leader,kill-random,partition');
    const a = makeSchedule(42, 60_000, kinds, ['n1', 'n2', 'n3'], ['q1', 'q2']);
    const b = makeSchedule(42, 60_000, kinds, ['n1', 'n2', 'n3'], ['q1', 'q2']);
    const c = makeSchedule(43, 60_000, kinds, ['n1', 'n2', 'n3'], ['q1', 'q2']);
    expect(a).toEqual(b);
    expect(a).not.toEqual(c);
    expect(new Set(a.slice(0, 3).map((f) => f.kind))).toEqual(new Set(kinds));
    expect(() => parseFaults('kill-leader,nope')).toThrow(/unknown fault/);
  });
});

describe('proxy', () => {
  it('forwards, and while blocked cuts and refuses connections', async () => {
    const target = createServer((socket) => socket.pipe(socket));
    const targetPort = await freePort();
    await new Promise<void>((r) => target.listen(targetPort, '127.0.0.1', () => r()));
    const proxy = new PairProxy('a', 'b', `127.0.0.1:${await freePort()}`, `127.0.0.1:${targetPort}`);
    await proxy.start();
    const port = Number(proxy.listen.split(':')[1]);
    const echo = (): Promise<string> =>
      new Promise((resolveEcho) => {
        const socket = netConnect(port, '127.0.0.1', () => socket.write('ping'));
        let got = '';
        socket.on('data', (d) => {
          got += d.toString();
          socket.end();
        });
        socket.on('close', () => resolveEcho(got));
        socket.on('error', () => resolveEcho(got));
      });
    expect(await echo()).toBe('ping');
    proxy.block();
    expect(await echo()).toBe('');
    proxy.unblock();
    expect(await echo()).toBe('ping');
    expect(proxy.stats.refused).toBe(1);
    await proxy.close();
    await new Promise<void>((r) => target.close(() => r()));
  });
});
