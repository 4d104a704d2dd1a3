/**
 * The operator's verbs (`quorumq queues|exchanges|bindings|consumers|cluster|users|whoami`),
 * each one SDK call against a running cluster: human tables by default, `--json` for
 * scripts, the SDK's connection options (nodes, TLS, user and password). Errors print the
 * broker's message and reason and exit 1; bad arguments exit 2 (commander).
 */
import { Command, InvalidArgumentError, Option } from 'commander';
import type { ConnectOptions, QueueArguments, QuorumqClient } from '@quorumq/client';

import { formatTable } from './table.js';

export const DEFAULT_NODES = '127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003';

interface ConnectionOptions {
  nodes: string;
  user?: string;
  password?: string;
  tlsCa?: string;
  tlsCert?: string;
  tlsKey?: string;
  json?: boolean;
}

/** The connection options every verb takes (also from QUORUMQ_NODES, QUORUMQ_USER, QUORUMQ_PASSWORD). */
function withConnection(command: Command): Command {
  return command
    .addOption(new Option('--nodes <list>', 'comma-separated node addresses').env('QUORUMQ_NODES').default(DEFAULT_NODES))
    .addOption(new Option('-u, --user <name>', 'user to authenticate as').env('QUORUMQ_USER'))
    .addOption(new Option('--password <password>', "the user's password").env('QUORUMQ_PASSWORD'))
    .option('--tls-ca <file>', "connect with TLS: CA certificates that verify the nodes' certificates (PEM)")
    .option('--tls-cert <file>', 'client certificate (PEM), with --tls-key')
    .option('--tls-key <file>', "the client certificate's key (PEM)")
    .option('--json', 'print JSON instead of a table');
}

function connectOptions(options: ConnectionOptions): ConnectOptions {
  if (options.user !== undefined && options.password === undefined) throw new InvalidArgumentError('--user needs --password (or QUORUMQ_PASSWORD)');
  const tls = options.tlsCa !== undefined || options.tlsCert !== undefined ? { ...(options.tlsCa ? { ca: options.tlsCa } : {}), ...(options.tlsCert ? { cert: options.tlsCert } : {}), ...(options.tlsKey ? { key: options.tlsKey } : {}) } : undefined;
  return {
    nodes: options.nodes.split(',').map((n) => n.trim()).filter((n) => n !== ''),
    failoverTimeoutMs: 5_000,
    ...(options.user !== undefined ? { auth: { username: options.user, password: options.password ?? '' } } : {}),
    ...(tls !== undefined ? { tls } : {}),
  };
}

/** JSON with bigints and Buffers printable. */
function toJson(value: unknown): string {
  return JSON.stringify(value, (_key, v: unknown) => (typeof v === 'bigint' ? v.toString() : v instanceof Uint8Array ? Buffer.from(v).toString('base64') : v), 2);
}

type Rows = Array<Record<string, unknown>>;

/** Runs `work` with a client; prints its result as a table (rows) or JSON; reports a failure and exits 1. */
function action<A extends unknown[]>(work: (client: QuorumqClient, ...args: A) => Promise<{ json: unknown; rows?: Rows; text?: string }>) {
  return async (...args: unknown[]): Promise<void> => {
    const command = args[args.length - 1] as Command;
    const options = command.opts<ConnectionOptions>();
    const { connect } = await import('@quorumq/client');
    const client = connect(connectOptions(options));
    try {
      // commander passes the arguments, then the options, then the command.
      const result = await work(client, ...(args.slice(0, -1) as A));
      if (options.json === true) process.stdout.write(`${toJson(result.json)}\n`);
      else if (result.rows !== undefined) process.stdout.write(formatTable(result.rows));
      else process.stdout.write(`${result.text ?? 'ok'}\n`);
    } catch (error) {
      const e = error as { message?: string; reason?: string; code?: string };
      process.stderr.write(`quorumq: ${e.message ?? String(error)}${e.reason ? ` (${e.code ?? ''} ${e.reason})` : ''}\n`);
      process.exitCode = 1;
    } finally {
      await client.close().catch(() => undefined);
    }
  };
}

function integerArg(value: string): number {
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n < 0) throw new InvalidArgumentError('expected a non-negative integer');
  return n;
}

