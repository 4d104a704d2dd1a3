/**
 * The metrics of real nodes: the leader of a queue reports its messages by state
 * (quorumq_queue_messages, computed when /metrics is scraped), its followers do not, and a
 * deleted queue's series go; a known workload's per-queue and Raft series on the leader; the
 * follower lag the leader sees while a follower is down.
 */
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, expect, it, vi } from 'vitest';
import { parse as parseYaml } from 'yaml';

import { TestCluster } from './cluster.js';

let cluster: TestCluster;

beforeAll(async () => {
  cluster = await TestCluster.start({ metrics: true });
});

afterAll(async () => {
  await cluster?.close();
});

async function scrape(id: string): Promise<string> {
  const address = cluster.nodes.find((n) => n.id === id)?.metricsAddress;
  if (address == null) throw new Error(`${id} serves no metrics`);
  return (await fetch(`http://${address}/metrics`)).text();
}

/** The value of one series, or null when the node does not report it. */
function series(text: string, name: string, labels: string): number | null {
  const line = text.split('\n').find((l) => l.startsWith(`${name}{${labels}} `));
  return line === undefined ? null : Number(line.slice(line.lastIndexOf(' ') + 1));
}

it("a queue's leader reports its ready and unacked messages; followers do not; deletion removes the series", async () => {
  const client = cluster.client();
  await client.declareQueue('depth');
  for (const body of ['a', 'b', 'c']) await client.publish('', 'depth', body);
  const held = await client.get('depth', { manualAck: true });
  expect(held).not.toBeNull();
  const leader = await cluster.leaderOf('depth', client);

  const text = await scrape(leader);
  expect(series(text, 'quorumq_queue_messages', 'queue="depth",state="ready"')).toBe(2);
  expect(series(text, 'quorumq_queue_messages', 'queue="depth",state="unacked"')).toBe(1);
  expect(series(text, 'quorumq_queue_messages', 'queue="depth",state="delayed"')).toBe(0);
  expect(series(text, 'quorumq_messages', 'state="ready"')).toBeGreaterThanOrEqual(2);
  for (const follower of cluster.nodes.map((n) => n.id).filter((id) => id !== leader)) {
    expect(await scrape(follower)).not.toContain('queue="depth"');
  }

  // Applied on the leader by the time the call returns, or very soon after (the replica is
  // removed when the node reconciles with the metadata).
  const settled = { timeout: 10_000, interval: 100 };
  await held?.ack();
  await vi.waitFor(async () => expect(series(await scrape(leader), 'quorumq_queue_messages', 'queue="depth",state="unacked"')).toBe(0), settled);
  await client.deleteQueue('depth');
  await vi.waitFor(async () => expect(await scrape(leader)).not.toContain('queue="depth"'), settled);
});

const settled = { timeout: 15_000, interval: 100 };

/** Every series of a scrape, keyed by name and labels as printed (`name{a="x"}`). */
function parse(text: string): Map<string, number> {
  const values = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const space = line.lastIndexOf(' ');
    values.set(line.slice(0, space), Number(line.slice(space + 1)));
  }
  return values;
}

