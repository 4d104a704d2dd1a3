/**
 * The compose nemesis without Docker: parsing `docker inspect`, the docker command of each
 * action, the network and aliases a disconnected container gets back, the options --compose
 * refuses, and the ComposeCluster's bookkeeping against a fake docker CLI (which containers
 * are down, paused or cut off; crashes found by inspect). The real runs against a compose
 * cluster are cluster/compose-chaos.sh (CI: .ci/run), not vitest.
 */
import { describe, expect, it } from 'vitest';

import {
  COMPOSE_FAULTS,
  ComposeCluster,
  composeConflicts,
  dockerArgs,
  normaliseProject,
  parseInspect,
  projectNetwork,
  reconnectAliases,
  type ContainerInfo,
} from '../src/compose-cluster.js';
import { META, rejoined, type LeaderView, type StatusView } from '../src/monitor.js';
import { replayCommand } from '../src/runner.js';
import { FAULT_KINDS, PROCESS_ONLY_FAULTS } from '../src/schedule.js';

const NETWORK = 'quorumq-chaos_default';

/** A container as `docker inspect` prints it (the fields the parser reads, as docker 20.10 and compose 1.29 write them). */
function inspectEntry(o: {
  id: string;
  service: string;
  project?: string;
  status?: string;
  exitCode?: number;
  finishedAt?: string;
  networks?: Record<string, string[]>;
  port?: string | null;
  oneoff?: boolean;
}): unknown {
  return {
    Id: o.id,
    Name: `/${o.project ?? 'quorumq-chaos'}_${o.service}_1`,
    State: {
      Status: o.status ?? 'running',
      Running: (o.status ?? 'running') === 'running',
      Paused: o.status === 'paused',
      OOMKilled: false,
      ExitCode: o.exitCode ?? 0,
      FinishedAt: o.finishedAt ?? '0001-01-01T00:00:00Z',
      Health: { Status: 'healthy', FailingStreak: 0 },
    },
    Config: {
      Labels: {
        'com.docker.compose.oneoff': o.oneoff ? 'True' : 'False',
        'com.docker.compose.project': o.project ?? 'quorumq-chaos',
        'com.docker.compose.service': o.service,
        'com.docker.compose.version': '1.29.2',
      },
    },
    NetworkSettings: {
      Ports: {
        '7001/tcp': o.port === null ? null : [{ HostIp: '127.0.0.1', HostPort: o.port ?? '7101' }],
        '9101/tcp': [{ HostIp: '127.0.0.1', HostPort: '9111' }],
      },
      Networks: Object.fromEntries(
        Object.entries(o.networks ?? { [NETWORK]: [o.service, o.id.slice(0, 12)] }).map(([name, aliases]) => [
          name,
          { IPAMConfig: null, Links: null, Aliases: aliases, Gateway: '172.19.0.1', IPAddress: '172.19.0.3', IPPrefixLen: 16 },
        ]),
      ),
    },
  };
}

const ID1 = 'b4c9844108de0d2f8a1c7e5e9f0e3b7a4c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f';
const ID2 = 'f7dce71687522e46249d13688afa241ba1c8b82367ca50cfab7fe0a47b7334f5';
const ID3 = '0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9';

describe('parseInspect', () => {
  it('reads service, state, aliases and the published gRPC port', () => {
    const json = JSON.stringify([
      inspectEntry({ id: ID2, service: 'n2', port: '7102' }),
      inspectEntry({ id: ID1, service: 'n1', status: 'exited', exitCode: 137, finishedAt: '2026-11-30T04:20:00Z', networks: {} }),
    ]);
    const [n2, n1] = parseInspect(json) as [ContainerInfo, ContainerInfo];
    expect(n2).toMatchObject({
      id: ID2,
      name: 'quorumq-chaos_n2_1',
      project: 'quorumq-chaos',
      service: 'n2',
      oneoff: false,
      status: 'running',
      health: 'healthy',
      published: '127.0.0.1:7102',
      networks: { [NETWORK]: ['n2', 'f7dce7168752'] },
    });
    expect(n1).toMatchObject({ status: 'exited', exitCode: 137, finishedAt: '2026-11-30T04:20:00Z', networks: {} });
  });

  it('has no published address without a host binding, and maps 0.0.0.0 to the loopback', () => {
    const none = parseInspect(JSON.stringify([inspectEntry({ id: ID1, service: 'n1', port: null })]));
    expect(none[0]?.published).toBeNull();
    const raw = inspectEntry({ id: ID1, service: 'n1' }) as { NetworkSettings: { Ports: Record<string, unknown> } };
    raw.NetworkSettings.Ports['7001/tcp'] = [{ HostIp: '0.0.0.0', HostPort: '7201' }];
    expect(parseInspect(JSON.stringify([raw]))[0]?.published).toBe('127.0.0.1:7201');
  });

  it('rejects output that is not an array', () => {
    expect(() => parseInspect('{}')).toThrow(/JSON array/);
  });
});

