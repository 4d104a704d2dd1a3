/**
 * `npm run bench:catch-up`: a follower that missed a backlog catches up by snapshot. Three
 * local node processes (loopback), one queue: one follower is killed (kill -9), `--messages`
 * (default 2,000,000) x `--bodies` (1 KiB) are published through the other two with confirms,
 * then the follower starts again. It needs a snapshot (the leader's log was compacted long
 * before), gets the leader's snapshot of references and fetches the messages' bytes from the
 * leader into its own store (see the server's snapshot-bodies.ts). Printed: the time from its
 * start until its store holds every message, and each node's peak resident memory (RSS, from
 * /proc) during the catch-up against the backlog's bytes.
 */
import { LocalCluster } from '@quorumq/cli';
import { connect } from '@quorumq/client';
import { readFileSync } from 'node:fs';

const args = new Map<string, string>();
for (let i = 2; i < process.argv.length; i += 2) args.set(process.argv[i]?.replace(/^--/, '') ?? '', process.argv[i + 1] ?? '');
const MESSAGES = Number(args.get('messages') ?? 2_000_000);
const BODY = Buffer.alloc(Number(args.get('bodies') ?? 1024), 0x62);
const IN_FLIGHT = 256;
const QUEUE = 'catch-up';

const mb = (bytes: number): string => `${(bytes / 1024 / 1024).toFixed(0)} MB`;

function rssOf(pid: number | undefined): number {
  if (pid === undefined) return 0;
  try {
    const line = readFileSync(`/proc/${pid}/status`, 'utf8').split('\n').find((l) => l.startsWith('VmRSS:'));
    return Number(line?.split(/\s+/)[1] ?? 0) * 1024;
  } catch {
    return 0;
  }
}

/** The value of an unlabelled series in a node's /metrics, or NaN. */
async function metric(address: string | undefined, name: string): Promise<number> {
  if (address === undefined) return Number.NaN;
  const text = await fetch(`http://${address}/metrics`).then(
    (r) => r.text(),
    () => '',
  );
  const line = text.split('\n').find((l) => l.startsWith(`${name} `));
  return line === undefined ? Number.NaN : Number(line.slice(line.lastIndexOf(' ') + 1));
}

async function main(): Promise<void> {
  const cluster = await LocalCluster.start({ metrics: true, env: { QUORUMQ_LOG_LEVEL: 'info', QUORUMQ_DISK_FREE_LIMIT_BYTES: '1048576' } });
  const rows: string[] = [];
  const report = (row: string): void => {
    rows.push(row);
    process.stderr.write(`${row}\n`);
  };
  try {
    const admin = connect({ nodes: cluster.addresses });
    await admin.declareQueue(QUEUE, { deliveryLimit: -1 });
    let leader = '';
    for (let i = 0; i < 100 && leader === ''; i++) {
      leader = (await admin.queueStatus(QUEUE)).leader;
      if (leader === '') await new Promise((resolve) => setTimeout(resolve, 100));
    }
    await admin.close();
    const follower = cluster.nodes.find((n) => n.id !== leader)!;
    await cluster.kill(follower.id);
    const others = cluster.nodes.filter((n) => n.id !== follower.id);
    const client = connect({ nodes: others.map((n) => n.address) });
    const publisher = client.createPublisher({ maxInFlight: IN_FLIGHT, producerId: 'catch-up-bench' });
    const started = performance.now();
    const pending = new Set<Promise<unknown>>();
    for (let i = 0; i < MESSAGES; i++) {
      const p: Promise<unknown> = publisher.publish(QUEUE, BODY).then((r) => {
        if (r.outcome !== 'confirmed' && r.outcome !== 'duplicate') throw new Error(`publish ${r.outcome}`);
      });
      pending.add(p);
      void p.finally(() => pending.delete(p));
      if (pending.size >= IN_FLIGHT) await Promise.race(pending);
      if (i > 0 && i % 250_000 === 0) process.stderr.write(`published ${i}\n`);
    }
    await Promise.all(pending);
    await publisher.close();
    await client.close();
    report(`published while ${follower.id} was down     ${MESSAGES} x ${BODY.length} B = ${mb(MESSAGES * BODY.length)} in ${((performance.now() - started) / 1000).toFixed(0)} s`);
    await new Promise((resolve) => setTimeout(resolve, 5000));

    const catchUp = performance.now();
    cluster.startNode(follower.id);
    const peak = new Map(cluster.nodes.map((n) => [n.id, 0]));
    const sampler = setInterval(() => {
      for (const node of cluster.nodes) peak.set(node.id, Math.max(peak.get(node.id) ?? 0, rssOf(node.process?.pid)));
    }, 250);
    // Caught up: a snapshot installed, and every message in the store but the last few MiB a
    // replica holds as views of its log entries before it stores them (HOLD_BYTES_MAX).
    const held = Math.ceil((4 * 1024 * 1024) / BODY.length) + 1;
    let records = 0;
    let installed = 0;
    const deadline = catchUp + 30 * 60_000;
    while (performance.now() < deadline) {
      records = await metric(follower.metricsAddress ?? undefined, 'quorumq_message_store_records');
      installed = await metric(follower.metricsAddress ?? undefined, 'quorumq_snapshots_installed_total');
      if (installed >= 1 && records + held >= MESSAGES) break;
      await new Promise((resolve) => setTimeout(resolve, 500));
    }
    clearInterval(sampler);
    const seconds = (performance.now() - catchUp) / 1000;
    report(`${follower.id} start -> snapshot installed, backlog in its store  ${seconds.toFixed(1)} s (${records} records, ${installed} snapshot(s) installed, ${(MESSAGES / seconds).toFixed(0)} msg/s, ${mb((MESSAGES * BODY.length) / seconds)}/s)`);
    for (const node of cluster.nodes) {
      const role = node.id === follower.id ? 'follower catching up' : node.id === leader ? 'leader' : 'other follower';
      report(`peak RSS during the catch-up, ${node.id} (${role})`.padEnd(52) + mb(peak.get(node.id) ?? 0));
    }
    // The follower's log says what its snapshot preparation fetched and how long it took.
    for (const text of follower.output.split('\n').filter((l) => l.includes('fetched what the snapshot'))) {
      try {
        const entry = JSON.parse(text) as { ms?: number; listed?: number; fetched?: number; fetchedBytes?: number };
        report(`  its preparation: ${entry.listed} listed, ${entry.fetched} fetched (${mb(entry.fetchedBytes ?? 0)}) in ${((entry.ms ?? 0) / 1000).toFixed(1)} s`);
      } catch {
        report(`  ${text.slice(0, 200)}`);
      }
    }
    if (installed < 1 || records + held < MESSAGES) throw new Error(`${follower.id} installed ${installed} snapshots and holds ${records} of ${MESSAGES} messages after 30 minutes`);
  } finally {
    await cluster.close();
  }
  console.log(`\nquorumq catch-up bench: 3 local nodes, one queue, ${MESSAGES} x ${BODY.length} B published while a follower was down`);
  for (const row of rows) console.log(row);
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