function jsonObject(value: string): Record<string, unknown> {
  let parsed: unknown;
  try {
    parsed = JSON.parse(value);
  } catch {
    throw new InvalidArgumentError('expected a JSON object, e.g. \'{"maxLength": 1000}\'');
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) throw new InvalidArgumentError('expected a JSON object');
  return parsed as Record<string, unknown>;
}

/**
 * One `--arg name=value` (repeatable): the value is read as JSON when it is JSON (numbers,
 * booleans, quoted strings), else taken as a string, so `--arg compactionKey=entity-id
 * --arg compactionMinLagMs=500` needs no quoting.
 */
function queueArgument(value: string, previous: Record<string, unknown> = {}): Record<string, unknown> {
  const at = value.indexOf('=');
  if (at <= 0) throw new InvalidArgumentError('expected name=value, e.g. compactionKey=entity-id');
  const raw = value.slice(at + 1);
  let parsed: unknown = raw;
  try {
    parsed = JSON.parse(raw);
  } catch {
    // Not JSON: a plain string.
  }
  return { ...previous, [value.slice(0, at)]: parsed };
}

const list = (value: string): string[] => value.split(',').map((s) => s.trim()).filter((s) => s !== '');

export function addAdminCommands(program: Command): void {
  const queues = program.command('queues').description('list, declare, delete, purge, inspect and move queues');
  withConnection(queues.command('list').description('every queue with its leader, members and depths'))
    .action(action(async (client) => {
      const status = await client.clusterStatus();
      const rows = Object.values(status.queues).map((q) => ({ name: q.name, leader: q.leader, members: q.members.join(','), ready: q.ready, unacked: q.unacked, delayed: q.delayed, consumers: q.consumers, bytes: q.bytes }));
      return { json: Object.values(status.queues), rows };
    }));
  withConnection(queues.command('declare <name>').description('declare a queue (idempotent with the same arguments)'))
    .option('--replicas <n>', 'Raft group size', integerArg)
    .option('--arguments <json>', 'queue arguments as JSON, e.g. \'{"maxLength": 1000, "deadLetterExchange": "dlx"}\'', jsonObject)
    .option('--arg <name=value>', 'one queue argument (repeatable; wins over --arguments), e.g. --arg compactionKey=entity-id', queueArgument)
    .action(action(async (client, name: string, options: { replicas?: number; arguments?: Record<string, unknown>; arg?: Record<string, unknown> }) => {
      const args = { ...(options.arguments ?? {}), ...(options.arg ?? {}), ...(options.replicas !== undefined ? { replicas: options.replicas } : {}) } as QueueArguments;
      const result = await client.declareQueue(name, args);
      return { json: result, text: `${result.created ? 'declared' : 'exists'} ${name} (members ${result.members.join(', ')})${result.warnings.map((w) => `\nwarning: ${w}`).join('')}` };
    }));
  withConnection(queues.command('delete <name>').description('delete a queue and its messages'))
    .option('--if-unused', 'only if it has no consumer')
    .option('--if-empty', 'only if it holds no message')
    .action(action(async (client, name: string, flags: { ifUnused?: boolean; ifEmpty?: boolean }) => {
      const result = await client.deleteQueue(name, { ifUnused: flags.ifUnused === true, ifEmpty: flags.ifEmpty === true });
      return { json: result, text: `deleted ${name} (${result.messagesDropped} messages dropped)` };
    }));
  withConnection(queues.command('purge <name>').description('drop the ready messages of a queue'))
    .action(action(async (client, name: string) => {
      const result = await client.purgeQueue(name);
      return { json: result, text: `purged ${name} (${result.messagesDropped} messages dropped)` };
    }));
  withConnection(queues.command('status <name>').description("a queue's leader, members and depths (from its leader)"))
    .action(action(async (client, name: string) => {
      const q = await client.queueStatus(name);
      // Spec 9: a compacting queue also shows its keys, replaced messages and tombstones.
      const compaction = q.compaction === undefined ? {} : { keys: q.compaction.keys, replaced: q.compaction.replaced, tombstones: q.compaction.tombstones };
      return { json: q, rows: [{ name: q.name, leader: q.leader, members: q.members.join(','), ready: q.ready, unacked: q.unacked, delayed: q.delayed, deadLettering: q.deadLettering, consumers: q.consumers, bytes: q.bytes, commitIndex: q.commitIndex, ...compaction }] };
    }));
  withConnection(queues.command('move <source> <exchange>').description("move a queue's messages to an exchange (spec 8), with progress"))
    .option('--routing-key <key>', 'publish with this key (default: each message keeps its own)')
    .option('--limit <n>', 'at most this many (default: what the source holds at the start)', integerArg)
    .action(action(async (client, source: string, exchange: string, flags: { routingKey?: string; limit?: number; json?: boolean }) => {
      const progress = (p: { moved: number; total: number }): void => {
        if (flags.json !== true && process.stderr.isTTY) process.stderr.write(`\r${bar(p.moved, p.total)} ${p.moved}/${p.total}`);
      };
      const result = await client.move({ sourceQueue: source, destinationExchange: exchange, ...(flags.routingKey !== undefined ? { routingKey: flags.routingKey } : {}), ...(flags.limit !== undefined ? { limit: flags.limit } : {}), onProgress: progress });
      if (flags.json !== true && process.stderr.isTTY) process.stderr.write('\n');
      return { json: result, text: `moved ${result.moved} of ${result.total} from ${source} to ${JSON.stringify(exchange)}` };
    }));

  const exchanges = program.command('exchanges').description('list, declare and delete exchanges');
  withConnection(exchanges.command('list').description('every exchange (built-in ones flagged)'))
    .action(action(async (client) => {
      const all = await client.listExchanges();
      return { json: all, rows: all.map((e) => ({ name: e.name, type: e.type, autoDelete: e.autoDelete, alternateExchange: e.alternateExchange ?? '', builtIn: e.builtIn })) };
    }));
  withConnection(exchanges.command('declare <name> <type>').description('declare an exchange: direct, fanout, topic or headers'))
    .option('--auto-delete', 'delete it when its last binding goes')
    .option('--alternate-exchange <name>', 'where what it cannot route goes')
    .action(action(async (client, name: string, type: string, flags: { autoDelete?: boolean; alternateExchange?: string }) => {
      const result = await client.declareExchange(name, type as 'direct', { autoDelete: flags.autoDelete === true, ...(flags.alternateExchange !== undefined ? { alternateExchange: flags.alternateExchange } : {}) });
      return { json: result, text: `${result.created ? 'declared' : 'exists'} ${name}` };
    }));
  withConnection(exchanges.command('delete <name>').description('delete an exchange'))
    .option('--if-unused', 'only if nothing is bound from it')
    .action(action(async (client, name: string, flags: { ifUnused?: boolean }) => {
      await client.deleteExchange(name, { ifUnused: flags.ifUnused === true });
      return { json: {}, text: `deleted ${name}` };
    }));

  const bindings = program.command('bindings').description('list, add and remove bindings');
  withConnection(bindings.command('list').description('bindings, optionally filtered'))
    .option('--source <exchange>', 'only from this exchange')
    .option('--queue <name>', 'only to this queue')
    .option('--exchange <name>', 'only to this exchange')
    .action(action(async (client, flags: { source?: string; queue?: string; exchange?: string }) => {
      const all = await client.listBindings({ ...(flags.source ? { source: flags.source } : {}), ...(flags.queue ? { queue: flags.queue } : {}), ...(flags.exchange ? { exchange: flags.exchange } : {}) });
      return { json: all, rows: all.map((b) => ({ source: b.source, destination: 'queue' in b.destination ? `queue ${b.destination.queue}` : `exchange ${b.destination.exchange}`, key: b.bindingKey, arguments: Object.keys(b.arguments).length > 0 ? toJson(b.arguments).replace(/\s+/g, ' ') : '' })) };
    }));
  for (const verb of ['add', 'remove'] as const) {
    withConnection(bindings.command(`${verb} <source>`).description(verb === 'add' ? 'bind a queue or an exchange to an exchange' : 'remove a binding'))
      .option('--queue <name>', 'destination queue')
      .option('--exchange <name>', 'destination exchange')
      .option('--key <key>', 'binding key', '')
      .option('--arguments <json>', 'headers-exchange arguments as JSON (with "x-match")', jsonObject)
      .action(action(async (client, source: string, flags: { queue?: string; exchange?: string; key: string; arguments?: Record<string, unknown> }) => {
        if ((flags.queue === undefined) === (flags.exchange === undefined)) throw new InvalidArgumentError('give --queue or --exchange');
        const destination = flags.queue !== undefined ? { queue: flags.queue } : { exchange: flags.exchange! };
        const binding = { source, ...destination, bindingKey: flags.key, ...(flags.arguments !== undefined ? { arguments: flags.arguments as never } : {}) };
        const result = verb === 'add' ? await client.bind(binding) : await client.unbind(binding);
        return { json: result, text: verb === 'add' ? ('created' in result && result.created ? 'bound' : 'already bound') : ('removed' in result && result.removed ? 'removed' : 'no such binding') };
      }));
  }

  const consumers = program.command('consumers').description("a queue's consumers");
  withConnection(consumers.command('list <queue>').description("a queue's consumers, from its leader"))
    .action(action(async (client, queue: string) => {
      const all = await client.listConsumers(queue);
      return { json: all, rows: all.map((c) => ({ tag: c.consumerTag, prefetch: c.prefetch, priority: c.priority, unacked: c.unacked, active: c.active })) };
    }));

  // `quorumq cluster` alone starts a local cluster (what `npm start` runs); its subcommands talk to a running one.
  const cluster = program.commands.find((c) => c.name() === 'cluster') ?? program.command('cluster');
  // Its own options (-n, --nodes <count>, ...) come before a subcommand; those after are the subcommand's.
  program.enablePositionalOptions();
  cluster.enablePositionalOptions();
  withConnection(cluster.command('status').description('the nodes: reachable, alarms, metadata leader'))
    .action(action(async (client) => {
      const status = await client.clusterStatus();
      const rows = Object.values(status.nodes).map((n) => ({ id: n.id, address: n.address, reachable: n.reachable, metadataLeader: n.id === status.metadataLeader, diskAlarm: n.diskAlarm, memoryAlarm: n.memoryAlarm }));
      return { json: { node: status.node, metadataLeader: status.metadataLeader, nodes: Object.values(status.nodes), queues: Object.keys(status.queues).length }, rows };
    }));

  const users = program.command('users').description('users and their permissions (docs/security.md); needs the administrator tag');
  withConnection(users.command('list').description('users, their tags and permissions'))
    .action(action(async (client) => {
      const all = await client.listUsers();
      return { json: all, rows: all.map((u) => ({ name: u.name, tags: u.tags.join(','), password: u.hasPassword, configure: u.permissions?.configure ?? '', write: u.permissions?.write ?? '', read: u.permissions?.read ?? '' })) };
    }));
  withConnection(users.command('put <name>').description('create a user or change its password and tags'))
    .option('--new-password <password>', "the user's password (unset: a new user authenticates by client certificate only; an existing one keeps its own)")
    .option('--tags <list>', 'comma-separated tags, replacing its tags (e.g. administrator)', list, [])
    .action(action(async (client, name: string, flags: { newPassword?: string; tags: string[] }) => {
      const result = await client.putUser(name, { tags: flags.tags, ...(flags.newPassword !== undefined ? { password: flags.newPassword } : {}) });
      return { json: result, text: `${result.created ? 'created' : 'changed'} user ${name}` };
    }));
  withConnection(users.command('delete <name>').description('delete a user'))
    .action(action(async (client, name: string) => {
      await client.deleteUser(name);
      return { json: {}, text: `deleted user ${name}` };
    }));
  withConnection(users.command('set-permissions <name> <configure> <write> <read>').description('RabbitMQ-style regular expressions over queue and exchange names ("" matches nothing)'))
    .action(action(async (client, name: string, configure: string, write: string, read: string) => {
      await client.setPermissions(name, { configure, write, read });
      return { json: {}, text: `set permissions of ${name}` };
    }));
  withConnection(users.command('clear-permissions <name>').description("remove a user's permissions"))
    .action(action(async (client, name: string) => {
      await client.clearPermissions(name);
      return { json: {}, text: `cleared permissions of ${name}` };
    }));
  withConnection(program.command('whoami').description('who the cluster takes you for, and what you may do'))
    .action(action(async (client) => {
      const me = await client.whoAmI();
      return { json: me, rows: [{ user: me.user || '(anonymous)', mechanism: me.mechanism, tags: me.tags.join(','), configure: me.permissions?.configure ?? '', write: me.permissions?.write ?? '', read: me.permissions?.read ?? '', authenticationRequired: me.authenticationRequired }] };
    }));
}

function bar(done: number, total: number, width = 30): string {
  const filled = total === 0 ? width : Math.round((done / total) * width);
  return `[${'#'.repeat(filled)}${'.'.repeat(width - filled)}]`;
}