it('a known workload: the leader reports the per-queue counts and counters and the Raft series; every node the metadata group', async () => {
  const client = cluster.client();
  await client.declareExchange('work.dlx', 'fanout');
  await client.declareQueue('work.dlq');
  await client.bind({ source: 'work.dlx', queue: 'work.dlq' });
  await client.declareQueue('work', { deadLetterExchange: 'work.dlx' });
  const body = (i: number): string => `message-${String(i).padStart(4, '0')}`; // 12 bytes each
  const consumed = 12;
  const rejected = 3;
  for (let i = 0; i < consumed + rejected; i++) await client.publish('', 'work', body(i));

  // Consume them all, one at a time (prefetch 1: nothing is pushed beyond what is handled):
  // the first 12 acked, the last 3 rejected (dead-lettered to work.dlq).
  const leader = await cluster.leaderOf('work', client);
  const consumer = client.consume('work', { prefetch: 1 });
  let handled = 0;
  for await (const delivery of consumer) {
    if (handled === 0) expect(series(await scrape(leader), 'quorumq_queue_consumers', 'queue="work"')).toBe(1);
    if (handled < consumed) await delivery.ack();
    else await delivery.reject();
    handled += 1;
    if (handled === consumed + rejected) break;
  }
  await consumer.close();
  const ready = 5;
  for (let i = 0; i < ready; i++) await client.publish('', 'work', body(100 + i));
  expect(await cluster.leaderOf('work', client)).toBe(leader);

  await vi.waitFor(async () => {
    const values = parse(await scrape(leader));
    const q = (name: string, labels = ''): number | undefined => values.get(`${name}{queue="work"${labels}}`);
    expect(q('quorumq_queue_messages', ',state="ready"')).toBe(ready);
    expect(q('quorumq_queue_messages', ',state="unacked"')).toBe(0);
    expect(q('quorumq_queue_messages', ',state="dead_lettering"')).toBe(0);
    expect(q('quorumq_queue_ready_bytes')).toBe(ready * 12);
    expect(q('quorumq_queue_consumers')).toBe(0);
    expect(q('quorumq_queue_enqueued_total')).toBe(consumed + rejected + ready);
    expect(q('quorumq_queue_acked_total')).toBe(consumed);
    expect(q('quorumq_queue_deliveries_total')).toBe(consumed + rejected);
    expect(q('quorumq_queue_dead_lettered_total', ',reason="rejected"')).toBe(rejected);
    // The queue's group, as its leader sees it: settled, both followers caught up.
    const g = (name: string, labels = ''): number | undefined => values.get(`${name}{group="work",kind="queue"${labels}}`);
    expect(g('quorumq_raft_leader')).toBe(1);
    expect(g('quorumq_raft_term')).toBeGreaterThanOrEqual(1);
    const last = g('quorumq_raft_last_index')!;
    // At least one entry per publish and per settle (each was awaited alone), plus the leader's no-op.
    expect(last).toBeGreaterThan(2 * (consumed + rejected) + ready);
    expect(g('quorumq_raft_commit_index')).toBe(last);
    expect(g('quorumq_raft_applied_index')).toBe(last);
    expect(g('quorumq_raft_snapshot_index')).toBeLessThanOrEqual(last);
    for (const peer of cluster.nodes.map((n) => n.id).filter((id) => id !== leader)) expect(g('quorumq_raft_follower_lag', `,peer="${peer}"`)).toBe(0);
    expect(g('quorumq_raft_elections_started_total')).toBeGreaterThanOrEqual(1);
    expect(g('quorumq_raft_leader_changes_total')).toBeGreaterThanOrEqual(1);
  }, settled);

  // The dead-letter queue (perhaps led elsewhere) stored the three rejected messages.
  const dlqLeader = await cluster.leaderOf('work.dlq', client);
  await vi.waitFor(async () => {
    const text = await scrape(dlqLeader);
    expect(series(text, 'quorumq_queue_enqueued_total', 'queue="work.dlq"')).toBe(rejected);
    expect(series(text, 'quorumq_queue_messages', 'queue="work.dlq",state="ready"')).toBe(rejected);
  }, settled);

  // Followers report neither the queue nor its group; every node reports the metadata group,
  // exactly one as its leader, all at the same commit index once settled.
  await vi.waitFor(async () => {
    const scrapes = await Promise.all(cluster.nodes.map(async (n) => ({ id: n.id, values: parse(await scrape(n.id)) })));
    const m = (values: Map<string, number>, name: string): number | undefined => values.get(`${name}{group="metadata",kind="metadata"}`);
    expect(scrapes.map(({ values }) => m(values, 'quorumq_raft_leader')).sort()).toEqual([0, 0, 1]);
    const commits = new Set(scrapes.map(({ values }) => m(values, 'quorumq_raft_commit_index')));
    expect(commits.size).toBe(1);
    for (const { id, values } of scrapes) {
      expect(m(values, 'quorumq_raft_applied_index')).toBe(m(values, 'quorumq_raft_commit_index'));
      expect(m(values, 'quorumq_raft_term')).toBeGreaterThanOrEqual(1);
      expect(m(values, 'quorumq_raft_leader_changes_total')).toBeGreaterThanOrEqual(1);
      expect(values.get(`quorumq_build_info{version="0.1.0",node="${id}"}`)).toBe(1);
      expect(values.get('quorumq_wal_segments')).toBeGreaterThanOrEqual(1);
      expect(values.get('quorumq_wal_disk_bytes')).toBeGreaterThan(0);
      expect(values.get('quorumq_disk_free_bytes')).toBeGreaterThan(0);
      expect(values.get('quorumq_raft_groups{state="leaderless"}')).toBe(0);
      if (id !== leader) expect([...values.keys()].some((key) => key.includes('"work"'))).toBe(false);
    }
  }, settled);
});

/** The shipped dashboard and alerting rules (cluster/grafana, cluster/prometheus). */
const repoFile = (path: string): string => readFileSync(new URL(`../../../${path}`, import.meta.url), 'utf8');

/** Every PromQL expression in the Grafana dashboard: its panels' targets and its variables' queries. */
function dashboardExpressions(): string[] {
  const dashboard = JSON.parse(repoFile('cluster/grafana/quorumq-dashboard.json')) as {
    panels: Array<{ type: string; targets?: Array<{ expr: string }> }>;
    templating: { list: Array<{ type: string; query: unknown }> };
  };
  const exprs = dashboard.panels.flatMap((panel) => (panel.targets ?? []).map((target) => target.expr));
  for (const variable of dashboard.templating.list) {
    if (variable.type === 'query') exprs.push((variable.query as { query: string }).query);
  }
  return exprs;
}

interface AlertRule {
  alert: string;
  expr: string;
  for?: string;
  labels: { severity: string };
  annotations: { summary: string };
}

function alertRules(): AlertRule[] {
  const file = parseYaml(repoFile('cluster/prometheus/alerts.yml')) as { groups: Array<{ name: string; rules: AlertRule[] }> };
  return file.groups.flatMap((group) => group.rules);
}