describe('the docker side of each action', () => {
  it('maps every nemesis action to one docker command', () => {
    expect(dockerArgs('kill', 'c1', NETWORK, ['n1'])).toEqual(['kill', '--signal', 'KILL', 'c1']);
    expect(dockerArgs('start', 'c1', NETWORK, ['n1'])).toEqual(['start', 'c1']);
    expect(dockerArgs('pause', 'c1', NETWORK, ['n1'])).toEqual(['pause', 'c1']);
    expect(dockerArgs('resume', 'c1', NETWORK, ['n1'])).toEqual(['unpause', 'c1']);
    expect(dockerArgs('isolate', 'c1', NETWORK, ['n1'])).toEqual(['network', 'disconnect', NETWORK, 'c1']);
    expect(dockerArgs('heal', 'c1', NETWORK, ['n1', 'node-one'])).toEqual(['network', 'connect', '--alias', 'n1', '--alias', 'node-one', NETWORK, 'c1']);
  });

  it('reconnects with the service alias first and without the short container id', () => {
    const [info] = parseInspect(JSON.stringify([inspectEntry({ id: ID1, service: 'n1', networks: { [NETWORK]: [ID1.slice(0, 12), 'n1', 'extra'] } })]));
    expect(reconnectAliases(info as ContainerInfo, NETWORK)).toEqual(['n1', 'extra']);
    // Not on the network (any more): still the service name, which the peers resolve.
    expect(reconnectAliases(info as ContainerInfo, 'other')).toEqual(['n1']);
  });

  it('finds the one network the containers share, and refuses when a disconnect would not cut a node off', () => {
    const shared = parseInspect(JSON.stringify([inspectEntry({ id: ID1, service: 'n1' }), inspectEntry({ id: ID2, service: 'n2' })]));
    expect(projectNetwork(shared)).toBe(NETWORK);
    const twoNets = parseInspect(
      JSON.stringify([inspectEntry({ id: ID1, service: 'n1', networks: { [NETWORK]: ['n1'], bridge: [] } }), inspectEntry({ id: ID2, service: 'n2' })]),
    );
    expect(() => projectNetwork(twoNets)).toThrow(/also on bridge/);
    const apart = parseInspect(JSON.stringify([inspectEntry({ id: ID1, service: 'n1', networks: { a: ['n1'] } }), inspectEntry({ id: ID2, service: 'n2', networks: { b: ['n2'] } })]));
    expect(() => projectNetwork(apart)).toThrow(/found none/);
  });

  it('has a compose meaning for every fault kind of the schedule', () => {
    for (const kind of FAULT_KINDS) {
      if (PROCESS_ONLY_FAULTS.includes(kind)) continue; // the data directories are inside the containers
      expect(COMPOSE_FAULTS[kind as keyof typeof COMPOSE_FAULTS], kind).toMatch(/docker/);
    }
  });

  it('normalises project names as compose does for its labels', () => {
    expect(normaliseProject('QuorumQ Chaos.1')).toBe('quorumqchaos1');
    expect(normaliseProject('quorumq-chaos')).toBe('quorumq-chaos');
  });
});

describe('options the compose cluster refuses', () => {
  it('names each option that needs the process cluster', () => {
    expect(composeConflicts({})).toEqual([]);
    const all = composeConflicts({ brokenBuild: true, leaderKillRounds: 3, nodeOutput: true });
    expect(all).toHaveLength(3);
    expect(all[0]).toMatch(/^--broken-build/);
    expect(all[1]).toMatch(/^--leader-kill-rounds/);
    expect(all[2]).toMatch(/^--node-output/);
  });

  it('replays a compose run with --compose', () => {
    expect(replayCommand(5, 60, ['kill-leader', 'pause'], true)).toBe('npm run chaos -- --compose --seed 5 --duration 60 --faults kill-leader,pause');
    expect(replayCommand(5, 60, ['kill-leader'])).toBe('npm run chaos -- --seed 5 --duration 60 --faults kill-leader');
  });
});

