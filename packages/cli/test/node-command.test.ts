/**
 * `quorumq node` refuses a configuration it cannot run safely before it starts anything:
 * exit 2 with a message saying what to set (issue 17: the peer listener).
 */
import { CLI_MAIN } from '@quorumq/cli';
import { spawnSync } from 'node:child_process';
import { createServer } from 'node:net';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, expect, it } from 'vitest';

const dir = mkdtempSync(join(tmpdir(), 'quorumq-node-command-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function node(env: Record<string, string>, args: string[] = []): { status: number | null; stderr: string; stdout: string } {
  const result = spawnSync(process.execPath, [CLI_MAIN, 'node', ...args], {
    env: { PATH: process.env.PATH ?? '', QUORUMQ_DATA_DIR: dir, QUORUMQ_LOG_LEVEL: 'fatal', QUORUMQ_CLUSTER_SECRET: '0123456789abcdef0123', ...env },
    encoding: 'utf8',
    timeout: 30_000,
  });
  return { status: result.status, stderr: result.stderr, stdout: result.stdout };
}

it('exits 2 on a configuration from before the peer listener (peers naming the client port), saying what to set', () => {
  const old = node({ QUORUMQ_NODE_ID: 'n1', QUORUMQ_LISTEN: '127.0.0.1:7001', QUORUMQ_PEERS: 'n1=127.0.0.1:7001,n2=127.0.0.1:7002,n3=127.0.0.1:7003' });
  expect(old.status).toBe(2);
  expect(old.stderr).toMatch(/^quorumq: peers.n1 \(127.0.0.1:7001\) is this node's client address .*set peerListen \(QUORUMQ_PEER_LISTEN\)/);
});

it('exits 2 when the peer listener is the client listener, or missing on a node with peers', () => {
  const same = node({ QUORUMQ_NODE_ID: 'n1', QUORUMQ_LISTEN: '127.0.0.1:7001', QUORUMQ_PEER_LISTEN: '127.0.0.1:7001', QUORUMQ_PEERS: 'n1=127.0.0.1:8001,n2=127.0.0.1:8002' });
  expect(same.status).toBe(2);
  expect(same.stderr).toMatch(/peerListen \(127.0.0.1:7001\) and listen \(127.0.0.1:7001\) are the same address/);
  const missing = node({ QUORUMQ_NODE_ID: 'n1', QUORUMQ_LISTEN: '127.0.0.1:7001', QUORUMQ_PEERS: 'n1=127.0.0.1:8001,n2=127.0.0.1:8002' });
  expect(missing.status).toBe(2);
  expect(missing.stderr).toMatch(/no peer listener: set peerListen/);
});

it('--join sets the join setting (QUORUMQ_JOIN), over the environment', () => {
  // A bad QUORUMQ_JOIN is refused; with --join it is not read, and the next problem (no secret) is the one reported.
  const env = { QUORUMQ_NODE_ID: 'n4', QUORUMQ_LISTEN: '127.0.0.1:7004', QUORUMQ_PEER_LISTEN: '127.0.0.1:8004', QUORUMQ_PEERS: 'n1=127.0.0.1:8001,n4=127.0.0.1:8004', QUORUMQ_JOIN: 'maybe' };
  const bad = node(env);
  expect(bad.status).toBe(2);
  expect(bad.stderr).toContain('join must be true or false, got "maybe"');
  const joining = node({ ...env, QUORUMQ_CLUSTER_SECRET: '' }, ['--join']);
  expect(joining.status).toBe(2);
  expect(joining.stderr).not.toContain('join must be');
  expect(joining.stderr).toContain('a cluster secret is required');
});

it('a port it cannot bind: exit 2, saying so once on stderr; grpc-js\'s own report is a JSON warning in the log, not a bare line', async () => {
  const taken = createServer();
  await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve));
  const address = taken.address();
  const port = typeof address === 'object' && address !== null ? address.port : 0;
  try {
    const result = node({ QUORUMQ_NODE_ID: 'n1', QUORUMQ_LISTEN: `127.0.0.1:${port}`, QUORUMQ_WARM_UP: 'false', QUORUMQ_LOG_LEVEL: 'info', QUORUMQ_DATA_DIR: join(dir, 'bind') });
    expect(result.status).toBe(2);
    // Before: grpc-js wrote "E No address added out of total 1 resolved" to stderr first.
    expect(result.stderr.trim().split('\n')).toEqual([expect.stringMatching(new RegExp(`^quorumq: node n1 cannot start: .*EADDRINUSE.*127.0.0.1:${port}`))]);
    const lines = result.stdout.trim().split('\n');
    for (const line of lines) expect(() => JSON.parse(line), line).not.toThrow();
    const grpc = lines.map((line) => JSON.parse(line) as { component?: string; level: number; msg: string }).filter((record) => record.component === 'grpc-js');
    expect(grpc).toEqual([expect.objectContaining({ level: 40, msg: expect.stringContaining('No address added') })]);
  } finally {
    taken.close();
  }
});
