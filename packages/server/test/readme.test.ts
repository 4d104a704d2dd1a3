/** The README's SDK example runs as written against a fresh three-node cluster. */
import { execFile } from 'node:child_process';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, expect, it } from 'vitest';

import { TestCluster } from './cluster.js';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '../../..');
let cluster: TestCluster;

beforeAll(async () => {
  cluster = await TestCluster.start();
});

afterAll(async () => {
  await cluster?.close();
});

function exampleBlock(): string {
  const readme = readFileSync(join(root, 'README.md'), 'utf8');
  const section = readme.slice(readme.indexOf('## Use it'));
  const match = /```js\n([\s\S]*?)```/.exec(section);
  if (match?.[1] === undefined) throw new Error('README has no js example under "## Use it"');
  return match[1];
}

it('README: the "Use it" example publishes with confirms, consumes with a nack and a back-off, and prints the status with nothing unacked and no consumer (issue 12 item 12)', async () => {
  // Saved in the repository root, as the README says, so that @quorumq/client resolves.
  const file = join(root, `.readme-example-${process.pid}.mjs`);
  writeFileSync(file, exampleBlock());
  try {
    const { stdout } = await promisify(execFile)(process.execPath, [file], {
      cwd: root,
      env: { ...process.env, QUORUMQ_NODES: cluster.addresses.join(',') },
      timeout: 60_000,
    });
    expect(stdout).toContain('consumed apple, pear, plum');
    expect(stdout).toMatch(/status \{[\s\S]*name: 'orders'[\s\S]*ready: 0/);
    // Every message was acked (ack resolves once sent) and the consumer closed (close resolves
    // once the broker ended the subscription): nothing is left unacked, no consumer remains.
    expect(stdout).toMatch(/status \{[\s\S]*unacked: 0,/);
    expect(stdout).toMatch(/status \{[\s\S]*consumers: 0,/);
  } finally {
    rmSync(file, { force: true });
  }
});
