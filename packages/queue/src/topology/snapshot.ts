import { assert } from './errors.js';
import type { HeaderValue } from './header-value.js';
import { builtInExchange, EXCHANGE_TYPES, type Binding, type BindingArguments, type ExchangeDefinition, type TopologyCommand } from './model.js';
import { Topology } from './topology.js';

/**
 * The whole topology as plain data, in an order that depends only on the contents (never
 * on the history of commands), so two replicas with the same topology produce equal
 * snapshots and equal bytes. The built-in `amq.*` exchanges are not listed: every topology
 * has them (their bindings are listed like any other).
 */
export interface TopologySnapshot {
  readonly version: 1;
  readonly exchanges: readonly ExchangeDefinition[];
  readonly queues: readonly string[];
  readonly bindings: readonly Binding[];
}

export function snapshotTopology(topology: Topology): TopologySnapshot {
  return {
    version: 1,
    exchanges: topology.listExchanges({ includeBuiltIn: false }),
    queues: topology.listQueues(),
    bindings: topology.listBindings(),
  };
}

/**
 * Rebuilds a topology by replaying declarations, so a snapshot is checked exactly like
 * commands from the log. A snapshot that does not replay cleanly is corrupt, and a replica
 * must not route from it.
 */
export function restoreTopology(snapshot: TopologySnapshot): Topology {
  assert(snapshot.version === 1, () => `unknown topology snapshot version ${String(snapshot.version)}`);
  const topology = new Topology();
  const commands: TopologyCommand[] = [
    ...snapshot.queues.map((name): TopologyCommand => ({ type: 'declareQueue', name })),
    // A built-in exchange listed exactly as it is exists already; anything else replays.
    ...snapshot.exchanges.filter((exchange) => !isBuiltInAsIs(exchange)).map(
      (exchange): TopologyCommand => ({
        type: 'declareExchange',
        name: exchange.name,
        exchangeType: exchange.type,
        autoDelete: exchange.autoDelete,
        alternateExchange: exchange.alternateExchange,
      }),
    ),
    ...snapshot.bindings.map((binding): TopologyCommand => ({ type: 'bind', ...binding })),
  ];
  for (const command of commands) {
    const reply = topology.apply(command);
    assert(reply.ok && reply.changed, () => `corrupt topology snapshot: ${JSON.stringify(command.type)} did not replay (${reply.ok ? 'duplicate' : reply.error.message})`);
  }
  topology.assertInvariants();
  return topology;
}

function isBuiltInAsIs(exchange: ExchangeDefinition): boolean {
  const builtIn = builtInExchange(exchange.name);
  return (
    builtIn !== undefined &&
    builtIn.type === exchange.type &&
    builtIn.autoDelete === exchange.autoDelete &&
    builtIn.alternateExchange === exchange.alternateExchange
  );
}

/** JSON-safe forms: bigints as decimal strings, bytes as hex, maps as entry lists. */
type EncodedValue = { readonly t: HeaderValue['type']; readonly v: unknown };

export function encodeTopologySnapshot(snapshot: TopologySnapshot): Uint8Array {
  const bindings = snapshot.bindings.map((binding) => ({ ...binding, arguments: encodeArguments(binding.arguments) }));
  return new TextEncoder().encode(JSON.stringify({ ...snapshot, bindings }));
}

