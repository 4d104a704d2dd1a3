// The client side of cluster/compose-smoke.sh: a queue leader's container is killed during a
// stream of confirmed publishes; every confirmed message must still be consumed, none twice.
//
//   1. connect to the three published node ports, declare a fresh queue (3 replicas) and find
//      its leader (queueStatus), then reconnect with the leader's port first so that the
//      publisher's stream goes to the node that is about to die;
//   2. publish N unique values through one publisher with a producer id (paced, so publishing
//      goes on before, during and after the failover); after a share of them,
//      `docker kill` (SIGKILL) the container of the leader's compose service (node id nX is
//      service nX);
//   3. publishes that fail retriably (outcome unknown) are retried with the same producer id
//      and sequence, as the SDK README prescribes; once every publish has its outcome,
//      `docker start` the killed container again and wait until it is healthy and reachable;
//   4. consume the queue and compare: lost = confirmed values never consumed (must be 0),
//      duplicated = values consumed more than once (must be 0: the producer id lets the broker
//      drop the publisher's re-sends and the retries). Every publish must end up confirmed, and
//      some must be confirmed after the kill (else no failover was exercised).
//
// Prints one summary line; exit status 0 when the checks pass, 1 when one fails, 2 on a setup
// error (missing environment, no such container, docker failed).
//
// Run from the repository root against a running compose cluster (compose-smoke.sh does this):
//   QUORUMQ_SMOKE_ADDRESSES=127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103 \
//   QUORUMQ_COMPOSE_PROJECT=quorumq-smoke node cluster/compose-smoke-client.js
//
// Environment:
//   QUORUMQ_SMOKE_ADDRESSES   host:port of the nodes' published gRPC ports, comma separated (required)
//   QUORUMQ_COMPOSE_PROJECT   compose project of the cluster (else COMPOSE_PROJECT_NAME; required)
//   QUORUMQ_SMOKE_MESSAGES    values to publish (default 2000)
//   QUORUMQ_SMOKE_RATE        publishes per second (default 400: about 5 s of publishing)
//   QUORUMQ_SMOKE_KILL_AT     share of the values published before the kill (default 0.3)
//   QUORUMQ_SMOKE_TIMEOUT_S   the whole run gives up after this many seconds (default 300)
//   QUORUMQ_SMOKE_TLS_DIR     connect over TLS with this directory's ca.crt, client.crt and
//                             client.key (cluster/certs/client, which cluster/make-certs.sh
//                             makes; compose-smoke.sh sets it); plaintext when unset
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { connect } from '@quorumq/client';

const NAME = 'compose smoke client';
const log = (message) => console.log(`${NAME}: ${message}`);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const seconds = (ms) => `${(ms / 1000).toFixed(2)}s`;

class SetupError extends Error {}

function numberEnv(name, fallback, { min = 0, integer = false } = {}) {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isFinite(value) || value < min || (integer && !Number.isInteger(value))) {
    throw new SetupError(`${name}=${raw} is not a valid value`);
  }
  return value;
}

// The compose cluster serves clients over TLS (docker-compose.yml): the CA and a client certificate.
const tlsDir = process.env.QUORUMQ_SMOKE_TLS_DIR ?? '';
const tls = tlsDir === '' ? {} : { tls: { ca: join(tlsDir, 'ca.crt'), cert: join(tlsDir, 'client.crt'), key: join(tlsDir, 'client.key') } };

const addresses = (process.env.QUORUMQ_SMOKE_ADDRESSES ?? '')
  .split(',')
  .map((a) => a.trim())
  .filter((a) => a !== '');
// As compose normalises it for its labels: lower case, only [-_a-z0-9].
const project = (process.env.QUORUMQ_COMPOSE_PROJECT || process.env.COMPOSE_PROJECT_NAME || '')
  .toLowerCase()
  .replace(/[^-_a-z0-9]/g, '');

/** "reason: n, reason: n" of a list of reasons. */
function countBy(reasons) {
  const counts = new Map();
  for (const r of reasons) counts.set(r, (counts.get(r) ?? 0) + 1);
  return [...counts].map(([r, n]) => `${r}: ${n}`).join(', ');
}

