/**
 * `quorumq cluster` (what `npm start` runs), as a user starts it: real node processes, the
 * banner it prints, where the nodes serve their metrics, how their logs are printed.
 */
import { CLI_MAIN, freePort, localNodeFlags } from '@quorumq/cli';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { afterEach, expect, it } from 'vitest';

const NODES = 3;
/** The line startCluster adds to the output when the cluster process exits. */
const EXITED = '(the cluster process exited)';
let running: { child: ChildProcess; dir: string } | null = null;

afterEach(async () => {
  if (running === null) return;
  const { child, dir } = running;
  running = null;
  if (child.exitCode === null && child.signalCode === null) {
    const exited = new Promise((done) => child.once('exit', done));
    // The cluster stops its nodes on SIGTERM; the group kill below covers one that failed to.
    child.kill('SIGTERM');
    await Promise.race([exited, new Promise((done) => setTimeout(done, 15_000))]);
  }
  try {
    process.kill(-child.pid!, 'SIGKILL');
  } catch {
    // already gone
  }
  rmSync(dir, { recursive: true, force: true });
});

function isFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}

/** A base port with NODES free ports from it, from it + 1000 (the default peer ports) and + 2100 (the default metrics ports). */
async function freeBasePort(): Promise<number> {
  for (;;) {
    const base = await freePort();
    const ports = Array.from({ length: NODES }, (_, i) => [base + i, base + 1000 + i, base + 2100 + i]).flat();
    if (base + 2100 + NODES <= 65535 && (await Promise.all(ports.map(isFree))).every(Boolean)) return base;
  }
}

/**
 * Starts `quorumq cluster` with stdout a pipe (not a TTY); resolves with its stdout lines so far, as they come.
 * Its nodes skip the warm-up (a few seconds each) unless `env` asks for it.
 */
function startCluster(args: string[], nodeFlags: string[] = [], env: Record<string, string> = { QUORUMQ_WARM_UP: 'false' }): { lines: string[]; exit: Promise<number | null>; pid: number } {
  const dir = mkdtempSync(join(tmpdir(), 'quorumq-cluster-'));
  const child = spawn(process.execPath, [...nodeFlags, CLI_MAIN, 'cluster', '--data', dir, ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true, // its own process group, so that cleanup reaches the nodes too
    env: { ...process.env, QUORUMQ_DISK_FREE_LIMIT_BYTES: '1048576', ...env },
  });
  running = { child, dir };
  const lines: string[] = [];
  createInterface({ input: child.stdout! }).on('line', (line) => lines.push(line));
  child.stderr!.on('data', (chunk: Buffer) => lines.push(`stderr: ${chunk.toString()}`));
  const exit = new Promise<number | null>((resolve) =>
    child.once('exit', (code, signal) => {
      lines.push(`${EXITED} ${signal ?? code}`);
      resolve(code);
    }),
  );
  return { lines, exit, pid: child.pid! };
}

/** Retries `attempt` until it returns a value (not undefined), or fails with the output so far. */
async function until<T>(what: string, lines: string[], attempt: () => T | undefined | Promise<T | undefined>, timeoutMs = 60_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const found = await Promise.resolve().then(attempt).catch(() => undefined);
    if (found !== undefined) return found;
    if (Date.now() > deadline || lines.some((l) => l.startsWith(EXITED))) throw new Error(`no ${what} (waited up to ${timeoutMs} ms); output:\n${lines.join('\n')}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** The node lines of the banner (`  n1  grpc ...  metrics ...  data ...`), once all are printed. */
function bannerNodes(lines: string[]): Array<{ grpc: string | undefined; peers: string | undefined; metrics: string | undefined }> | undefined {
  const nodes = lines.filter((l) => /^ {2}n\d+ {2}grpc /.test(l));
  if (nodes.length < NODES) return undefined;
  return nodes.map((l) => ({ grpc: /grpc (\S+)/.exec(l)?.[1], peers: /peers (\S+)/.exec(l)?.[1], metrics: /metrics (\S+)/.exec(l)?.[1] }));
}

const SCHED_IDLE = 5;

/** The cluster's node processes: for each, how many of its threads run at SCHED_IDLE, and whether its main thread does. */
function nodeThreadPolicies(clusterPid: number): Array<{ idle: number; mainIdle: boolean }> {
  const children = readFileSync(`/proc/${clusterPid}/task/${clusterPid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean);
  return children.map((pid) => {
    const policies = readdirSync(`/proc/${pid}/task`).map((tid) => {
      const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
      return { tid, policy: Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[41 - 3]) };
    });
    return { idle: policies.filter((t) => t.policy === SCHED_IDLE).length, mainIdle: policies.some((t) => t.tid === pid && t.policy === SCHED_IDLE) };
  });
}

