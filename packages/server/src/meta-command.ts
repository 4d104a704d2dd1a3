/**
 * The shape check of metadata commands. A metadata entry is untrusted input: it may come
 * from a log written by another version, or (before it was refused) from a forged peer
 * call. `parseMetaCommand` accepts exactly the commands MetaMachine can apply and names the
 * first problem of anything else; the machine applies such an entry as a no-op with an
 * error reply, on every replica alike, so a log holding it can always be replayed.
 * The checks need no state and no configuration: they are the same on every node.
 */
import type { QueueArgumentsInput, TopologyCommand } from '@quorumq/queue';
import type { NodeId } from '@quorumq/raft';

import { peerAddressProblem, type SeedNode } from './cluster-nodes.js';
import { decodeJson } from './json-codec.js';
import type { MetaCommand } from './meta-machine.js';
import { PASSWORD_HASH_LENGTH_MAX, permissionsProblem, tagsProblem, userNameProblem, type Permissions } from './users.js';

/** A queue has at most this many replicas (more than any cluster this broker runs). */
export const QUEUE_MEMBERS_MAX = 64;

/**
 * A batch entry holds at most this many commands (MetaBatcher proposes fewer; a replica
 * refuses a longer one as malformed, whoever wrote it).
 */
export const META_BATCH_MAX = 1024;

/** The node id syntax of the configuration (config.ts). */
const NODE_ID = /^[A-Za-z0-9_.-]{1,64}$/;

export type ParsedMetaCommand = { readonly ok: true; readonly command: MetaCommand } | { readonly ok: false; readonly problem: string };

type Fields = Record<string, unknown>;

/** A plain JSON object (not an array, nor a tagged map or bytes value). */
function isObject(value: unknown): value is Fields {
  return typeof value === 'object' && value !== null && !Array.isArray(value) && !(value instanceof Map) && !(value instanceof Uint8Array);
}

const bad = (problem: string): ParsedMetaCommand => ({ ok: false, problem });

/**
 * A metadata entry: one command, or a batch (`{ type: 'batch', commands: [...] }`, see
 * meta-batcher.ts) whose commands are applied in order, each with its own reply. A command
 * of a batch that fails the check gets its own error; the others still apply.
 */
export type ParsedMetaEntry =
  | { readonly kind: 'one'; readonly parsed: ParsedMetaCommand }
  | { readonly kind: 'batch'; readonly commands: readonly ParsedMetaCommand[] };

/** Decodes and checks an entry's bytes: one command, or a batch of them. */
export function decodeMetaEntry(data: Uint8Array): ParsedMetaEntry {
  let value: unknown;
  try {
    value = decodeJson<unknown>(data);
  } catch (error) {
    return { kind: 'one', parsed: bad(`not a JSON metadata command (${error instanceof Error ? error.message : String(error)})`) };
  }
  if (!isObject(value) || value['type'] !== 'batch') return { kind: 'one', parsed: parseMetaCommand(value) };
  const commands = value['commands'];
  if (!Array.isArray(commands) || commands.length === 0 || commands.length > META_BATCH_MAX) {
    return { kind: 'one', parsed: bad(`batch: commands must be an array of 1 to ${META_BATCH_MAX} commands, got ${describe(commands)}`) };
  }
  return { kind: 'batch', commands: commands.map((command: unknown) => parseMetaCommand(command)) };
}

/** Decodes and checks one command's bytes (a batch is not a command: see decodeMetaEntry). */
export function decodeMetaCommand(data: Uint8Array): ParsedMetaCommand {
  const entry = decodeMetaEntry(data);
  return entry.kind === 'one' ? entry.parsed : bad('a batch of metadata commands is not one command');
}

/** Checks a decoded value; the command returned holds only the fields the machine reads. */
export function parseMetaCommand(value: unknown): ParsedMetaCommand {
  if (!isObject(value)) return bad(`a metadata command must be an object, got ${describe(value)}`);
  switch (value['type']) {
    case 'barrier':
      return { ok: true, command: { type: 'barrier' } };
    case 'topology':
      if (!isObject(value['command'])) return bad(`topology: command must be an object, got ${describe(value['command'])}`);
      // Its fields are checked by Topology.apply, which refuses anything it cannot apply.
      return { ok: true, command: { type: 'topology', command: value['command'] as unknown as TopologyCommand } };
    case 'declareQueue':
      return parseDeclareQueue(value);
    case 'deleteQueue':
      return parseDeleteQueue(value);
    case 'putUser':
    case 'deleteUser':
    case 'setPermissions':
    case 'clearPermissions':
      return parseUserCommand(value);
    case 'addNode':
    case 'removeNode':
    case 'nodeRemoved':
    case 'growQueue':
    case 'shrinkQueue':
    case 'retireReplica':
    case 'preferLeader':
    case 'rebalance':
      return parseMembershipCommand(value);
    case 'batch':
      return bad('a batch of metadata commands is not one command (only the leader batches them)');
    default:
      return bad(`unknown metadata command type ${describe(value['type'])}`);
  }
}