/** Runs docker with arguments (no shell); resolves with its trimmed stdout. */
function docker(...args) {
  return new Promise((resolve, reject) => {
    execFile('docker', args, { timeout: 60_000 }, (error, stdout, stderr) => {
      if (error) reject(new SetupError(`docker ${args.join(' ')} failed: ${(stderr || error.message).trim()}`));
      else resolve(stdout.trim());
    });
  });
}

/** The container of compose service `service` in the project (running or not). */
async function containerOf(service) {
  const ids = (await docker(
    'ps', '-aq',
    '--filter', `label=com.docker.compose.project=${project}`,
    '--filter', `label=com.docker.compose.service=${service}`,
  )).split('\n').filter((id) => id !== '');
  if (ids.length !== 1) {
    throw new SetupError(`expected one container for service ${service} of compose project ${project}, found ${ids.length}`);
  }
  return ids[0];
}

/** The host address ("127.0.0.1:7102") published for the container's gRPC port 7001. */
async function publishedAddress(container) {
  const lines = (await docker('port', container, '7001/tcp')).split('\n');
  return lines.find((line) => line.startsWith('127.0.0.1:')) ?? lines[0];
}

/** Runs `attempt` until it does not fail retriably, for up to `ms`; logs each retry. */
async function retrying(what, attempt, ms = 30_000) {
  const deadline = Date.now() + ms;
  for (;;) {
    try {
      return await attempt();
    } catch (error) {
      if (error?.retriable !== true || Date.now() >= deadline) throw error;
      log(`${what}: ${error.code ?? ''} ${error.reason ?? ''} (${String(error.message).split(',')[0]}); retrying`);
      await sleep(500);
    }
  }
}

/** The queue's leader node id, asking until there is one (or `ms` pass). */
async function leaderOf(client, queue, { not = '', ms = 30_000 } = {}) {
  const deadline = Date.now() + ms;
  let last = '';
  for (;;) {
    try {
      const status = await client.queueStatus(queue);
      if (status.leader !== '' && status.leader !== not) return status;
      last = `leader "${status.leader}"`;
    } catch (error) {
      last = error instanceof Error ? error.message : String(error);
    }
    if (Date.now() >= deadline) throw new Error(`queue ${queue} has no leader${not ? ` other than ${not}` : ''} after ${seconds(ms)} (${last})`);
    await sleep(100);
  }
}

