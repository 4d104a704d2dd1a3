// Measures three defects of a new user's (issue 12) against the build in REPO (default: the
// current directory), on a fresh three-node LocalCluster:
//   - a consumer (prefetch 0) that stops reading while 100 MB are published: the leader's RSS
//     growth, beside the growth for the same 100 MB with no consumer (the bodies the replica holds);
//   - a follower forwarding one-in-flight publishes (with a producer id) while the queue's
//     leader is paused (SIGSTOP) for 5 s: the longest gap between two confirms;
//   - one PublishBatch of 1,000,000 tiny publishes: the node's peak RSS and its answer.
// Usage: npm run build && node packages/cli/bench/defects.mjs [REPO]
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
const repo = resolve(process.argv[2] ?? '.');
const { LocalCluster } = await import(`${repo}/packages/cli/dist/index.js`);
const { connect } = await import(`${repo}/packages/client/dist/index.js`);
const { BrokerService, quorumq } = await import(`${repo}/packages/proto/generated/index.js`);
const grpc = await import(`${repo}/node_modules/@grpc/grpc-js/build/src/index.js`);
const pb = quorumq.v1;
const rssMb = (pid) => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))[1]) / 1024;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const cluster = await LocalCluster.start({ env: { QUORUMQ_DISK_FREE_LIMIT_BYTES: '1048576' } });
const client = connect({ nodes: cluster.addresses });
const pidOf = (id) => cluster.node(id).process.pid;
const leaderOf = async (q) => { for (;;) { const s = await client.queueStatus(q).catch(() => null); if (s?.leader) return s.leader; await sleep(100); } };
const Raw = grpc.makeGenericClientConstructor(BrokerService, 'Broker');
const out = {};
try {
  // Control for item 15: 100 MB published to a queue nobody consumes (the replica holds the bodies).
  await client.declareQueue('idle');
  const idleLeader = await leaderOf('idle');
  {
    const before = rssMb(pidOf(idleLeader));
    const publisher = client.createPublisher({ maxInFlight: 32, producerId: 'm15c' });
    const body = Buffer.alloc(100_000, 1);
    await Promise.all(Array.from({ length: 1000 }, () => publisher.publish('idle', body)));
    await publisher.close();
    await sleep(3000);
    out.item15control = { leader: idleLeader, addedMb: Math.round(rssMb(pidOf(idleLeader)) - before) };
    await client.purgeQueue('idle').catch(() => {});
  }
  // Item 15: a consumer (prefetch 0) that stops reading; 100 MB published.
  await client.declareQueue('slow');
  const leader = await leaderOf('slow');
  const address = cluster.node(leader).address;
  const raw = new Raw(address, grpc.credentials.createInsecure(), { 'grpc.max_receive_message_length': -1 });
  const call = raw.consume();
  call.on('error', (e) => { out.slowConsumerError = e.details ?? String(e); });
  call.on('data', () => {});
  call.write({ subscribe: { queue: 'slow', prefetch: 0 } });
  await sleep(500);
  call.pause();
  await sleep(500);
  const before = rssMb(pidOf(leader));
  const publisher = client.createPublisher({ maxInFlight: 32, producerId: 'm15' });
  const body = Buffer.alloc(100_000, 1);
  await Promise.all(Array.from({ length: 1000 }, () => publisher.publish('slow', body)));
  await publisher.close();
  await sleep(3000);
  const after = rssMb(pidOf(leader));
  out.item15 = { leaderRssBeforeMb: Math.round(before), leaderRssAfterMb: Math.round(after), addedMb: Math.round(after - before), status: await client.queueStatus('slow').then((s) => ({ ready: s.ready, unacked: s.unacked })) };
  call.cancel();
  raw.close();

  // Item 14: a follower forwards while the leader is paused for 5 s.
  await client.declareQueue('pausing');
  const pl = await leaderOf('pausing');
  const via = cluster.nodes.find((n) => n.id !== pl);
  const viaClient = connect({ nodes: [via.address], leaderRouting: false });
  const p = viaClient.createPublisher({ producerId: 'm14', maxInFlight: 1 });
  await p.publish('pausing', 'warm');
  await sleep(2500); // past the preferred-leader hand-off
  const pausedLeader = await leaderOf('pausing');
  out.item14paused = pausedLeader === via.id ? 'the via node leads now: measurement void' : pausedLeader;
  let stop = false; let lastConfirm = Date.now(); let maxGap = 0; let confirmed = 0; let failed = 0;
  const loop = (async () => { while (!stop) { try { await p.publish('pausing', 'x'); confirmed++; const now = Date.now(); maxGap = Math.max(maxGap, now - lastConfirm); lastConfirm = now; } catch { failed++; } } })();
  await sleep(1000);
  cluster.pause(pausedLeader);
  await sleep(5000);
  cluster.resume(pausedLeader);
  await sleep(2000);
  stop = true; await loop; await p.close(); await viaClient.close();
  out.item14 = { longestGapBetweenConfirmsMs: maxGap, confirmed, failed };

  // Item 5: one PublishBatch of 1,000,000 tiny publishes.
  await client.declareQueue('tiny');
  const target = cluster.nodes[0];
  const bytes = Buffer.from(pb.PublishBatch.encode({ publishes: Array.from({ length: 1_000_000 }, (_, i) => ({ exchange: '', publishId: i, message: { routingKey: 'tiny', body: Buffer.from('x') } })) }).finish());
  const raw5 = new Raw(target.address, grpc.credentials.createInsecure(), { 'grpc.max_send_message_length': -1, 'grpc.max_receive_message_length': -1 });
  const base = rssMb(target.process.pid);
  let peak = base;
  const sampler = setInterval(() => { try { peak = Math.max(peak, rssMb(target.process.pid)); } catch {} }, 20);
  const started = Date.now();
  const result = await new Promise((resolve) => {
    const s = raw5.makeBidiStreamRequest(BrokerService.publishStream.path, (b) => b, (b) => b, new grpc.Metadata());
    let outcomes = 0;
    const timer = setTimeout(() => { s.cancel(); resolve({ status: 'no answer in 60 s', outcomes }); }, 60_000);
    s.on('data', () => { outcomes++; });
    s.on('error', (e) => { clearTimeout(timer); resolve({ status: `${grpc.status[e.code]} ${e.details}`, outcomes }); });
    s.on('end', () => { clearTimeout(timer); resolve({ status: 'OK', outcomes }); });
    s.write(bytes);
    s.end();
  });
  clearInterval(sampler);
  out.item5 = { requestMb: Math.round(bytes.length / 1e6), nodeRssBeforeMb: Math.round(base), nodeRssPeakMb: Math.round(peak), answeredAfterMs: Date.now() - started, ...result, nodeStillServes: (await client.publish('', 'tiny', 'after').then((r) => r.outcome).catch((e) => String(e))) };
  raw5.close();
} finally {
  console.log(JSON.stringify(out, null, 1));
  await client.close();
  await cluster.close();
}