function parseDeclareQueue(value: Fields): ParsedMetaCommand {
  const { name, args, passive, members, createdAt } = value;
  if (typeof name !== 'string') return bad(`declareQueue: name must be a string, got ${describe(name)}`);
  if (args !== undefined && !isObject(args)) return bad(`declareQueue: args must be an object, got ${describe(args)}`);
  if (typeof passive !== 'boolean') return bad(`declareQueue: passive must be a boolean, got ${describe(passive)}`);
  const membersProblem = memberListProblem(members);
  if (membersProblem !== null) return bad(`declareQueue: ${membersProblem}`);
  if (createdAt !== undefined && !(typeof createdAt === 'number' && Number.isSafeInteger(createdAt) && createdAt >= 0)) {
    return bad(`declareQueue: createdAt must be a timestamp in ms, got ${describe(createdAt)}`);
  }
  return {
    ok: true,
    command: {
      type: 'declareQueue',
      name,
      args: (args ?? {}) as QueueArgumentsInput,
      passive,
      members: members as NodeId[],
      ...(createdAt !== undefined ? { createdAt: createdAt as number } : {}),
    },
  };
}

function parseDeleteQueue(value: Fields): ParsedMetaCommand {
  const { name, reason, createdIndex } = value;
  if (typeof name !== 'string') return bad(`deleteQueue: name must be a string, got ${describe(name)}`);
  if (typeof reason !== 'string') return bad(`deleteQueue: reason must be a string, got ${describe(reason)}`);
  if (createdIndex !== undefined && !(typeof createdIndex === 'number' && Number.isSafeInteger(createdIndex) && createdIndex >= 1)) {
    return bad(`deleteQueue: createdIndex must be a log index, got ${describe(createdIndex)}`);
  }
  return {
    ok: true,
    command: { type: 'deleteQueue', name, reason, ...(createdIndex !== undefined ? { createdIndex: createdIndex as number } : {}) },
  };
}

/** The user commands (users.ts): names, tags, hashes and patterns as the service checks them before proposing. */
function parseUserCommand(value: Fields): ParsedMetaCommand {
  const type = value['type'] as 'putUser' | 'deleteUser' | 'setPermissions' | 'clearPermissions';
  const name = value['name'];
  const nameProblem = userNameProblem(name);
  if (nameProblem !== null) return bad(`${type}: ${nameProblem}`);
  const user = name as string;
  switch (type) {
    case 'deleteUser':
    case 'clearPermissions':
      return { ok: true, command: { type, name: user } };
    case 'setPermissions': {
      const problem = permissionsProblem(value['permissions']);
      if (problem !== null) return bad(`setPermissions: ${problem}`);
      return { ok: true, command: { type, name: user, permissions: permissionsOf(value['permissions']) } };
    }
    case 'putUser': {
      const { passwordHash, tags, permissions, ifAbsent } = value;
      if (passwordHash !== undefined && passwordHash !== null && !(typeof passwordHash === 'string' && passwordHash.length <= PASSWORD_HASH_LENGTH_MAX)) {
        return bad(`putUser: passwordHash must be a hash string of at most ${PASSWORD_HASH_LENGTH_MAX} characters, or null`);
      }
      const tagProblem = tagsProblem(tags);
      if (tagProblem !== null) return bad(`putUser: ${tagProblem}`);
      if (permissions !== undefined) {
        const problem = permissionsProblem(permissions);
        if (problem !== null) return bad(`putUser: ${problem}`);
      }
      if (ifAbsent !== undefined && typeof ifAbsent !== 'boolean') return bad(`putUser: ifAbsent must be a boolean, got ${describe(ifAbsent)}`);
      return {
        ok: true,
        command: {
          type,
          name: user,
          ...(passwordHash !== undefined ? { passwordHash: passwordHash as string | null } : {}),
          tags: [...(tags as string[])],
          ...(permissions !== undefined ? { permissions: permissionsOf(permissions) } : {}),
          ...(ifAbsent === true ? { ifAbsent: true } : {}),
        },
      };
    }
  }
}

