/** Builders for topology tests: short names for commands and typed header values. */
import { expect } from 'vitest';
import {
  Topology,
  snapshotTopology,
  type BindingArguments,
  type Destination,
  type ExchangeType,
  type HeaderValue,
  type TopologyCommand,
  type TopologyErrorCode,
  type TopologyReply,
} from '../src/topology/index.js';

export const str = (value: string): HeaderValue => ({ type: 'string', value });
export const int = (value: bigint | number): HeaderValue => ({ type: 'int64', value: BigInt(value) });
export const dbl = (value: number): HeaderValue => ({ type: 'double', value });
export const bool = (value: boolean): HeaderValue => ({ type: 'bool', value });
export const bytes = (...value: number[]): HeaderValue => ({ type: 'bytes', value: Uint8Array.from(value) });
export const ts = (value: bigint | number): HeaderValue => ({ type: 'timestamp', value: BigInt(value) });
export const list = (...value: HeaderValue[]): HeaderValue => ({ type: 'list', value });
export const map = (entries: Record<string, HeaderValue>): HeaderValue => ({ type: 'map', value: new Map(Object.entries(entries)) });

export const headers = (entries: Record<string, HeaderValue>): ReadonlyMap<string, HeaderValue> => new Map(Object.entries(entries));
export const args = (entries: Record<string, HeaderValue | null>): BindingArguments => new Map(Object.entries(entries));

export const queue = (name: string): Destination => ({ kind: 'queue', name });
export const exchange = (name: string): Destination => ({ kind: 'exchange', name });

export const declareExchange = (
  name: string,
  exchangeType: ExchangeType,
  options: { autoDelete?: boolean; alternateExchange?: string | null; passive?: boolean } = {},
): TopologyCommand => ({ type: 'declareExchange', name, exchangeType, ...options });
export const declareQueue = (name: string): TopologyCommand => ({ type: 'declareQueue', name });
export const bind = (source: string, destination: Destination, bindingKey = '', bindingArgs?: BindingArguments): TopologyCommand =>
  bindingArgs === undefined
    ? { type: 'bind', source, destination, bindingKey }
    : { type: 'bind', source, destination, bindingKey, arguments: bindingArgs };
export const unbind = (source: string, destination: Destination, bindingKey = '', bindingArgs?: BindingArguments): TopologyCommand =>
  bindingArgs === undefined
    ? { type: 'unbind', source, destination, bindingKey }
    : { type: 'unbind', source, destination, bindingKey, arguments: bindingArgs };

/** Applies commands that must all succeed. */
export function setUp(commands: readonly TopologyCommand[], topology = new Topology()): Topology {
  for (const command of commands) {
    const reply = topology.apply(command);
    if (!reply.ok) throw new Error(`set-up command ${command.type} failed: ${reply.error.message}`);
  }
  return topology;
}

/** A topology with `queueNames` declared and one exchange of `type` named `x`. */
export function withExchange(type: ExchangeType, queueNames: readonly string[]): Topology {
  return setUp([...queueNames.map(declareQueue), declareExchange('x', type)]);
}

export function expectOk(reply: TopologyReply, changed: boolean): void {
  expect(reply).toMatchObject({ ok: true, changed });
}

/** The command is refused with `code` and the topology is exactly as before. */
export function expectRefused(topology: Topology, command: TopologyCommand, code: TopologyErrorCode): string {
  const before = snapshotTopology(topology);
  const reply = topology.apply(command);
  if (reply.ok) throw new Error(`expected ${code}, got ok`);
  expect(reply.error.name).toBe('TopologyError');
  expect(reply.error.code).toBe(code);
  expect(snapshotTopology(topology)).toEqual(before);
  return reply.error.message;
}
