#!/usr/bin/env node
/**
 * `quorumq node --config FILE`   one broker node (`--join`: to be added to a running cluster)
 * `quorumq cluster`              a local three-node cluster on loopback (what `npm start` runs)
 * `quorumq health --address A`   exit 0 when the node at A answers the gRPC health check SERVING
 * `quorumq queues|exchanges|bindings|consumers|users|check ...`, `quorumq cluster status|add-node|remove-node|rebalance`, `quorumq whoami`:
 *                                administer a running cluster (admin-commands.ts)
 */
import { Command, InvalidArgumentError } from 'commander';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

import { addAdminCommands } from './admin-commands.js';
import { ensureClusterSecret } from './cluster-secret.js';
import { healthStatus } from './health.js';
import { findHelperThreads, idleThreads, type HelperThreadsFound, type HelperThreadsOutcome } from './helper-threads.js';
import { warmUp, type WarmUpOutcome } from './warm-up.js';
import { nodeProcessArgs } from './node-process.js';
import { LOG_FORMATS, nodeLogFormatter, prettyLogsFor, type LogFormat } from './pretty-logs.js';

/** The version in the CLI package's package.json. */
function packageVersion(): string {
  const file = fileURLToPath(new URL('../package.json', import.meta.url));
  return (JSON.parse(readFileSync(file, 'utf8')) as { version: string }).version;
}

function integer(value: string): number {
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n < 0) throw new InvalidArgumentError('expected a non-negative integer');
  return n;
}

