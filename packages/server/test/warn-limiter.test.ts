import { pino } from 'pino';
import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';

import { WarnLimiter } from '../src/warn-limiter.js';

describe('rate-limited warnings', () => {
  it('logs a key at most once per interval, then says how many were left out', () => {
    const lines: Array<Record<string, unknown>> = [];
    const sink = new Writable({
      write(chunk: Buffer, _encoding, done) {
        lines.push(JSON.parse(chunk.toString()) as Record<string, unknown>);
        done();
      },
    });
    let now = 1000;
    const limiter = new WarnLimiter(pino({ level: 'info' }, sink), 10_000, () => now);
    for (let i = 0; i < 5; i++) limiter.warn('a', { i }, 'refused');
    limiter.warn('b', {}, 'other');
    now += 10_000;
    limiter.warn('a', { i: 5 }, 'refused');
    expect(lines.map((l) => [l.msg, l.i, l.suppressedSinceLast])).toEqual([
      ['refused', 0, undefined],
      ['other', undefined, undefined],
      ['refused', 5, 4],
    ]);
  });
});