describe('rejoined: a node back from a partition agrees with the cluster', () => {
  const views = new Map<string, LeaderView>([
    ['q1', { leader: 'n2', term: 5 }],
    ['q2', { leader: 'n3', term: 2 }],
    [META, { leader: 'n2', term: 0 }],
  ]);
  const own = (patch: Partial<StatusView> = {}): StatusView => ({
    node: 'n1',
    metadataLeader: 'n2',
    nodes: { n1: { reachable: true }, n2: { reachable: true }, n3: { reachable: true } },
    queues: { q1: { leader: 'n2', term: 5 }, q2: { leader: 'n3', term: 2 } },
    ...patch,
  });

  it('is true when leaders, terms, the metadata leader and reachability agree', () => {
    expect(rejoined(own(), views, ['q1', 'q2'])).toBe(true);
  });

  it('is false with a stale term, a peer unreachable, another metadata leader or an unknown queue', () => {
    expect(rejoined(own({ queues: { q1: { leader: 'n2', term: 4 }, q2: { leader: 'n3', term: 2 } } }), views, ['q1', 'q2'])).toBe(false);
    expect(rejoined(own({ nodes: { n1: { reachable: true }, n2: { reachable: false }, n3: { reachable: true } } }), views, ['q1', 'q2'])).toBe(false);
    expect(rejoined(own({ metadataLeader: '' }), views, ['q1', 'q2'])).toBe(false);
    expect(rejoined(own(), views, ['q1', 'q3'])).toBe(false);
    expect(rejoined(own({ nodes: {} }), views, ['q1'])).toBe(false);
  });
});

/** A docker CLI over three fake containers of project quorumq-chaos. */
class FakeDocker {
  readonly commands: string[] = [];
  readonly containers = new Map<string, { id: string; service: string; port: string; status: string; exitCode: number; finishedAt: string; networks: Record<string, string[]> }>();
  private clock = 0;

  constructor() {
    [ID1, ID2, ID3].forEach((id, i) => {
      const service = `n${i + 1}`;
      this.containers.set(id, { id, service, port: `710${i + 1}`, status: 'running', exitCode: 0, finishedAt: '0001-01-01T00:00:00Z', networks: { [NETWORK]: [service, id.slice(0, 12)] } });
    });
  }

  private get(id: string) {
    const c = this.containers.get(id);
    if (c === undefined) throw new Error(`Error: No such container: ${id}`);
    return c;
  }

  /** The container exits by itself (a crash). */
  crash(service: string, code: number): void {
    const c = [...this.containers.values()].find((x) => x.service === service);
    if (c === undefined) throw new Error(service);
    c.status = 'exited';
    c.exitCode = code;
    c.finishedAt = `t${++this.clock}`;
  }

  readonly run = async (args: readonly string[]): Promise<string> => {
    const [cmd, ...rest] = args;
    if (cmd !== 'inspect' && cmd !== 'ps') this.commands.push(args.join(' '));
    const last = rest[rest.length - 1] as string;
    switch (cmd) {
      case 'ps':
        return [...this.containers.keys()].join('\n');
      case 'inspect':
        return JSON.stringify(rest.map((id) => {
          const c = this.get(id);
          return inspectEntry({ id: c.id, service: c.service, port: c.port, status: c.status, exitCode: c.exitCode, finishedAt: c.finishedAt, networks: c.networks });
        }));
      case 'kill': {
        const c = this.get(last);
        if (c.status !== 'running') throw new Error(`Error response from daemon: Cannot kill container: ${last}: Container ${last} is not running`);
        c.status = 'exited';
        c.exitCode = 137;
        c.finishedAt = `t${++this.clock}`;
        return last;
      }
      case 'start':
        this.get(last).status = 'running';
        return last;
      case 'pause':
        this.get(last).status = 'paused';
        return last;
      case 'unpause':
        this.get(last).status = 'running';
        return last;
      case 'network': {
        const c = this.get(last);
        const network = rest[rest.length - 2] as string;
        if (rest[0] === 'disconnect') delete c.networks[network];
        else {
          const aliases: string[] = [];
          for (let i = 1; i < rest.length - 2; i += 2) if (rest[i] === '--alias') aliases.push(rest[i + 1] as string);
          c.networks[network] = [...aliases, c.id.slice(0, 12)];
        }
        return '';
      }
      case 'logs':
        return 'node n2: fatal: something broke';
      default:
        throw new Error(`unexpected docker ${args.join(' ')}`);
    }
  };
}

async function attach(docker: FakeDocker): Promise<ComposeCluster> {
  return ComposeCluster.attach({ project: 'quorumq-chaos', docker: docker.run, health: async () => 'SERVING', log: () => undefined });
}