export function decodeTopologySnapshot(bytes: Uint8Array): TopologySnapshot {
  const parsed: unknown = JSON.parse(new TextDecoder().decode(bytes));
  assert(isRecord(parsed) && parsed['version'] === 1, 'malformed topology snapshot: not a version 1 snapshot');
  const { exchanges, queues, bindings } = parsed;
  assert(Array.isArray(exchanges) && Array.isArray(queues) && Array.isArray(bindings), 'malformed topology snapshot: missing lists');
  return {
    version: 1,
    exchanges: exchanges.map(decodeExchange),
    queues: queues.map((name: unknown) => stringField(name, 'queue name')),
    bindings: bindings.map(decodeBinding),
  };
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function stringField(value: unknown, what: string): string {
  assert(typeof value === 'string', () => `malformed topology snapshot: ${what} is not a string`);
  return value;
}

function booleanField(value: unknown, what: string): boolean {
  assert(typeof value === 'boolean', () => `malformed topology snapshot: ${what} is not a boolean`);
  return value;
}

/** Field values are checked again, fully, when restoreTopology replays them as commands. */
function decodeExchange(value: unknown): ExchangeDefinition {
  assert(isRecord(value), 'malformed exchange in topology snapshot');
  const type = stringField(value['type'], 'exchange type');
  assert(EXCHANGE_TYPES.some((known) => known === type), () => `unknown exchange type ${type} in topology snapshot`);
  const alternate = value['alternateExchange'];
  return {
    name: stringField(value['name'], 'exchange name'),
    type: EXCHANGE_TYPES.find((known) => known === type) ?? 'direct',
    autoDelete: booleanField(value['autoDelete'], 'autoDelete'),
    alternateExchange: alternate === null ? null : stringField(alternate, 'alternateExchange'),
  };
}

function decodeBinding(value: unknown): Binding {
  assert(isRecord(value) && isRecord(value['destination']) && Array.isArray(value['arguments']), 'malformed binding in topology snapshot');
  const kind = value['destination']['kind'];
  assert(kind === 'queue' || kind === 'exchange', 'malformed binding destination in topology snapshot');
  return {
    source: stringField(value['source'], 'binding source'),
    destination: { kind, name: stringField(value['destination']['name'], 'binding destination') },
    bindingKey: stringField(value['bindingKey'], 'binding key'),
    arguments: decodeArguments(value['arguments']),
  };
}

function encodeArguments(args: BindingArguments): Array<[string, EncodedValue | null]> {
  return [...args].map(([key, value]) => [key, value === null ? null : encodeValue(value)]);
}

function encodeValue(value: HeaderValue): EncodedValue {
  switch (value.type) {
    case 'string':
    case 'bool':
      return { t: value.type, v: value.value };
    case 'double':
      // JSON cannot carry NaN, infinities or -0; String() can, and Number() reverses it.
      return { t: value.type, v: Object.is(value.value, -0) ? '-0' : String(value.value) };
    case 'int64':
    case 'timestamp':
      return { t: value.type, v: value.value.toString() };
    case 'bytes':
      return { t: value.type, v: Array.from(value.value, (byte) => byte.toString(16).padStart(2, '0')).join('') };
    case 'list':
      return { t: value.type, v: value.value.map(encodeValue) };
    case 'map':
      return { t: value.type, v: [...value.value].map(([key, item]) => [key, encodeValue(item)]) };
  }
}

function decodeArguments(encoded: unknown[]): BindingArguments {
  return new Map(
    encoded.map((entry): [string, HeaderValue | null] => {
      assert(Array.isArray(entry) && typeof entry[0] === 'string', 'malformed binding argument in topology snapshot');
      return [entry[0], entry[1] === null ? null : decodeValue(entry[1])];
    }),
  );
}

function decodeValue(encoded: unknown): HeaderValue {
  assert(typeof encoded === 'object' && encoded !== null && 't' in encoded && 'v' in encoded, 'malformed header value in topology snapshot');
  const { t, v } = encoded;
  switch (t) {
    case 'string':
      assert(typeof v === 'string', 'malformed string in topology snapshot');
      return { type: t, value: v };
    case 'bool':
      assert(typeof v === 'boolean', 'malformed bool in topology snapshot');
      return { type: t, value: v };
    case 'double':
      assert(typeof v === 'string', 'malformed double in topology snapshot');
      return { type: t, value: Number(v) };
    case 'int64':
    case 'timestamp':
      assert(typeof v === 'string' && /^-?\d+$/.test(v), 'malformed integer in topology snapshot');
      return { type: t, value: BigInt(v) };
    case 'bytes':
      assert(typeof v === 'string' && /^(?:[0-9a-f]{2})*$/.test(v), 'malformed bytes in topology snapshot');
      return { type: t, value: Uint8Array.from(v.match(/../g) ?? [], (pair) => parseInt(pair, 16)) };
    case 'list':
      assert(Array.isArray(v), 'malformed list in topology snapshot');
      return { type: t, value: v.map(decodeValue) };
    case 'map':
      assert(Array.isArray(v), 'malformed map in topology snapshot');
      return { type: t, value: new Map(v.map((entry: unknown): [string, HeaderValue] => decodeMapEntry(entry))) };
    default:
      assert(false, () => `unknown header value type ${JSON.stringify(t)} in topology snapshot`);
  }
}

function decodeMapEntry(entry: unknown): [string, HeaderValue] {
  assert(Array.isArray(entry) && typeof entry[0] === 'string', 'malformed map entry in topology snapshot');
  return [entry[0], decodeValue(entry[1])];
}