async function main() {
  if (addresses.length === 0) throw new SetupError('QUORUMQ_SMOKE_ADDRESSES is not set (host:port,host:port,...)');
  if (project === '') throw new SetupError('QUORUMQ_COMPOSE_PROJECT (or COMPOSE_PROJECT_NAME) is not set');
  const total = numberEnv('QUORUMQ_SMOKE_MESSAGES', 2000, { min: 10, integer: true });
  const rate = numberEnv('QUORUMQ_SMOKE_RATE', 400, { min: 1 });
  const killShare = numberEnv('QUORUMQ_SMOKE_KILL_AT', 0.3, { min: 0 });
  if (killShare >= 1) throw new SetupError('QUORUMQ_SMOKE_KILL_AT must be below 1');
  const killAt = Math.floor(total * killShare);

  // The nodes advertise their published host ports (docker-compose.yml), so leader routing
  // would work from here; it stays off so that this test exercises the other path: consume
  // and queue status proxied to the leader by whichever node answers, publishes forwarded.
  const clientOptions = { failoverTimeoutMs: 30_000, callTimeoutMs: 5_000, leaderRouting: false, ...tls };
  const runId = `${Date.now().toString(36)}${process.pid.toString(36)}`;
  const queue = `compose-smoke-${runId}`;

  // --- 1. queue, leader, and a client whose first node is the leader ---------------------
  let client = connect({ nodes: addresses, ...clientOptions });
  // Healthy nodes may still be settling (peer streams, the metadata leader): a declare is
  // idempotent, so retriable failures are retried for a while.
  const declared = await retrying('declare', () => client.declareQueue(queue, { replicas: 3 }));
  const initialLeader = (await leaderOf(client, queue)).leader;
  const leaderAddress = await publishedAddress(await containerOf(initialLeader));
  await client.close();
  const ordered = [leaderAddress, ...addresses.filter((a) => a !== leaderAddress)];
  client = connect({ nodes: ordered, ...clientOptions });
  log(`queue ${queue} (members ${declared.members.join(',')}), leader ${initialLeader} at ${leaderAddress}; ` +
    `publishing ${total} values at ${rate}/s, killing the leader's container (project ${project}) after ${killAt}`);

  // --- 2. publish, kill the leader part-way ------------------------------------------------
  // The publisher numbers its messages firstSequence, firstSequence + 1, ... in call order, so
  // value i has sequence firstSequence + i. A publish that fails retriably (e.g.
  // OUTCOME_UNKNOWN: the broker may or may not hold it) is retried as packages/client/README.md
  // says, with the same producer id and sequence, so that a message the broker already holds
  // comes back 'duplicate' instead of being enqueued twice. New publishes wait while retries
  // are pending: the broker's dedup remembers skipped sequences only within a reorder window
  // (1024) below the highest it has seen, so a retry must not fall too far behind.
  const producerId = `compose-smoke-${runId}`;
  const firstSequence = Date.now() * 1000;
  const maxInFlight = 256;
  const publisher = client.createPublisher({ maxInFlight, producerId, firstSequence });
  const confirmed = new Set();
  const unknown = []; // [i, error]: every publish that failed retriably
  const toRetry = []; // indexes of those not retried yet
  const refused = new Map(); // outcome or error reason -> count: not confirmed in the end
  const note = (reason) => refused.set(reason, (refused.get(reason) ?? 0) + 1);
  let retriedHeld = 0;
  let retriedNew = 0;
  const retryUnknown = async () => {
    while (toRetry.length > 0) {
      const i = toRetry.shift();
      const value = `${runId}:${i}`;
      const deadline = Date.now() + 30_000;
      for (;;) {
        try {
          const result = await client.publish('', queue, value, { producerId, sequence: firstSequence + i });
          if (result.outcome === 'duplicate') retriedHeld += 1;
          else if (result.outcome === 'confirmed') retriedNew += 1;
          else {
            note(`retry ${result.outcome}`);
            break;
          }
          confirmed.add(value);
          break;
        } catch (error) {
          if (error?.retriable !== true || Date.now() >= deadline) {
            note(`retry ${error?.reason || error?.code || 'error'}`);
            break;
          }
          await sleep(500);
        }
      }
    }
  };
  let lastConfirmAt = 0;
  let maxGap = 0;
  let victim; // the node id killed: the queue's leader when the kill was due
  let victimContainer;
  let killIssuedAt; // just before `docker kill`: the times below count from here
  let killedAt; // when `docker kill` returned: the node is gone
  let firstConfirmAfterKill; // ms after killIssuedAt
  let confirmedAfterKill = 0;
  let publishedAfterKill = 0;
  let kill;
  let election;
  const pending = [];
  const start = Date.now();
  for (let i = 0; i < total; i++) {
    const due = start + (i * 1000) / rate;
    if (due > Date.now()) await sleep(due - Date.now());
    // Backpressure here rather than inside the publisher, so that retries go first.
    while (publisher.inFlight >= maxInFlight && toRetry.length === 0) await sleep(2);
    if (toRetry.length > 0) await retryUnknown();
    if (i === killAt) {
      kill = (async () => {
        // The leader now (leadership can move by itself on a loaded machine).
        victim = (await leaderOf(client, queue)).leader;
        if (victim !== initialLeader) log(`the leader moved from ${initialLeader} to ${victim} before the kill`);
        victimContainer = await containerOf(victim);
        killIssuedAt = Date.now();
        await docker('kill', victimContainer);
        killedAt = Date.now();
        // Watch for the new leader while the publishes go on, with short deadlines.
        const watcher = connect({ nodes: addresses, callTimeoutMs: 1_000, failoverTimeoutMs: 2_000, leaderRouting: false, ...tls });
        election = leaderOf(watcher, queue, { not: victim })
          .then((status) => ({ leader: status.leader, after: Date.now() - killIssuedAt }))
          .finally(() => watcher.close());
      })();
    }
    if (killedAt !== undefined) publishedAfterKill += 1;
    const value = `${runId}:${i}`;
    pending.push(
      publisher.publish(queue, value).then(
        (result) => {
          if (result.outcome !== 'confirmed' && result.outcome !== 'duplicate') {
            note(result.outcome);
            return;
          }
          // 'duplicate' on a first send would mean the broker already had this sequence: it
          // holds the message either way.
          confirmed.add(value);
          const now = Date.now();
          if (lastConfirmAt !== 0) maxGap = Math.max(maxGap, now - lastConfirmAt);
          lastConfirmAt = now;
          if (killedAt !== undefined) {
            confirmedAfterKill += 1;
            firstConfirmAfterKill ??= now - killIssuedAt;
          }
        },
        (error) => {
          if (error?.retriable === true) {
            unknown.push([i, error]);
            toRetry.push(i);
          } else {
            note(error?.reason || error?.code || 'error');
          }
        },
      ),
    );
  }
  await kill;
  await Promise.all(pending);
  await publisher.close();
  await retryUnknown();
  const elected = await election;
  const publishMs = Date.now() - start;
  const unknownReasons = countBy(unknown.map(([, e]) => e.reason || e.code));
  log(`killed ${victim} (docker kill took ${seconds(killedAt - killIssuedAt)}); published ${total} in ${seconds(publishMs)}: ` +
    `${confirmed.size} confirmed (${confirmedAfterKill} after the kill), ` +
    `${unknown.length} failed retriably${unknown.length ? ` (${unknownReasons})` : ''}; ` +
    `new leader ${elected.leader} ${seconds(elected.after)} after the kill`);

  if (unknown.length > 0) {
    log(`retried ${unknown.length} with their producer id and sequence: ${retriedHeld} the broker already held (duplicate), ` +
      `${retriedNew} newly confirmed`);
  }

  // --- 3. the killed node comes back -----------------------------------------------------
  await docker('start', victimContainer);
  const restartedAt = Date.now();
  let health = '';
  while (health !== 'healthy' && Date.now() - restartedAt < 60_000) {
    health = await docker('inspect', '-f', '{{if .State.Health}}{{.State.Health.Status}}{{end}}', victimContainer).catch(() => '');
    if (health !== 'healthy') await sleep(500);
  }
  const healthyAfter = Date.now() - restartedAt;
  let rejoined = false;
  while (!rejoined && Date.now() - restartedAt < 90_000) {
    try {
      const cluster = await client.clusterStatus();
      rejoined = Object.values(cluster.nodes).length > 0 && Object.values(cluster.nodes).every((n) => n.reachable);
    } catch {
      // a node is still starting
    }
    if (!rejoined) await sleep(250);
  }
  log(`restarted ${victim}: ${health === 'healthy' ? `healthy after ${seconds(healthyAfter)}` : `not healthy after ${seconds(healthyAfter)} (${health || 'unknown'})`}, ` +
    `${rejoined ? `all nodes reachable after ${seconds(Date.now() - restartedAt)}` : 'not all nodes reachable after 90s'} (consuming either way)`);

  // --- 4. consume everything ---------------------------------------------------------------
  const before = await leaderOf(client, queue);
  const held = before.ready + before.unacked + before.delayed;
  log(`consuming: ${held} held by leader ${before.leader}`);
  const counts = new Map(); // value -> deliveries
  const seenAt = new Map(); // value -> consumer.resubscriptions at its first delivery
  let deliveries = 0;
  let redelivered = 0; // repeats after a consumer reconnection: at-least-once, not duplicates
  let repeats = 0; // repeats on the same consume stream: the queue held the value twice
  const consumer = client.consume(queue, { prefetch: 500 });
  const consumeStart = Date.now();
  let lastDeliveryAt = Date.now();
  const stopper = setInterval(() => {
    const idle = Date.now() - lastDeliveryAt;
    const allSeen = [...confirmed].every((v) => counts.has(v));
    // Every confirmed value seen and 2 s quiet, or 10 s quiet, or 120 s in all.
    if ((allSeen && idle > 2_000) || idle > 10_000 || Date.now() - consumeStart > 120_000) void consumer.cancel();
  }, 250);
  try {
    for await (const delivery of consumer) {
      lastDeliveryAt = Date.now();
      deliveries += 1;
      const value = delivery.body.toString();
      const n = (counts.get(value) ?? 0) + 1;
      counts.set(value, n);
      if (n === 1) seenAt.set(value, consumer.resubscriptions);
      else if (consumer.resubscriptions > seenAt.get(value)) redelivered += 1;
      else repeats += 1;
      await delivery.ack();
    }
  } finally {
    clearInterval(stopper);
  }
  const after = await client.queueStatus(queue).catch(() => undefined);

  // --- 5. verdict --------------------------------------------------------------------------
  const lost = [...confirmed].filter((v) => !counts.has(v));
  const foreign = [...counts.keys()].filter((v) => !v.startsWith(`${runId}:`)).length;
  // Enqueued twice: more messages in the queue than distinct values, or a value delivered
  // again on the same consume stream.
  const duplicated = Math.max(held - counts.size, repeats);
  const never = total - confirmed.size;
  const neverText = never === 0 ? '' : ` (${countBy([...refused].flatMap(([r, n]) => Array(n).fill(r)))})`;

  const problems = [];
  if (lost.length > 0) problems.push(`${lost.length} confirmed values never consumed, e.g. ${lost.slice(0, 5).join(' ')}`);
  if (duplicated > 0) {
    problems.push(`duplicates despite the producer id: the queue held ${held} messages for ${counts.size} distinct values, ` +
      `${repeats} values came twice on one consume stream`);
  }
  if (foreign > 0) problems.push(`${foreign} consumed bodies that this run did not publish`);
  if (publishedAfterKill === 0) problems.push('the kill took effect only after the last publish: no failover was exercised');
  else if (confirmedAfterKill === 0) problems.push('nothing was confirmed after the leader was killed');
  if (never > 0) problems.push(`${never} of ${total} publishes never confirmed, even retried${neverText}`);
  if (after !== undefined && after.ready + after.unacked > 0) problems.push(`${after.ready} ready / ${after.unacked} unacked left in the queue`);
  for (const problem of problems) log(`FAILED: ${problem}`);

  await client.close();
  console.log(
    `compose smoke: ${problems.length === 0 ? 'ok' : 'FAILED'}: published ${total}, confirmed ${confirmed.size}` +
      `${unknown.length ? ` (${unknown.length} only on retry, ${retriedHeld} of them already held)` : ''}, ` +
      `consumed ${counts.size}${redelivered ? ` (+${redelivered} redelivered after a consumer reconnection)` : ''}, ` +
      `lost ${lost.length}, duplicated ${duplicated}; ` +
      `failover: leader ${victim} killed, ${elected.leader} leads after ${seconds(elected.after)}, ` +
      `first confirm after the kill ${firstConfirmAfterKill === undefined ? 'none' : seconds(firstConfirmAfterKill)}, ` +
      `longest confirm gap ${seconds(maxGap)}`,
  );
  return problems.length === 0 ? 0 : 1;
}

const timeoutS = (() => {
  try {
    return numberEnv('QUORUMQ_SMOKE_TIMEOUT_S', 300, { min: 1 });
  } catch {
    return 300;
  }
})();
const watchdog = setTimeout(() => {
  log(`FAILED: gave up after ${timeoutS}s`);
  process.exit(1);
}, timeoutS * 1000);
watchdog.unref();

main().then(
  (code) => process.exit(code),
  (error) => {
    if (error instanceof SetupError) log(`setup error: ${error.message}`);
    else log(`FAILED: ${error instanceof Error ? error.stack ?? error.message : String(error)}`);
    process.exit(error instanceof SetupError ? 2 : 1);
  },
);