describe('ComposeCluster against a fake docker CLI', () => {
  it('finds the three services, their published ports and the project network', async () => {
    const cluster = await attach(new FakeDocker());
    expect(cluster.ids).toEqual(['n1', 'n2', 'n3']);
    expect(cluster.addresses).toEqual(['127.0.0.1:7101', '127.0.0.1:7102', '127.0.0.1:7103']);
    expect(cluster.network).toBe(NETWORK);
    expect(cluster.clientTuning.leaderRouting).toBe(false);
  });

  it('refuses a project whose node container is not running', async () => {
    const docker = new FakeDocker();
    docker.crash('n3', 1);
    await expect(attach(docker)).rejects.toThrow(/quorumq-chaos_n3_1 is exited, not running/);
  });

  it('kill / start, pause / resume, isolate / heal: the docker commands and who answers', async () => {
    const docker = new FakeDocker();
    const cluster = await attach(docker);
    await cluster.kill('n1');
    expect(cluster.isRunning('n1')).toBe(false);
    expect(cluster.answering('n1')).toBe(false);
    await cluster.start('n1');
    expect(cluster.answering('n1')).toBe(true);
    await cluster.pause('n2');
    expect(cluster.answering('n2')).toBe(false);
    expect(cluster.isRunning('n2')).toBe(true);
    await cluster.resume('n2');
    await cluster.isolate('n3');
    expect(cluster.answering('n3')).toBe(false);
    expect(docker.containers.get(ID3)?.networks[NETWORK]).toBeUndefined();
    // Isolating another node first heals the one cut off before.
    await cluster.isolate('n1');
    await cluster.heal();
    expect(cluster.ids.every((id) => cluster.answering(id))).toBe(true);
    expect(docker.containers.get(ID3)?.networks[NETWORK]).toEqual(['n3', ID3.slice(0, 12)]);
    expect(docker.commands).toEqual([
      `kill --signal KILL ${ID1}`,
      `start ${ID1}`,
      `pause ${ID2}`,
      `unpause ${ID2}`,
      `network disconnect ${NETWORK} ${ID3}`,
      `network connect --alias n3 ${NETWORK} ${ID3}`,
      `network disconnect ${NETWORK} ${ID1}`,
      `network connect --alias n1 ${NETWORK} ${ID1}`,
    ]);
    expect(cluster.unexpectedExits).toEqual([]);
    const stats = cluster.stats() as { docker: Record<string, { count: number }> };
    expect(stats.docker['kill']?.count).toBe(1);
    expect(stats.docker['network connect']?.count).toBe(2);
  });

  it('healAll undoes every fault at once and starts every killed container', async () => {
    const docker = new FakeDocker();
    const cluster = await attach(docker);
    await cluster.kill('n1');
    await cluster.kill('n2');
    await cluster.isolate('n3');
    await cluster.healAll(1000);
    expect([...docker.containers.values()].map((c) => c.status)).toEqual(['running', 'running', 'running']);
    expect(docker.containers.get(ID3)?.networks[NETWORK]).toContain('n3');
    expect(cluster.ids.every((id) => cluster.answering(id))).toBe(true);
    expect(cluster.unexpectedExits).toEqual([]);
  });

  it('a container that exits by itself is a crash: recorded once, with its logs, and started by healAll', async () => {
    const docker = new FakeDocker();
    const cluster = await attach(docker);
    docker.crash('n2', 3);
    // The nemesis picks the crashed node: docker kill fails, and the crash is recorded instead.
    await cluster.kill('n2');
    expect(cluster.unexpectedExits).toHaveLength(1);
    expect(cluster.unexpectedExits[0]).toMatchObject({ id: 'n2', code: 3, output: 'node n2: fatal: something broke' });
    await cluster.start('n2');
    await cluster.kill('n2'); // a nemesis kill: not a crash
    await cluster.healAll(1000);
    await cluster.refresh();
    expect(cluster.unexpectedExits).toHaveLength(1);
    expect(docker.containers.get(ID2)?.status).toBe('running');
  });

  it('two kills that both find their containers crashed record each crash once', async () => {
    const docker = new FakeDocker();
    const cluster = await attach(docker);
    docker.crash('n2', 70);
    docker.crash('n3', 70);
    await Promise.all(['n1', 'n2', 'n3'].map((id) => cluster.kill(id)));
    expect(cluster.unexpectedExits.map((e) => e.id).sort()).toEqual(['n2', 'n3']);
    expect(cluster.ids.map((id) => cluster.isRunning(id))).toEqual([false, false, false]);
  });

  it('waitHealthy fails fast when a starting container exits', async () => {
    const docker = new FakeDocker();
    let serving = true;
    const cluster = await ComposeCluster.attach({ project: 'quorumq-chaos', docker: docker.run, health: async () => (serving ? 'SERVING' : 'UNAVAILABLE'), log: () => undefined });
    serving = false;
    docker.crash('n1', 2);
    await expect(cluster.waitHealthy(['n1'], 30_000)).rejects.toThrow(/n1 .* exited while starting/);
    expect(cluster.unexpectedExits.map((e) => e.id)).toEqual(['n1']);
  });
});
