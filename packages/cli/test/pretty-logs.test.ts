/** The readable form of the nodes' log lines that `quorumq cluster` prints on a terminal. */
import { describe, expect, it } from 'vitest';

import { nodeLogFormatter, prettyLogsFor } from '../src/pretty-logs.js';

const format = nodeLogFormatter({ colorize: false });
const at = new Date(2026, 0, 2, 3, 4, 5, 678).getTime(); // local time, as printed

describe('nodeLogFormatter', () => {
  it('turns a pino JSON line into one line of text: node, local time, level, message, then the other fields', () => {
    const line = JSON.stringify({ level: 30, time: at, pid: 4242, hostname: 'box', node: 'n2', listen: '127.0.0.1:7002', peers: { n1: '127.0.0.1:7001' }, msg: 'node listening' });
    expect(format('n2', line)).toBe('n2 | [03:04:05.678] INFO: node listening {"listen":"127.0.0.1:7002","peers":{"n1":"127.0.0.1:7001"}}');
  });

  it('names the level of each pino level', () => {
    const levels = [20, 30, 40, 50, 60].map((level) => /\] (\w+):/.exec(format('n1', JSON.stringify({ level, time: at, msg: 'm' })))?.[1]);
    expect(levels).toEqual(['DEBUG', 'INFO', 'WARN', 'ERROR', 'FATAL']);
  });

  it("prints an error's stack on the following lines, each prefixed with the node", () => {
    const line = JSON.stringify({ level: 60, time: at, node: 'n3', err: { type: 'Error', message: 'disk gone', stack: 'Error: disk gone\n    at flush (wal.js:1:1)' }, msg: 'fatal error, exiting' });
    const lines = format('n3', line).split('\n');
    expect(lines[0]).toBe('n3 | [03:04:05.678] FATAL: fatal error, exiting');
    expect(lines.every((l) => l.startsWith('n3 | '))).toBe(true);
    expect(lines.some((l) => l.includes('at flush (wal.js:1:1)'))).toBe(true);
  });

  it('passes anything that is not a JSON object through, prefixed', () => {
    expect(format('n1', 'quorumq: something plain')).toBe('n1 | quorumq: something plain');
    expect(format('n1', '{not json')).toBe('n1 | {not json');
    expect(format('n1', '[1,2]')).toBe('n1 | [1,2]');
    expect(format('n1', '')).toBe('n1 | ');
  });
});

describe('prettyLogsFor', () => {
  it('is readable on a terminal by default, JSON when stdout is not a terminal, or as asked', () => {
    expect(prettyLogsFor('auto', { isTTY: true })).toBe(true);
    expect(prettyLogsFor('auto', { isTTY: false })).toBe(false);
    expect(prettyLogsFor('auto', {})).toBe(false);
    expect(prettyLogsFor('json', { isTTY: true })).toBe(false);
    expect(prettyLogsFor('pretty', { isTTY: false })).toBe(true);
  });
});
