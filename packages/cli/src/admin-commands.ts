/**
 * The operator's verbs (`quorumq queues|exchanges|bindings|consumers|cluster|users|check|whoami`),
 * each one SDK call against a running cluster: human tables by default, `--json` for
 * scripts, the SDK's connection options (nodes, TLS, user and password). Errors print the
 * broker's message and reason and exit 1; bad arguments exit 2 (commander).
 *
 * The membership verbs (`cluster add-node|remove-node|rebalance`, `queues
 * grow|shrink|transfer-leader`; docs/operations.md) record a change and then wait, with
 * progress on stderr (progress.ts), until the cluster has carried it out (wait.ts): unless
 * `--no-wait`, and exit 1 after `--timeout`.
 */
import { Command, InvalidArgumentError, Option } from 'commander';
import type { ConnectOptions, QueueArguments, QueueStatus, QuorumqClient } from '@quorumq/client';

import { Progress } from './progress.js';
import { formatTable } from './table.js';
import { WaitTimeout, waitUntil, type Waiting } from './wait.js';

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

/**
 * What a verb prints: `json` with --json, else `rows` as a table or `text`. `warning` goes to
 * stderr and `exitCode` is the process's (a check that failed, a wait that timed out, with
 * the result printed all the same).
 */
interface Outcome {
  json: unknown;
  rows?: Rows;
  text?: string;
  warning?: string;
  exitCode?: number;
}