it('serves the peers (base + 1000 + i) and the metrics (base + 2100 + i) on ports that follow --base-port, as the banner says; each node warms up first, its helper threads at their priority', async () => {
  const base = await freeBasePort();
  // As `npm start` runs it: with the warm-up (warm-up.ts), which every node reports before it serves.
  const { lines, pid } = startCluster(['--base-port', String(base)], [], {});
  // While the nodes warm up, V8's helper threads keep their priority (they compile the
  // warm-up's code); they go to SCHED_IDLE after it (helper-threads.ts). Samples from up to
  // a second before the first node says it warmed up are surely from during the warm-ups.
  const samples: Array<{ at: number; nodes: Array<{ idle: number; mainIdle: boolean }> }> = [];
  let firstWarmedAt = 0;
  const deadline = Date.now() + 50_000;
  while (firstWarmedAt === 0 && Date.now() < deadline) {
    try {
      samples.push({ at: Date.now(), nodes: nodeThreadPolicies(pid) });
    } catch {
      // a node process starting or a thread ending between the listing and the read
    }
    if (lines.some((l) => l.includes('"msg":"warmed up before serving"'))) firstWarmedAt = Date.now();
    else if (lines.some((l) => l.startsWith(EXITED) || l.includes('warm-up skipped'))) throw new Error(`no warm-up; output:\n${lines.join('\n')}`);
    else await new Promise((r) => setTimeout(r, 50));
  }
  const warming = samples.filter((sample) => sample.at < firstWarmedAt - 1000 && sample.nodes.length === NODES);
  expect(warming.length).toBeGreaterThan(0);
  for (const sample of warming) expect(sample.nodes.map((node) => node.idle)).toEqual([0, 0, 0]);
  const expected = Array.from({ length: NODES }, (_, i) => ({
    grpc: `127.0.0.1:${base + i}`,
    peers: `127.0.0.1:${base + 1000 + i}`,
    metrics: `http://127.0.0.1:${base + 2100 + i}/metrics`,
  }));
  expect(await until('banner', lines, () => bannerNodes(lines))).toEqual(expected);
  for (const { metrics } of expected) {
    const text = await until(`an answer from ${metrics}`, lines, async () => {
      const response = await fetch(metrics);
      return response.ok ? response.text() : undefined;
    });
    expect(text).toMatch(/^quorumq_wal_flushes_total /m);
  }
  // stdout is a pipe: the nodes' log lines come through as the JSON lines they wrote.
  const serving = await until('"node serving" from every node', lines, () => {
    const found = lines.filter((l) => l.includes('"msg":"node serving"'));
    return found.length === NODES ? found : undefined;
  });
  expect(serving.map((l) => (JSON.parse(l) as { node: string }).node).sort()).toEqual(['n1', 'n2', 'n3']);
  const warmed = lines.filter((l) => l.includes('"msg":"warmed up before serving"')).map((l) => JSON.parse(l) as { node: string; cpuMs: number });
  expect(warmed.map((w) => w.node).sort()).toEqual(['n1', 'n2', 'n3']);
  for (const w of warmed) expect(w.cpuMs).toBeGreaterThan(0);
  expect(lines.filter((l) => l.includes('warm-up skipped'))).toEqual([]);
  // Serving, each node's V8 helper threads are idle, its main thread is not.
  for (const node of nodeThreadPolicies(pid)) {
    expect(node.mainIdle).toBe(false);
    expect(node.idle).toBeGreaterThan(0);
  }
  const logLines = lines.slice(lines.findIndex((l) => l.startsWith('Ctrl-C')) + 1);
  for (const line of logLines.filter((l) => !l.startsWith('stderr: '))) expect(() => JSON.parse(line), line).not.toThrow();
}, 110_000);

it('starts its nodes with the local node flags (NODE_PROCESS_FLAGS and a V8 pool for the machine); a flag of the same name given to it wins', async () => {
  const base = await freeBasePort();
  const { lines, pid } = startCluster(['--base-port', String(base), '--nodes', '1'], ['--initial-old-space-size=300']);
  await until('"node serving"', lines, () => lines.find((l) => l.includes('"msg":"node serving"')));
  const children = readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean);
  expect(children).toHaveLength(1);
  const argv = readFileSync(`/proc/${children[0]}/cmdline`, 'utf8').split('\0');
  const flags = argv.slice(1, argv.indexOf(CLI_MAIN));
  expect(flags).toEqual(['--initial-old-space-size=300', ...localNodeFlags().filter((flag) => !flag.startsWith('--initial-old-space-size='))]);
});

it('prints readable log lines, prefixed with the node, with --log-format pretty (what a terminal gets)', async () => {
  const base = await freeBasePort();
  const { lines } = startCluster(['--base-port', String(base), '--nodes', '1', '--log-format', 'pretty']);
  const plain = (): string[] => lines.map((l) => l.replace(/\x1b\[[0-9;]*m/g, ''));
  const serving = await until('"node serving"', lines, () => plain().find((l) => l.includes('node serving')));
  expect(serving).toMatch(/^n1 \| \[\d\d:\d\d:\d\d\.\d{3}\] INFO: node serving \{"metadataLeader":"n1"\}$/);
  expect(plain().some((l) => l.startsWith('{'))).toBe(false);
});

it('takes the first metrics port from --metrics-port', async () => {
  const base = await freeBasePort();
  const metricsPort = await freePort();
  const { lines } = startCluster(['--base-port', String(base), '--metrics-port', String(metricsPort), '--nodes', '1']);
  expect(await until('banner', lines, () => lines.find((l) => l.startsWith('  n1  grpc ')))).toContain(`metrics http://127.0.0.1:${metricsPort}/metrics`);
  const text = await until(`an answer from ${metricsPort}`, lines, async () => {
    const response = await fetch(`http://127.0.0.1:${metricsPort}/metrics`);
    return response.ok ? response.text() : undefined;
  });
  expect(text).toMatch(/^quorumq_wal_flushes_total /m);
});

it('refuses a base port that leaves no room for every node', async () => {
  const { lines, exit } = startCluster(['--base-port', '65534']);
  expect(await exit).toBe(2);
  expect(lines.join('\n')).toContain('--base-port 65534 leaves no room for 3 ports');
});
