/**
 * The docker-compose cluster as a nemesis target: the three containers of a running compose
 * project (docker-compose.yml, services n1, n2, n3), driven with the docker CLI.
 *
 *   kill      docker kill (SIGKILL) of the node's container; start: docker start (same volume)
 *   pause     docker pause (the cgroup freezer: every process of the container stops)
 *   isolate   docker network disconnect <project network> <container>: the node loses its
 *             only network, so it is cut off from both peers (a minority of one) and from
 *             the host's clients too (its published port is gone while it is disconnected)
 *   heal      docker network connect --alias <service> ... <network> <container>: the service
 *             alias is added back, so that the peers' name (n1, n2, n3) resolves again
 *
 * Clients on the host use the published gRPC ports (127.0.0.1:7101..7103). The nodes
 * advertise their compose-internal addresses (n1:7001), which do not resolve on the host, so
 * clients run with `leaderRouting: false`: every node proxies consume and status calls to the
 * queue's leader and forwards publishes, and a `quorumq-leader` hint that names n1:7001 fails
 * at once and the client moves on to the next configured node.
 *
 * The project itself (build, up, down -v) belongs to cluster/compose-chaos.sh; `close()` only
 * undoes pauses and disconnects.
 */
import { execFile } from 'node:child_process';

import { healthStatus, type UnexpectedExit } from '@quorumq/cli';

import type { FaultKind } from './schedule.js';
import type { ClientTuning, NemesisCluster } from './target.js';

/** Runs the docker CLI with `args` (no shell); resolves with its trimmed stdout. */
export type DockerRunner = (args: readonly string[]) => Promise<string>;

export function dockerCli(binary = 'docker', timeoutMs = 60_000): DockerRunner {
  return (args) =>
    new Promise((resolve, reject) => {
      execFile(binary, [...args], { timeout: timeoutMs, maxBuffer: 16 * 1024 * 1024 }, (error, stdout, stderr) => {
        if (error) reject(new Error(`${binary} ${args.join(' ')} failed: ${(stderr || error.message).trim()}`));
        else resolve(stdout.trim());
      });
    });
}

/** The compose services of the nodes, in node id order (service nX runs node nX). */
export const COMPOSE_SERVICES: readonly string[] = ['n1', 'n2', 'n3'];
/** The nodes' gRPC port inside the containers. */
export const GRPC_PORT = '7001/tcp';

/** As compose normalises a project name for its labels: lower case, only [-_a-z0-9]. */
export function normaliseProject(name: string): string {
  return name.toLowerCase().replace(/[^-_a-z0-9]/g, '');
}

/** One container, from `docker inspect`. */
export interface ContainerInfo {
  readonly id: string;
  /** Without the leading slash. */
  readonly name: string;
  readonly project: string;
  readonly service: string;
  readonly oneoff: boolean;
  /** running, paused, exited, restarting, created, dead. */
  readonly status: string;
  readonly exitCode: number;
  readonly oomKilled: boolean;
  readonly finishedAt: string;
  /** healthy, unhealthy, starting; null without a healthcheck. */
  readonly health: string | null;
  /** Network name -> the container's aliases on it. */
  readonly networks: Readonly<Record<string, readonly string[]>>;
  /** The host address published for the gRPC port ("127.0.0.1:7101"), null when none. */
  readonly published: string | null;
}

function record(value: unknown): Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : {};
}

function text(value: unknown): string {
  return typeof value === 'string' ? value : '';
}