/** Runs `work` with a client; prints its result as a table (rows) or JSON; reports a failure and exits 1. */
function action<A extends unknown[]>(work: (client: QuorumqClient, ...args: A) => Promise<Outcome>) {
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
      if (result.warning !== undefined) process.stderr.write(`quorumq: ${result.warning}\n`);
      if (result.exitCode !== undefined) process.exitCode = result.exitCode;
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
      const status = await client.clusterStatus({ depths: true });
      // Retiring: replicas removed from `members` that their group has not dropped yet.
      const rows = Object.values(status.queues).map((q) => ({ name: q.name, leader: q.leader, members: q.members.join(','), ready: q.ready, unacked: q.unacked, delayed: q.delayed, consumers: q.consumers, bytes: q.bytes, retiring: q.retiring.join(',') }));
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
  withConnection(queues.command('status <name>').description("a queue's leader, members, depths and Raft group (voters, learners, retiring replicas; from its leader)"))
    .action(action(async (client, name: string) => {
      const q = await client.queueStatus(name);
      // Spec 9: a compacting queue also shows its keys, replaced messages and tombstones.
      const compaction = q.compaction === undefined ? {} : { keys: q.compaction.keys, replaced: q.compaction.replaced, tombstones: q.compaction.tombstones };
      return {
        json: q,
        rows: [{ name: q.name, leader: q.leader, members: q.members.join(','), ready: q.ready, unacked: q.unacked, delayed: q.delayed, deadLettering: q.deadLettering, consumers: q.consumers, bytes: q.bytes, commitIndex: q.commitIndex, voters: q.voters.join(','), learners: q.learners.join(','), retiring: q.retiring.join(','), ...compaction }],
      };
    }));
  withConnection(queues.command('move <source> <exchange>').description("move a queue's messages to an exchange (spec 8), with progress"))
    .option('--routing-key <key>', 'publish with this key (default: each message keeps its own)')
    .option('--limit <n>', 'at most this many (default: what the source holds at the start)', integerArg)
    .action(action(async (client, source: string, exchange: string, flags: { routingKey?: string; limit?: number }) => {
      // Off a terminal, a line a second at most: a move reports every message.
      const progress = new Progress({ minIntervalMs: 1000 });
      let result;
      try {
        result = await client.move({
          sourceQueue: source,
          destinationExchange: exchange,
          ...(flags.routingKey !== undefined ? { routingKey: flags.routingKey } : {}),
          ...(flags.limit !== undefined ? { limit: flags.limit } : {}),
          onProgress: (p) => progress.update(p.moved, p.total, `moved ${p.moved} of ${p.total} messages`),
        });
      } finally {
        progress.finish();
      }
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
  withConnection(cluster.command('status').description('the nodes: reachable, state (active or removing), metadata voter, alarms, metadata leader, peer address'))
    .action(action(async (client) => {
      const status = await client.clusterStatus();
      const rows = Object.values(status.nodes).map((n) => ({
        id: n.id,
        address: n.address,
        reachable: n.reachable,
        state: n.state,
        voter: n.voter,
        metadataLeader: n.id === status.metadataLeader,
        diskAlarm: n.diskAlarm,
        memoryAlarm: n.memoryAlarm,
        peerAddress: n.peerAddress,
      }));
      return { json: { node: status.node, metadataLeader: status.metadataLeader, nodes: Object.values(status.nodes), queues: Object.keys(status.queues).length }, rows };
    }));

  addMembershipCommands(program, queues, cluster);

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

// ------------------------------------------------------------------ membership (docs/operations.md, "Membership")

interface WaitFlags {
  /** false with --no-wait. */
  wait: boolean;
  timeout: number;
}

const DEFAULT_WAIT_MS = 120_000;

/** --no-wait and --timeout of a verb that waits until its change is carried out. */
function withWait(command: Command, until: string): Command {
  return command
    .option('--no-wait', `return once the change is recorded, without waiting until ${until}`)
    .option('--timeout <ms>', 'stop waiting after this long and exit 1 (the change goes on in the cluster)', integerArg, DEFAULT_WAIT_MS);
}

interface ManualPage {
  readonly description: string;
  readonly exitStatus: ReadonlyArray<readonly [code: string, meaning: string]>;
  readonly examples: readonly string[];
}

/** The exit statuses of a verb that records a change and waits for it. */
const CHANGE_EXIT_STATUS = (done: string): ManualPage['exitStatus'] => [
  ['0', `${done} (with --no-wait: the change was recorded)`],
  ['1', 'the broker refused the change (its message and reason on stderr), no node answered, or --timeout passed first'],
  ['2', 'bad arguments'],
];

/** A man-page tail for `--help`: what the verb does in full, its exit status, examples. */
function manual(command: Command, page: ManualPage): Command {
  const indent = (text: string): string => text.split('\n').map((line) => (line === '' ? '' : `  ${line}`)).join('\n');
  return command.addHelpText(
    'after',
    [
      '',
      'Description:',
      indent(page.description.trim()),
      '',
      'Exit status:',
      ...page.exitStatus.map(([code, meaning]) => `  ${code}  ${meaning}`),
      '',
      'Examples:',
      ...page.examples.map((example) => `  $ ${example}`),
    ].join('\n'),
  );
}

/** Waits with a progress display on stderr (see waitUntil); the display ends either way. */
async function watch(what: string, timeoutMs: number, check: (progress: Progress) => Promise<Waiting>): Promise<void> {
  const progress = new Progress();
  try {
    await waitUntil(what, timeoutMs, () => check(progress));
  } finally {
    progress.finish();
  }
}

/** `items` through `work`, at most `limit` at a time, results in order. */
async function mapLimit<T, R>(items: readonly T[], limit: number, work: (item: T) => Promise<R>): Promise<R[]> {
  const results: R[] = new Array<R>(items.length);
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < items.length) {
      const i = next++;
      results[i] = await work(items[i]!);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return results;
}

interface Leadership {
  readonly nodes: readonly string[];
  readonly queues: ReadonlyArray<{ readonly name: string; readonly leader: string; readonly preferred: string }>;
}

/**
 * Each queue's leader and preferred leader (its first member). The node answering
 * ClusterStatus knows the leaders of the queues it holds a replica of; each other queue's
 * leader answers for it (QueueStatus).
 */
async function leadership(client: QuorumqClient): Promise<Leadership> {
  const status = await client.clusterStatus();
  const queues = await mapLimit(Object.values(status.queues), 16, async (q) => {
    const leader = q.leader !== '' ? q.leader : ((await client.queueStatus(q.name).catch(() => null))?.leader ?? '');
    return { name: q.name, leader, preferred: q.members[0] ?? '' };
  });
  return { nodes: Object.keys(status.nodes).sort(), queues };
}

const names = (ids: readonly string[]): string => (ids.length === 0 ? 'none' : ids.join(', '));

/** A queue's Raft group as its leader reports it, for --json. */
const groupOf = (q: QueueStatus): Record<string, unknown> => ({ leader: q.leader, members: q.members, voters: q.voters, learners: q.learners, retiring: q.retiring });

function addMembershipCommands(program: Command, queues: Command, cluster: Command): void {
  // ---- cluster add-node
  manual(
    withWait(
      withConnection(
        cluster
          .command('add-node')
          .description('add a node started with `quorumq node --join` to the cluster; wait until it votes in the metadata group')
          .argument('<id>', "the new node's id (its QUORUMQ_NODE_ID); not the id of a node the cluster removed")
          .argument('<peer-address>', 'host:port where the other nodes reach its peer listener (its QUORUMQ_PEER_LISTEN)'),
      ),
      'the node votes in the metadata group',
    ),
    {
      description: `
Adds node <id> to the cluster. Start the node first with \`quorumq node --join\` (config
\`join\`, env QUORUMQ_JOIN=true): it then waits for the cluster instead of founding one of
its own. The metadata group records the node at once; its leader then adds it to the group
as a learner, which receives the metadata and is promoted to a voter once it caught up.
Progress goes to stderr. The new node holds no queue replica yet: grow queues onto it
(\`quorumq queues grow\`), declare new ones, or move a removed node's replicas to it
(\`quorumq cluster remove-node --replace-with\`). Adding a node that is already a member
changes nothing.`,
      exitStatus: CHANGE_EXIT_STATUS('the node votes in the metadata group'),
      examples: [
        'quorumq node --join --config n4.json &   # on the new machine: peers = n4 itself and the running nodes',
        'quorumq cluster add-node n4 10.0.0.4:8001',
        'quorumq cluster add-node n4 10.0.0.4:8001 --no-wait --json',
      ],
    },
  ).action(
    action(async (client, id: string, peerAddress: string, flags: WaitFlags) => {
      const { changed } = await client.addNode(id, peerAddress);
      if (flags.wait) {
        await watch(`${id} to vote in the metadata group`, flags.timeout, async (progress) => {
          const node = (await client.clusterStatus()).nodes[id];
          if (node === undefined) {
            progress.update(0, 2, `${id} added; not yet listed by the node answering`);
            return `${id} is not listed yet`;
          }
          if (!node.voter) {
            const label = node.reachable
              ? `${id} is catching up as a learner of the metadata group`
              : `${id} is not reachable: is it running with --join, its peer listener at ${node.peerAddress || peerAddress}?`;
            progress.update(1, 2, label);
            return label;
          }
          progress.update(2, 2, `${id} votes in the metadata group`);
          return true;
        });
      }
      const text = !changed && flags.wait ? `${id} is a member of the cluster (no change)` : flags.wait ? `added ${id} (peer address ${peerAddress}): it votes in the metadata group` : `added ${id} (peer address ${peerAddress}); follow with \`quorumq cluster status\``;
      return { json: { node: id, peerAddress, changed, waited: flags.wait }, text };
    }),
  );

  // ---- cluster remove-node
  manual(
    withWait(
      withConnection(
        cluster
          .command('remove-node')
          .description("remove a node: move its queue replicas to --replace-with (or shrink them away), then take it out of the metadata group; wait, with progress")
          .argument('<id>', 'the node to remove (it may be down for good)')
          .option('--replace-with <id>', "a node (added first) that takes over each of its queue replicas"),
      ),
      'the node is gone',
    ),
    {
      description: `
Removes node <id> from the cluster. Each queue with a replica on it gets the --replace-with
node in its place (the new replica catches up as a learner before the old one leaves), or,
without --replace-with, loses that replica; a queue whose only replica is on <id> needs
--replace-with (the change is refused otherwise, changing nothing). Until each queue's group
dropped it, the node is listed in the queue's \`retiring\` replicas; then it leaves the
metadata group and disappears from \`quorumq cluster status\`. The command waits until then,
showing "moved N of M replicas" on stderr (M: the queues that had a replica on it when it
started). Stop the node afterwards. A removed node's id cannot be added again.

To replace a node whose disk was lost: start a new node with --join, \`quorumq cluster
add-node\` it, then \`quorumq cluster remove-node <lost> --replace-with <new>\`.`,
      exitStatus: CHANGE_EXIT_STATUS('the node is gone from the cluster and no queue lists it'),
      examples: ['quorumq cluster remove-node n3', 'quorumq cluster remove-node n2 --replace-with n5 --timeout 600000', 'quorumq check quorum-critical n3 && quorumq cluster remove-node n3'],
    },
  ).action(
    action(async (client, id: string, flags: WaitFlags & ConnectionOptions & { replaceWith?: string }) => {
      const before = await client.clusterStatus();
      const lists = (q: QueueStatus): boolean => q.members.includes(id) || q.retiring.includes(id);
      const holding = Object.values(before.queues).filter(lists).map((q) => q.name);
      const { changed } = await client.removeNode(id, flags.replaceWith !== undefined ? { replacement: flags.replaceWith } : {});
      if (flags.wait) {
        // The node being removed stops hearing of the cluster: ask the others.
        const avoid = before.nodes[id]?.address;
        const configured = connectOptions(flags).nodes;
        const others = [...configured, ...Object.values(before.nodes).map((n) => n.address)].filter((a, i, all) => a !== '' && a !== avoid && all.indexOf(a) === i);
        const { connect } = await import('@quorumq/client');
        const watcher = others.length > 0 ? connect({ ...connectOptions(flags), nodes: others }) : client;
        try {
          await watch(`${id} to leave the cluster`, flags.timeout, async (progress) => {
            const status = await watcher.clusterStatus();
            const moved = holding.filter((name) => status.queues[name] === undefined || !lists(status.queues[name]!)).length;
            const still = Object.values(status.queues).filter(lists).map((q) => q.name);
            const gone = status.nodes[id] === undefined;
            const label = `moved ${moved} of ${holding.length} replicas${still.length > 0 ? '' : gone ? `; ${id} removed` : `; ${id} is leaving the metadata group`}`;
            progress.update(moved, holding.length, label);
            if (gone && still.length === 0) return true;
            return still.length > 0 ? `${label}; still listed by queue${still.length > 1 ? 's' : ''} ${still.slice(0, 10).join(', ')}${still.length > 10 ? ', ...' : ''}` : label;
          });
        } finally {
          if (watcher !== client) await watcher.close().catch(() => undefined);
        }
      }
      const where = flags.replaceWith !== undefined ? `moved to ${flags.replaceWith}` : 'shrunk away';
      const text = flags.wait ? `removed ${id}: ${holding.length} replica${holding.length === 1 ? '' : 's'} ${where}` : `removing ${id} (${holding.length} replica${holding.length === 1 ? '' : 's'} to be ${where}); follow with \`quorumq cluster status\``;
      return { json: { node: id, replacement: flags.replaceWith ?? null, changed, replicas: holding.length, waited: flags.wait }, text };
    }),
  );

  // ---- cluster rebalance
  manual(
    withWait(withConnection(cluster.command('rebalance').description("spread the queues' leaders over the reachable nodes; wait until each queue is led by its preferred leader; print the leaders per node")), "each queue is led by its preferred leader"),
    {
      description: `
Makes one node of each queue its preferred leader (its first member), spreading them as
evenly as the queues' members allow over the nodes the answering node reaches; each queue's
leader then hands leadership over to it. Waits, with progress on stderr, until every queue
is led by its preferred leader, then prints per node the queues it leads (LEADERS) and those
it should lead (PREFERRED). On a timeout it prints them all the same and exits 1. Run it
after a node came back or was added.`,
      exitStatus: CHANGE_EXIT_STATUS('every queue is led by its preferred leader'),
      examples: ['quorumq cluster rebalance', 'quorumq cluster rebalance --json --timeout 30000'],
    },
  ).action(
    action(async (client, flags: WaitFlags) => {
      const { changed } = await client.rebalance();
      let view = await leadership(client);
      let warning: string | undefined;
      if (flags.wait) {
        try {
          await watch('every queue to be led by its preferred leader', flags.timeout, async (progress) => {
            view = await leadership(client);
            const unsettled = view.queues.filter((q) => q.leader !== q.preferred);
            const settled = view.queues.length - unsettled.length;
            progress.update(settled, view.queues.length, `${settled} of ${view.queues.length} queues led by their preferred leader`);
            if (unsettled.length === 0) return true;
            return `not yet: ${unsettled.slice(0, 10).map((q) => `${q.name} led by ${q.leader || 'no node'}, not ${q.preferred}`).join('; ')}${unsettled.length > 10 ? '; ...' : ''}`;
          });
        } catch (error) {
          if (!(error instanceof WaitTimeout)) throw error;
          warning = error.message;
        }
      }
      const count = (pick: (q: Leadership['queues'][number]) => string, node: string): number => view.queues.filter((q) => pick(q) === node).length;
      const nodes = [...new Set([...view.nodes, ...view.queues.map((q) => q.leader).filter((l) => l !== '')])].sort();
      const rows = nodes.map((node) => ({ node, leaders: count((q) => q.leader, node), preferred: count((q) => q.preferred, node) }));
      const balanced = view.queues.every((q) => q.leader === q.preferred);
      return { json: { changed, balanced, queues: view.queues.length, nodes: rows }, rows, ...(warning !== undefined ? { warning, exitCode: 1 } : {}) };
    }),
  );

  // ---- queues grow / shrink / transfer-leader
  manual(
    withWait(
      withConnection(
        queues
          .command('grow')
          .description("add a replica of a queue on a node; wait until it votes in the queue's group")
          .argument('<name>', 'the queue')
          .argument('<node>', 'an active node without a replica of it'),
      ),
      "the new replica votes in the queue's group",
    ),
    {
      description: `
Adds <node> to the queue's members. The queue's leader adds it to the queue's Raft group as a
learner, which receives the log (or a snapshot) and is promoted to a voter once it caught
up: the group's fault tolerance never drops during the change. Waits, with progress on
stderr, until the queue's leader reports <node> among the voters, no learner left and no
replica retiring. Growing onto a node that already holds a replica changes nothing.`,
      exitStatus: CHANGE_EXIT_STATUS("the node votes in the queue's group"),
      examples: ['quorumq queues grow orders n4', 'quorumq queues grow orders n4 --no-wait'],
    },
  ).action(
    action(async (client, name: string, node: string, flags: WaitFlags) => {
      const { changed } = await client.growQueue(name, node);
      const seen: { last: QueueStatus | null } = { last: null };
      if (flags.wait) {
        await watch(`${node} to vote in the group of queue ${name}`, flags.timeout, async (progress) => {
          const q = (seen.last = await client.queueStatus(name));
          if (q.voters.includes(node) && q.members.includes(node) && q.learners.length === 0 && q.retiring.length === 0) {
            progress.update(3, 3, `${node} votes in the group of queue ${name} (voters ${names(q.voters)})`);
            return true;
          }
          const label = q.voters.includes(node)
            ? `${node} votes; the group settles (learners ${names(q.learners)}, retiring ${names(q.retiring)})`
            : q.learners.includes(node)
              ? `${node} is catching up as a learner`
              : `waiting for the queue's leader (${q.leader || 'none yet'}) to add ${node}`;
          progress.update(q.voters.includes(node) ? 2 : q.learners.includes(node) ? 1 : 0, 3, label);
          return label;
        });
      }
      const q = seen.last;
      return {
        json: { queue: name, node, changed, waited: flags.wait, ...(q !== null ? groupOf(q) : {}) },
        text: q !== null ? `queue ${name}: ${node} votes (voters ${names(q.voters)})` : `queue ${name}: growing onto ${node}; follow with \`quorumq queues status ${name}\``,
      };
    }),
  );

  manual(
    withWait(
      withConnection(
        queues
          .command('shrink')
          .description("remove a queue's replica on a node; wait until the group dropped it")
          .argument('<name>', 'the queue')
          .argument('<node>', 'the node whose replica goes'),
      ),
      'the replica is gone',
    ),
    {
      description: `
Removes <node> from the queue's members. The queue's leader removes it from the queue's Raft
group (handing leadership over first when it is the one leaving); until the group's new
configuration is committed the node keeps its replica, listed as \`retiring\`. Waits, with
progress on stderr, until the queue's leader reports <node> in neither the voters nor the
learners and no replica retiring. The last replica of a queue cannot be removed (grow it
onto another node first). Check the queue's fault tolerance first: with two replicas left,
one node down stops it.`,
      exitStatus: CHANGE_EXIT_STATUS("the node's replica left the queue's group and was retired"),
      examples: ['quorumq queues shrink orders n4'],
    },
  ).action(
    action(async (client, name: string, node: string, flags: WaitFlags) => {
      const { changed } = await client.shrinkQueue(name, node);
      const seen: { last: QueueStatus | null } = { last: null };
      if (flags.wait) {
        await watch(`${node} to leave the group of queue ${name}`, flags.timeout, async (progress) => {
          const q = (seen.last = await client.queueStatus(name));
          // No voters: a node without a replica answered; ask again.
          const out = q.voters.length > 0 && !q.voters.includes(node) && !q.learners.includes(node) && !q.members.includes(node);
          if (out && q.retiring.length === 0) {
            progress.update(2, 2, `${node} holds no replica of queue ${name} (voters ${names(q.voters)})`);
            return true;
          }
          const label = out ? `${node} left the group; retiring replicas: ${names(q.retiring)}` : `${node} is still in the group (voters ${names(q.voters)}); its leader (${q.leader || 'none yet'}) removes it`;
          progress.update(out ? 1 : 0, 2, label);
          return label;
        });
      }
      const q = seen.last;
      return {
        json: { queue: name, node, changed, waited: flags.wait, ...(q !== null ? groupOf(q) : {}) },
        text: q !== null ? `queue ${name}: ${node} holds no replica (voters ${names(q.voters)})` : `queue ${name}: shrinking off ${node}; follow with \`quorumq queues status ${name}\``,
      };
    }),
  );

  manual(
    withWait(
      withConnection(
        queues
          .command('transfer-leader')
          .description("make a node the queue's preferred leader; wait until it leads the queue")
          .argument('<name>', 'the queue')
          .argument('<node>', 'a node with a replica of it'),
      ),
      'the node leads the queue',
    ),
    {
      description: `
Makes <node>, which must hold a replica of the queue, its preferred leader (its first
member): the current leader hands leadership over, and leadership goes back to <node> after
a failover once it is up again, until \`quorumq cluster rebalance\` or another transfer
chooses differently. Waits, with progress on stderr, until the queue reports <node> as its
leader.`,
      exitStatus: CHANGE_EXIT_STATUS('the node leads the queue'),
      examples: ['quorumq queues transfer-leader orders n2', 'for q in a b c; do quorumq queues transfer-leader "$q" n1 --no-wait; done'],
    },
  ).action(
    action(async (client, name: string, node: string, flags: WaitFlags) => {
      const { changed } = await client.transferLeadership(name, node);
      const seen: { last: QueueStatus | null } = { last: null };
      if (flags.wait) {
        await watch(`${node} to lead queue ${name}`, flags.timeout, async (progress) => {
          const q = (seen.last = await client.queueStatus(name));
          if (q.leader === node) {
            progress.update(1, 1, `queue ${name} is led by ${node}`);
            return true;
          }
          const label = `queue ${name} is led by ${q.leader || 'no node'}; handing over to ${node}`;
          progress.update(0, 1, label);
          return label;
        });
      }
      const q = seen.last;
      return {
        json: { queue: name, node, changed, waited: flags.wait, ...(q !== null ? groupOf(q) : {}) },
        text: q !== null ? `queue ${name} is led by ${node}` : `queue ${name}: ${node} is its preferred leader; follow with \`quorumq queues status ${name}\``,
      };
    }),
  );

  // ---- check quorum-critical
  const check = program.command('check').description('checks to run before maintenance: exit 0 when it is safe, 1 when it is not');
  manual(
    withConnection(
      check
        .command('quorum-critical')
        .description('whether stopping a node now would leave a queue or the metadata without a majority (exit 1 if so)')
        .argument('<node>', 'the node to stop'),
    ),
    {
      description: `
Asks the cluster which Raft groups would lose their majority if <node> stopped now, counting
only the voters that are up: the queues it holds a voting replica of, and the metadata group
(declarations, users, membership). Exit 0 and "node <node> is not quorum-critical" when there
is none: the node can be stopped (restarted, upgraded) with every queue staying available.
Otherwise exit 1, listing the groups: bring the other nodes back (or wait until they caught
up) before stopping it. Like \`rabbitmq-queues check_if_node_is_quorum_critical\`. With
--json: {"critical": bool, "queues": [...], "metadata": bool}, and the same exit status.`,
      exitStatus: [
        ['0', 'the node is not quorum-critical'],
        ['1', 'the node is quorum-critical (the groups listed), or the check could not run (a message on stderr)'],
        ['2', 'bad arguments'],
      ],
      examples: ['quorumq check quorum-critical n2 && systemctl restart quorumq', 'quorumq check quorum-critical n2 --json'],
    },
  ).action(
    action(async (client, node: string) => {
      const { queues: critical, metadata } = await client.quorumCritical(node);
      const isCritical = critical.length > 0 || metadata;
      const groups = [...(metadata ? ['the metadata group'] : []), ...critical.map((q) => `queue ${q}`)];
      const text = isCritical
        ? `node ${node} is quorum-critical: stopping it now leaves ${groups.length === 1 ? 'this group' : `these ${groups.length} groups`} without a majority:\n${groups.map((g) => `  ${g}`).join('\n')}`
        : `node ${node} is not quorum-critical`;
      return { json: { critical: isCritical, queues: critical, metadata }, text, exitCode: isCritical ? 1 : 0 };
    }),
  );
}