/** The quorumq_*, process_* and nodejs_* names an expression uses, with the label names of its selectors (job and instance are Prometheus's). */
function namesIn(expr: string): Array<{ name: string; labels: string[] }> {
  const used: Array<{ name: string; labels: string[] }> = [];
  for (const match of expr.matchAll(/\b((?:quorumq|process|nodejs)_[a-zA-Z0-9_]*)(\{[^}]*\})?/g)) {
    const labels = [...(match[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)/g)].map((m) => m[1]!).filter((l) => l !== 'job' && l !== 'instance');
    used.push({ name: match[1]!, labels });
  }
  return used;
}

it('every metric the Grafana dashboard and the alerting rules use is served by a node, with the labels they select on', async () => {
  const client = cluster.client();
  const text = await scrape(await cluster.leaderOf('work', client));
  // Names: declared families (a labelled counter not yet counted has no sample, only its
  // HELP and TYPE), with a histogram's series; label names: from the samples.
  const known = new Set<string>();
  for (const [, name, type] of text.matchAll(/^# TYPE (\S+) (\S+)$/gm)) {
    known.add(name!);
    if (type === 'histogram') for (const suffix of ['_bucket', '_sum', '_count']) known.add(name! + suffix);
  }
  const labelsOf = new Map<string, Set<string>>();
  for (const [, name, labels] of text.matchAll(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? \S+$/gm)) {
    const set = labelsOf.get(name!) ?? new Set<string>();
    for (const [, label] of (labels ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="/g)) set.add(label!);
    labelsOf.set(name!, set);
  }

  const rules = alertRules();
  expect(rules.map((rule) => rule.alert)).toEqual(
    expect.arrayContaining(['QuorumqNodeDown', 'QuorumqNoQuorum', 'QuorumqNoMetadataLeader', 'QuorumqFollowerLagging', 'QuorumqDiskAlarm', 'QuorumqMemoryAlarm']),
  );
  for (const rule of rules) {
    expect(typeof rule.expr, rule.alert).toBe('string');
    expect(['critical', 'warning'], rule.alert).toContain(rule.labels.severity);
    expect(rule.annotations.summary, rule.alert).not.toBe('');
  }
  const sources = [...dashboardExpressions().map((expr) => ({ from: 'dashboard', expr })), ...rules.map((rule) => ({ from: rule.alert, expr: rule.expr }))];
  const checked = new Set<string>();
  for (const { from, expr } of sources) {
    for (const { name, labels } of namesIn(expr)) {
      expect(known, `${from}: ${name} in ${expr}`).toContain(name);
      checked.add(name);
      const served = labelsOf.get(name);
      // A family with samples here: each label selected on is one of its labels.
      if (served !== undefined) for (const label of labels) expect(served, `${from}: ${name}{${label}} in ${expr}`).toContain(label);
    }
  }
  // The check covered all three kinds of names, and the new series.
  for (const name of ['quorumq_queue_enqueued_total', 'quorumq_raft_follower_lag', 'quorumq_raft_leader', 'quorumq_disk_free_bytes', 'process_resident_memory_bytes', 'nodejs_eventloop_lag_p99_seconds']) {
    expect(checked).toContain(name);
  }

  // The example scrape configuration names the job the rules and the dashboard select, and loads the rules.
  const prometheus = parseYaml(repoFile('cluster/prometheus/prometheus.yml')) as { rule_files: string[]; scrape_configs: Array<{ job_name: string }> };
  expect(prometheus.rule_files).toContain('alerts.yml');
  expect(prometheus.scrape_configs.map((c) => c.job_name)).toContain('quorumq');
});

it("the leader's follower lag grows with the entries a stopped follower misses, and returns to 0 once it is back", async () => {
  const client = cluster.client();
  await client.declareQueue('lagging');
  await client.publish('', 'lagging', 'first');
  const leader = await cluster.leaderOf('lagging', client);
  const follower = cluster.nodes.map((n) => n.id).find((id) => id !== leader)!;
  const lagOf = (values: Map<string, number>): number | undefined => values.get(`quorumq_raft_follower_lag{group="lagging",kind="queue",peer="${follower}"}`);
  const lastOf = (values: Map<string, number>): number => values.get('quorumq_raft_last_index{group="lagging",kind="queue"}')!;
  let lastBefore = 0;
  await vi.waitFor(async () => {
    const values = parse(await scrape(leader));
    expect(lagOf(values)).toBe(0);
    lastBefore = lastOf(values);
  }, settled);

  await cluster.kill(follower);
  const missed = 5;
  for (let i = 0; i < missed; i++) await client.publish('', 'lagging', `missed-${i}`);
  const values = parse(await scrape(leader));
  // The follower matched at least lastBefore, and has none of the entries since.
  expect(lagOf(values)).toBeGreaterThanOrEqual(missed);
  expect(lagOf(values)).toBeLessThanOrEqual(lastOf(values) - lastBefore);

  cluster.startNode(follower);
  await cluster.waitHealthy([follower]);
  await vi.waitFor(async () => expect(lagOf(parse(await scrape(leader)))).toBe(0), settled);
});