/** Parses the JSON array `docker inspect <container>...` prints. */
export function parseInspect(json: string, port = GRPC_PORT): ContainerInfo[] {
  const parsed: unknown = JSON.parse(json);
  if (!Array.isArray(parsed)) throw new Error('docker inspect: expected a JSON array');
  return parsed.map((raw: unknown) => {
    const c = record(raw);
    const labels = record(record(c.Config).Labels);
    const state = record(c.State);
    const settings = record(c.NetworkSettings);
    const networks: Record<string, readonly string[]> = {};
    for (const [name, endpoint] of Object.entries(record(settings.Networks))) {
      const aliases = record(endpoint).Aliases;
      networks[name] = Array.isArray(aliases) ? aliases.filter((a): a is string => typeof a === 'string') : [];
    }
    const bindings = record(settings.Ports)[port];
    let published: string | null = null;
    if (Array.isArray(bindings)) {
      const hosts = bindings.map((b) => record(b)).filter((b) => text(b.HostPort) !== '');
      // The loopback binding when there is one (docker-compose.yml publishes only that).
      const chosen = hosts.find((b) => text(b.HostIp) === '127.0.0.1') ?? hosts[0];
      if (chosen !== undefined) {
        const ip = text(chosen.HostIp);
        published = `${ip === '' || ip === '0.0.0.0' ? '127.0.0.1' : ip}:${text(chosen.HostPort)}`;
      }
    }
    const health = record(state.Health).Status;
    return {
      id: text(c.Id),
      name: text(c.Name).replace(/^\//, ''),
      project: text(labels['com.docker.compose.project']),
      service: text(labels['com.docker.compose.service']),
      oneoff: text(labels['com.docker.compose.oneoff']).toLowerCase() === 'true',
      status: text(state.Status),
      exitCode: typeof state.ExitCode === 'number' ? state.ExitCode : 0,
      oomKilled: state.OOMKilled === true,
      finishedAt: text(state.FinishedAt),
      health: typeof health === 'string' ? health : null,
      networks,
      published,
    };
  });
}

/**
 * The aliases to give a container when it is connected to `network` again: the compose
 * service name first (the peers' QUORUMQ_PEERS name it), then the others it had, without the
 * container's short id (docker adds that one itself).
 */
export function reconnectAliases(info: ContainerInfo, network: string): string[] {
  const had = info.networks[network] ?? [];
  const aliases = [info.service, ...had].filter((a) => a !== '' && !(a.length >= 12 && info.id.startsWith(a)));
  return [...new Set(aliases)];
}

/** A nemesis action on one container. */
export type ComposeAction = 'kill' | 'start' | 'pause' | 'resume' | 'isolate' | 'heal';

/** The docker command (arguments) of one action. */
export function dockerArgs(action: ComposeAction, container: string, network: string, aliases: readonly string[]): string[] {
  switch (action) {
    case 'kill':
      return ['kill', '--signal', 'KILL', container];
    case 'start':
      return ['start', container];
    case 'pause':
      return ['pause', container];
    case 'resume':
      return ['unpause', container];
    case 'isolate':
      return ['network', 'disconnect', network, container];
    case 'heal':
      return ['network', 'connect', ...aliases.flatMap((a) => ['--alias', a]), network, container];
  }
}

/**
 * The one network the project's containers share: every container must be on it. Throws
 * when there is none or more than one candidate (the disconnect would not be a partition).
 */
export function projectNetwork(containers: readonly ContainerInfo[]): string {
  const [first] = containers;
  if (first === undefined) throw new Error('no containers');
  const shared = Object.keys(first.networks).filter((n) => containers.every((c) => n in c.networks));
  if (shared.length !== 1) {
    throw new Error(`expected the containers to share exactly one network, found ${shared.length === 0 ? 'none' : shared.join(', ')}`);
  }
  for (const c of containers) {
    const others = Object.keys(c.networks).filter((n) => n !== shared[0]);
    if (others.length > 0) throw new Error(`container ${c.name} is also on ${others.join(', ')}: disconnecting it from ${shared[0]} would not cut it off`);
  }
  return shared[0] as string;
}

/** What every fault kind of the schedule does on the compose cluster (the README's table). */
export const COMPOSE_FAULTS: Readonly<Record<Exclude<FaultKind, 'storage-fault'>, string>> = {
  'kill-leader': "docker kill (SIGKILL) of the container of the queue's leader; docker start after the hold",
  'kill-random': 'docker kill of a seeded container; docker start after the hold',
  'kill-two': 'docker kill of two of the three containers (no quorum); both started again',
  pause: "docker pause of the leader's or a seeded container for 1.5-4 s; docker unpause",
  'restart-all': 'docker kill of all three containers at once; all started again',
  partition: 'docker network disconnect of a seeded container (minority of one, cut off from the host too); docker network connect --alias nX back',
  'partition-leader': "docker network disconnect of the container of the queue's leader (the old leader is cut off from its followers and from clients); docker network connect --alias nX back",
};

/** Options of `npm run chaos` that the compose cluster cannot honour: one message per option. */
export function composeConflicts(options: { brokenBuild?: boolean; leaderKillRounds?: number; nodeOutput?: boolean; tls?: boolean }): string[] {
  const conflicts: string[] = [];
  if (options.brokenBuild) {
    conflicts.push('--broken-build sets the node processes\' environment; the compose nodes take theirs from docker-compose.yml (run it without --compose)');
  }
  if (options.leaderKillRounds !== undefined) {
    conflicts.push('--leader-kill-rounds isolates the leader through the per-pair proxies of the process cluster; run it without --compose');
  }
  if (options.tls) conflicts.push('--tls: the compose cluster serves TLS with its own certificates (compose-chaos.sh passes --tls-dir)');
  if (options.nodeOutput) conflicts.push('--node-output: the compose nodes log to docker (docker-compose -p <project> logs)');
  return conflicts;
}

interface ComposeNode {
  readonly id: string;
  readonly container: string;
  readonly name: string;
  readonly address: string;
  readonly aliases: readonly string[];
  /** Killed by the nemesis (or found exited): not running. */
  down: boolean;
  paused: boolean;
  disconnected: boolean;
  /** FinishedAt of the last exit already accounted for. */
  lastExit: string;
  /** When docker start was issued, until the node serves (for the start-to-serving time). */
  startedAt: number | null;
}

export interface ComposeClusterOptions {
  /** The compose project (COMPOSE_PROJECT_NAME of the cluster). */
  readonly project: string;
  /** The node services, in node id order; default n1, n2, n3. */
  readonly services?: readonly string[];
  readonly docker?: DockerRunner;
  /** The gRPC health status of an address (default: the health check of @quorumq/cli). */
  readonly health?: (address: string) => Promise<string>;
  readonly log?: (line: string) => void;
  /** TLS to the nodes' published ports (docker-compose.yml serves clients over TLS): files. */
  readonly tls?: { readonly ca: string; readonly cert?: string; readonly key?: string };
}

export class ComposeCluster implements NemesisCluster {
  readonly kind = 'compose' as const;
  readonly clientTuning: ClientTuning;
  readonly unexpectedExits: UnexpectedExit[] = [];
  /** docker command -> durations (ms) of its runs. */
  private readonly timings = new Map<string, number[]>();
  private readonly byId: Map<string, ComposeNode>;

  private constructor(
    readonly project: string,
    readonly network: string,
    private readonly nodes: readonly ComposeNode[],
    private readonly docker: DockerRunner,
    private readonly health: (address: string) => Promise<string>,
    private readonly log: (line: string) => void,
    tls: ComposeClusterOptions['tls'],
  ) {
    this.byId = new Map(nodes.map((n) => [n.id, n]));
    this.clientTuning = { leaderRouting: false, ...(tls === undefined ? {} : { tls }) };
  }

  /** Finds the running containers of `project`'s node services and waits until they serve. */
  static async attach(options: ComposeClusterOptions): Promise<ComposeCluster> {
    const docker = options.docker ?? dockerCli();
    const log = options.log ?? ((line: string) => process.stderr.write(`${line}\n`));
    const project = normaliseProject(options.project);
    const services = options.services ?? COMPOSE_SERVICES;
    const ids = (await docker(['ps', '-aq', '--filter', `label=com.docker.compose.project=${project}`])).split('\n').filter((id) => id !== '');
    if (ids.length === 0) throw new Error(`compose project ${project}: no containers (start it first: cluster/compose-chaos.sh does)`);
    const containers = parseInspect(await docker(['inspect', ...ids])).filter((c) => !c.oneoff);
    const chosen: ContainerInfo[] = [];
    for (const service of services) {
      const matching = containers.filter((c) => c.service === service);
      if (matching.length !== 1) throw new Error(`compose project ${project}: expected one container of service ${service}, found ${matching.length}`);
      const c = matching[0] as ContainerInfo;
      if (c.status !== 'running') throw new Error(`compose project ${project}: ${c.name} is ${c.status}, not running`);
      if (c.published === null) throw new Error(`compose project ${project}: ${c.name} publishes no host port for ${GRPC_PORT}`);
      chosen.push(c);
    }
    const network = projectNetwork(chosen);
    const nodes = chosen.map((c, i) => ({
      id: services[i] as string,
      container: c.id,
      name: c.name,
      address: c.published as string,
      aliases: reconnectAliases(c, network),
      down: false,
      paused: false,
      disconnected: false,
      lastExit: c.finishedAt,
      startedAt: null,
    }));
    const tls = options.tls;
    const healthTls = tls === undefined ? null : { caFile: tls.ca, ...(tls.cert !== undefined && tls.key !== undefined ? { certFile: tls.cert, keyFile: tls.key } : {}) };
    const cluster = new ComposeCluster(project, network, nodes, docker, options.health ?? ((address) => healthStatus(address, 1000, '', healthTls)), log, tls);
    log(`chaos: compose project ${project}, network ${network}: ${nodes.map((n) => `${n.id}=${n.name}@${n.address}`).join(' ')}`);
    await cluster.waitHealthy(cluster.ids, 120_000);
    return cluster;
  }

  get ids(): string[] {
    return this.nodes.map((n) => n.id);
  }

  get addresses(): string[] {
    return this.nodes.map((n) => n.address);
  }

  private node(id: string): ComposeNode {
    const node = this.byId.get(id);
    if (node === undefined) throw new Error(`unknown node ${id}`);
    return node;
  }

  addressOf(id: string): string {
    return this.node(id).address;
  }

  answering(id: string): boolean {
    const n = this.node(id);
    return !n.down && !n.paused && !n.disconnected;
  }

  isRunning(id: string): boolean {
    return !this.node(id).down;
  }

  private time(key: string, ms: number): void {
    const list = this.timings.get(key) ?? [];
    list.push(ms);
    this.timings.set(key, list);
  }

  private async run(action: ComposeAction, node: ComposeNode): Promise<void> {
    const args = dockerArgs(action, node.container, this.network, node.aliases);
    const started = Date.now();
    await this.docker(args);
    this.time(args[0] === 'network' ? `network ${args[1]}` : (args[0] as string), Date.now() - started);
  }

  async kill(id: string): Promise<void> {
    const node = this.node(id);
    try {
      await this.run('kill', node);
    } catch (error) {
      // Already gone on its own: that is a crash, found by refresh(); else a real failure.
      await this.refresh();
      if (!node.down) throw error;
      return;
    }
    node.down = true;
    node.paused = false;
    // A killed container is off the network too; docker start brings the endpoint back.
    node.disconnected = false;
  }

  async start(id: string): Promise<void> {
    const node = this.node(id);
    if (!node.down) return;
    node.startedAt = Date.now();
    await this.run('start', node);
    node.down = false;
    node.lastExit = (await this.inspect([node]))[0]?.finishedAt ?? node.lastExit;
  }

  async pause(id: string): Promise<void> {
    const node = this.node(id);
    await this.run('pause', node);
    node.paused = true;
  }

  async resume(id: string): Promise<void> {
    const node = this.node(id);
    if (!node.paused) return;
    await this.run('resume', node);
    node.paused = false;
  }

  async isolate(id: string): Promise<void> {
    const node = this.node(id);
    // Only one node at a time is cut off: heal the others first.
    await this.heal();
    await this.run('isolate', node);
    node.disconnected = true;
  }

  async heal(): Promise<void> {
    for (const node of this.nodes) {
      if (!node.disconnected) continue;
      await this.run('heal', node);
      node.disconnected = false;
    }
  }

  async healAll(timeoutMs: number): Promise<void> {
    await this.heal();
    for (const node of this.nodes) if (node.paused) await this.resume(node.id);
    await this.refresh();
    for (const node of this.nodes) if (node.down) await this.start(node.id);
    await this.waitHealthy(this.ids, timeoutMs);
  }

  async waitHealthy(ids: readonly string[], timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (const id of ids) {
      const node = this.node(id);
      let polls = 0;
      while ((await this.health(node.address)) !== 'SERVING') {
        polls += 1;
        // Every second or so: did the container exit on its own (then it never serves)?
        if (polls % 8 === 0) {
          await this.refresh();
          if (node.down) throw new Error(`node ${id} (${node.name}) exited while starting: ${this.unexpectedExits.at(-1)?.output.slice(-2000) ?? ''}`);
        }
        if (Date.now() > deadline) throw new Error(`node ${id} (${node.name}) not healthy within ${timeoutMs} ms`);
        await new Promise((r) => setTimeout(r, 100));
      }
      if (node.startedAt !== null) {
        this.time('start to serving', Date.now() - node.startedAt);
        node.startedAt = null;
      }
    }
  }

  private async inspect(nodes: readonly ComposeNode[]): Promise<ContainerInfo[]> {
    return parseInspect(await this.docker(['inspect', ...nodes.map((n) => n.container)]));
  }

  /** Records containers that exited although the nemesis did not kill them (crashes). */
  async refresh(): Promise<void> {
    const infos = await this.inspect(this.nodes);
    for (const node of this.nodes) {
      const info = infos.find((c) => c.id === node.container);
      if (info === undefined) continue;
      const stopped = info.status === 'exited' || info.status === 'dead';
      if (stopped && !node.down && info.finishedAt !== node.lastExit) {
        // Marked before the logs are fetched: a refresh running alongside (two kills that
        // both find their container gone) must not record the same exit again.
        node.lastExit = info.finishedAt;
        node.down = true;
        const output = await this.docker(['logs', '--tail', '60', node.container]).catch((e: unknown) => String(e));
        this.unexpectedExits.push({ id: node.id, at: Date.now(), code: info.exitCode, signal: info.oomKilled ? 'OOM' : null, output });
        const last = output.split('\n').filter((line) => /fatal|error|"level":(50|60)/i.test(line)).at(-1) ?? '';
        this.log(`chaos: ${node.id} (${node.name}) exited on its own with code ${info.exitCode}${last !== '' ? `: ${last.slice(0, 300)}` : ''}`);
      }
      if (stopped) node.down = true;
    }
  }

  stats(): Record<string, unknown> {
    const docker: Record<string, { count: number; medianMs: number; maxMs: number }> = {};
    for (const [command, ms] of this.timings) {
      const sorted = [...ms].sort((a, b) => a - b);
      docker[command] = { count: ms.length, medianMs: sorted[Math.floor(sorted.length / 2)] as number, maxMs: sorted[sorted.length - 1] as number };
    }
    return { project: this.project, network: this.network, containers: Object.fromEntries(this.nodes.map((n) => [n.id, n.name])), docker };
  }

  /** Undoes pauses and disconnects (best effort); the project is torn down by its owner. */
  async close(): Promise<void> {
    for (const node of this.nodes) {
      if (node.paused) await this.resume(node.id).catch(() => undefined);
      if (node.disconnected) {
        await this.run('heal', node).catch(() => undefined);
        node.disconnected = false;
      }
    }
    await this.refresh().catch(() => undefined);
  }
}