async function runNode(options: { config?: string; join?: boolean }): Promise<void> {
  // Loaded here, not at the top: `quorumq health` (a container healthcheck every few
  // seconds) then starts without loading the whole node.
  const { ConfigError, createLogger, loadConfig, routeGrpcLogs, startNode } = await import('@quorumq/server');
  let config;
  try {
    // --join is the `join` setting (QUORUMQ_JOIN=true): it wins over the file and the environment.
    config = loadConfig(options.config ?? null, process.env, options.join === true ? { join: true } : {});
  } catch (error) {
    if (error instanceof ConfigError) {
      process.stderr.write(`quorumq: ${error.message}\n`);
      process.exit(2);
    }
    throw error;
  }
  mkdirSync(config.dataDir, { recursive: true });
  // V8's helper threads, found before anything starts threads of its own (the warm-up's
  // LevelDB, the node's storage); lowered to SCHED_IDLE after the warm-up, which needs them
  // at their priority to compile (helper-threads.ts).
  const helperThreads: HelperThreadsFound | null = config.idleHelperThreads ? await findHelperThreads() : null;
  const logger = createLogger(config);
  routeGrpcLogs(logger);
  if (config.warmUp) {
    const warmed: WarmUpOutcome = await warmUp({ dir: join(config.dataDir, 'warm-up') });
    if (warmed.kind === 'warmed') logger.info({ ms: warmed.ms, cpuMs: warmed.cpuMs }, 'warmed up before serving');
    else logger.warn({ reason: warmed.reason, ms: warmed.ms }, 'warm-up skipped');
  }
  const helpers: HelperThreadsOutcome | null = helperThreads === null ? null : await idleThreads(helperThreads);
  let running;
  try {
    running = await startNode(config, { logger });
  } catch (error) {
    // A corrupt WAL, a data directory in use, a port taken: say so plainly, exit non-zero.
    const message = error instanceof Error ? error.message : String(error);
    process.stderr.write(`quorumq: node ${config.nodeId} cannot start: ${message}\n`);
    process.exit(2);
  }
  if (helpers?.kind === 'idle') running.logger.info({ threads: helpers.threads }, "V8's helper threads run at SCHED_IDLE");
  else if (helpers?.kind === 'unchanged') running.logger.warn({ reason: helpers.reason }, "V8's helper threads keep their CPU priority");
  let stopping = false;
  const stop = (signal: string): void => {
    if (stopping) return;
    stopping = true;
    running.logger.info({ signal }, 'shutting down: handing off leadership');
    running.shutdown().then(
      () => process.exit(0),
      (error: unknown) => {
        running.logger.error({ err: error }, 'shutdown failed');
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
}

async function checkHealth(options: { address: string; timeout: number; service: string; tlsCa?: string; tlsCert?: string; tlsKey?: string }): Promise<void> {
  const tls =
    options.tlsCa === undefined && options.tlsCert === undefined && options.tlsKey === undefined
      ? null
      : { caFile: options.tlsCa, certFile: options.tlsCert, keyFile: options.tlsKey };
  let status: string;
  try {
    status = await healthStatus(options.address, options.timeout, options.service, tls);
  } catch (error) {
    process.stderr.write(`quorumq health: ${error instanceof Error ? error.message : String(error)}\n`);
    process.exit(2);
  }
  process.stdout.write(`${options.address}: ${status}\n`);
  process.exit(status === 'SERVING' ? 0 : 1);
}

/** The metrics port of a local cluster's first node when --metrics-port is not given: 7001 -> 9101. */
const METRICS_PORT_OFFSET = 2100;
/** The peer port of a local cluster's first node when --peer-port is not given: 7001 -> 8001. */
const PEER_PORT_OFFSET = 1000;

function logFormat(value: string): LogFormat {
  if (!(LOG_FORMATS as readonly string[]).includes(value)) throw new InvalidArgumentError(`expected one of ${LOG_FORMATS.join(', ')}`);
  return value as LogFormat;
}

async function runCluster(options: {
  nodes: number;
  basePort: number;
  metricsPort?: number;
  peerPort?: number;
  host: string;
  data: string;
  logFormat: LogFormat;
}): Promise<void> {
  const main = fileURLToPath(import.meta.url);
  // On a terminal the nodes' JSON log lines are printed readably; otherwise (a pipe, a file,
  // a test reading them) they pass through unchanged.
  const format = prettyLogsFor(options.logFormat, process.stdout) ? nodeLogFormatter() : null;
  const ids = Array.from({ length: options.nodes }, (_, i) => `n${i + 1}`);
  const metricsPort = options.metricsPort ?? options.basePort + METRICS_PORT_OFFSET;
  const peerPort = options.peerPort ?? options.basePort + PEER_PORT_OFFSET;
  const ranges = [['--base-port', options.basePort], ['--peer-port', peerPort], ['--metrics-port', metricsPort]] as const;
  for (const [flag, first] of ranges) {
    if (first < 1 || first + options.nodes - 1 > 65535) {
      process.stderr.write(`quorumq: ${flag} ${first} leaves no room for ${options.nodes} ports (1-65535)\n`);
      process.exit(2);
    }
  }
  for (const [flag, first] of ranges) {
    for (const [otherFlag, other] of ranges) {
      if (flag < otherFlag && Math.abs(first - other) < options.nodes) {
        process.stderr.write(`quorumq: the ports of ${flag} ${first} and ${otherFlag} ${other} overlap for ${options.nodes} nodes\n`);
        process.exit(2);
      }
    }
  }
  const address = (i: number): string => `${options.host}:${options.basePort + i}`;
  const peerAddress = (i: number): string => `${options.host}:${peerPort + i}`;
  const metricsAddress = (i: number): string => `${options.host}:${metricsPort + i}`;
  // `peers` names each node's peer listener; clients use `listen` / `advertise`.
  const peers = ids.map((id, i) => `${id}=${peerAddress(i)}`).join(',');
  // The nodes' peer calls carry a cluster secret: QUORUMQ_CLUSTER_SECRET(_FILE) when set,
  // else one made at random for this data directory (see cluster-secret.ts).
  const secretFromEnv = Boolean(process.env.QUORUMQ_CLUSTER_SECRET) || Boolean(process.env.QUORUMQ_CLUSTER_SECRET_FILE);
  const secretFile = secretFromEnv ? null : ensureClusterSecret(resolve(options.data));
  const children: ChildProcess[] = [];
  let stopping = false;
  ids.forEach((id, i) => {
    const dataDir = resolve(options.data, id);
    mkdirSync(dataDir, { recursive: true });
    const child = spawn(process.execPath, [...nodeProcessArgs(process.execArgv), main, 'node'], {
      stdio: ['ignore', format === null ? 'inherit' : 'pipe', 'inherit'],
      env: {
        ...process.env,
        QUORUMQ_NODE_ID: id,
        QUORUMQ_LISTEN: address(i),
        QUORUMQ_ADVERTISE: address(i),
        QUORUMQ_PEER_LISTEN: peerAddress(i),
        QUORUMQ_PEERS: peers,
        QUORUMQ_DATA_DIR: dataDir,
        ...(secretFile !== null ? { QUORUMQ_CLUSTER_SECRET_FILE: secretFile } : {}),
        QUORUMQ_METRICS_LISTEN: metricsAddress(i),
      },
    });
    if (format !== null && child.stdout !== null) {
      createInterface({ input: child.stdout, crlfDelay: Infinity }).on('line', (line) => process.stdout.write(`${format(id, line)}\n`));
    }
    child.on('exit', (code, signal) => {
      if (!stopping) process.stderr.write(`quorumq: node ${id} exited (${signal ?? code})\n`);
    });
    children.push(child);
  });
  process.stdout.write(
    `quorumq: local cluster of ${options.nodes} nodes\n` +
      ids.map((id, i) => `  ${id}  grpc ${address(i)}  peers ${peerAddress(i)}  metrics http://${metricsAddress(i)}/metrics  data ${join(options.data, id)}\n`).join('') +
      `connect with: connect({ nodes: [${ids.map((_, i) => `'${address(i)}'`).join(', ')}] })\nCtrl-C stops the cluster.\n`,
  );
  const stop = (): void => {
    if (stopping) return;
    stopping = true;
    for (const child of children) child.kill('SIGTERM');
    let alive = children.length;
    // 'close': the node exited and its last log lines were printed.
    for (const child of children) child.on('close', () => (--alive === 0 ? process.exit(0) : undefined));
    setTimeout(() => process.exit(0), 10_000).unref();
  };
  process.on('SIGINT', stop);
  process.on('SIGTERM', stop);
}

const program = new Command('quorumq')
  .description('quorumq: a message broker whose every queue is a Raft-replicated quorum queue')
  .version(packageVersion(), '-V, --version');
program
  .command('node')
  .description('start one broker node')
  .option('-c, --config <file>', 'JSON configuration file (environment variables QUORUMQ_* override it)')
  .option('--join', 'join a running cluster: start with no configuration of its own and wait until `quorumq cluster add-node` adds it (the `join` setting, QUORUMQ_JOIN=true; ignored once the node has state)')
  .addHelpText(
    'after',
    `
Description:
  Runs one broker node until SIGTERM or SIGINT (it hands its leaderships off first). Its
  configuration comes from --config and the QUORUMQ_* environment (docs/configuration.md).
  A node of a new cluster founds it with its peers (\`peers\`); a node added to a running
  cluster starts with --join and is then added from any machine with
  \`quorumq cluster add-node <id> <peer-address>\` (docs/operations.md, "Membership").

Exit status:
  0  stopped by a signal
  1  the shutdown failed
  2  a configuration it cannot run, or the node could not start (a message on stderr)

Examples:
  $ quorumq node --config node.json
  $ quorumq node --join --config n4.json   # its peers: n4 itself and the running nodes; the cluster's secret`,
  )
  .action(runNode);
program
  .command('cluster')
  .description('start a local cluster of nodes on loopback, data under --data')
  .option('-n, --nodes <count>', 'number of nodes', integer, 3)
  .option('-p, --base-port <port>', 'gRPC port of the first node (the others follow)', integer, 7001)
  .option('-m, --metrics-port <port>', `metrics port of the first node (default: base port + ${METRICS_PORT_OFFSET})`, integer)
  .option('--peer-port <port>', `peer port of the first node, where the nodes reach each other (default: base port + ${PEER_PORT_OFFSET})`, integer)
  .option('--host <host>', 'address to bind', '127.0.0.1')
  .option('-d, --data <dir>', 'data directory', './data')
  .option('--log-format <format>', 'node logs: pretty (readable), json (as the nodes write them), auto (pretty on a terminal)', logFormat, 'auto')
  .action(runCluster);
program
  .command('health')
  .description('check a node with the standard gRPC health check; exit 0 when SERVING')
  .requiredOption('-a, --address <host:port>', 'node address')
  .option('-t, --timeout <ms>', 'deadline', integer, 2000)
  .option('-s, --service <name>', 'service to check ("" = the whole node)', '')
  .option('--tls-ca <file>', 'connect with TLS; CA certificates that verify the node\'s certificate (PEM)')
  .option('--tls-cert <file>', 'connect with TLS, presenting this client certificate (PEM; with --tls-key)')
  .option('--tls-key <file>', 'the client certificate\'s key (PEM)')
  .action(checkHealth);

addAdminCommands(program);
await program.parseAsync(process.argv);