/** The node and queue membership commands (cluster-nodes.ts, queue-membership.ts). */
function parseMembershipCommand(value: Fields): ParsedMetaCommand {
  const type = value['type'] as 'addNode' | 'removeNode' | 'nodeRemoved' | 'growQueue' | 'shrinkQueue' | 'retireReplica' | 'preferLeader' | 'rebalance';
  const nodeField = type === 'addNode' || type === 'removeNode' || type === 'nodeRemoved' ? 'id' : 'node';
  let seed: SeedNode[] | undefined;
  if (value['seed'] !== undefined) {
    const problem = seedProblem(value['seed']);
    if (problem !== null) return bad(`${type}: ${problem}`);
    seed = (value['seed'] as SeedNode[]).map((node) => ({ id: node.id, peerAddress: node.peerAddress }));
  }
  const withSeed = seed !== undefined ? { seed } : {};
  if (type === 'rebalance') {
    const problem = memberListProblem(value['nodes']);
    if (problem !== null) return bad(`rebalance: ${problem.replace('members', 'nodes')}`);
    return { ok: true, command: { type, nodes: [...(value['nodes'] as NodeId[])] } };
  }
  const node = value[nodeField];
  if (typeof node !== 'string' || !NODE_ID.test(node)) return bad(`${type}: ${nodeField} must be a node id, got ${describe(node)}`);
  switch (type) {
    case 'addNode': {
      const problem = peerAddressProblem(value['peerAddress']);
      if (problem !== null) return bad(`addNode: ${problem}`);
      return { ok: true, command: { type, id: node, peerAddress: value['peerAddress'] as string, ...withSeed } };
    }
    case 'removeNode': {
      const replacement = value['replacement'];
      if (replacement !== undefined && !(typeof replacement === 'string' && NODE_ID.test(replacement))) {
        return bad(`removeNode: replacement must be a node id, got ${describe(replacement)}`);
      }
      return { ok: true, command: { type, id: node, ...(replacement !== undefined ? { replacement: replacement as string } : {}), ...withSeed } };
    }
    case 'nodeRemoved':
      return { ok: true, command: { type, id: node } };
    default: {
      const name = value['name'];
      if (typeof name !== 'string') return bad(`${type}: name must be a string, got ${describe(name)}`);
      if (type === 'retireReplica') {
        const createdIndex = value['createdIndex'];
        if (!(typeof createdIndex === 'number' && Number.isSafeInteger(createdIndex) && createdIndex >= 1)) {
          return bad(`retireReplica: createdIndex must be a log index, got ${describe(createdIndex)}`);
        }
        return { ok: true, command: { type, name, createdIndex, node } };
      }
      return { ok: true, command: type === 'growQueue' ? { type, name, node, ...withSeed } : { type, name, node } };
    }
  }
}

function seedProblem(seed: unknown): string | null {
  if (!Array.isArray(seed) || seed.length === 0 || seed.length > QUEUE_MEMBERS_MAX) return `seed must be a list of 1 to ${QUEUE_MEMBERS_MAX} nodes`;
  const seen = new Set<string>();
  for (const node of seed) {
    if (!isObject(node) || typeof node['id'] !== 'string' || !NODE_ID.test(node['id'])) return `seed: each node needs an id, got ${describe(node)}`;
    if (seen.has(node['id'])) return `seed names ${node['id']} twice`;
    seen.add(node['id']);
    const problem = peerAddressProblem(node['peerAddress']);
    if (problem !== null) return `seed: ${problem}`;
  }
  return null;
}

const permissionsOf = (value: unknown): Permissions => {
  const p = value as Permissions;
  return { configure: p.configure, write: p.write, read: p.read };
};

/** Node ids of the configuration's syntax, no repeats, at most QUEUE_MEMBERS_MAX (empty is the machine's NO_MEMBERS). */
function memberListProblem(members: unknown): string | null {
  if (!Array.isArray(members)) return `members must be an array of node ids, got ${describe(members)}`;
  if (members.length > QUEUE_MEMBERS_MAX) return `a queue has at most ${QUEUE_MEMBERS_MAX} replicas, got ${members.length}`;
  const seen = new Set<string>();
  for (const member of members) {
    if (typeof member !== 'string' || !NODE_ID.test(member)) return `members must be node ids, got ${describe(member)}`;
    if (seen.has(member)) return `members name ${member} twice`;
    seen.add(member);
  }
  return null;
}

/** A short description of a bad value for an error message; never throws (values may hold bigints, cycles do not occur). */
function describe(value: unknown): string {
  if (value === undefined) return 'nothing';
  if (typeof value === 'bigint') return `${value}n`;
  if (value instanceof Uint8Array) return 'bytes';
  if (value instanceof Map) return 'a map';
  let text: string;
  try {
    text = JSON.stringify(value) ?? String(value);
  } catch {
    text = Array.isArray(value) ? 'an array' : typeof value;
  }
  return text.length > 80 ? `${text.slice(0, 77)}...` : text;
}
