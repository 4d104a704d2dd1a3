import { assert, TopologyError } from './errors.js';
import { canonicalTable } from './header-value.js';
import { headersMatchProblem } from './headers-match.js';
import { TOPOLOGY_LIMITS } from './limits.js';
import {
  builtInExchange,
  BUILT_IN_EXCHANGES,
  DEFAULT_EXCHANGE,
  RESERVED_EXCHANGE_PREFIX,
  type BindCommand,
  type Binding,
  type DeclareExchangeCommand,
  type DeleteExchangeCommand,
  type Destination,
  type ExchangeDefinition,
  type TopologyCommand,
  type TopologyReply,
  type UnbindCommand,
} from './model.js';
import { createRouter, type ExchangeRouter } from './routers.js';
import { commandProblem, normalizeArguments } from './validate.js';

/** Identifies a binding by all four of its parts, arguments included (as in AMQP). */
export function bindingId(binding: Binding): string {
  const { source, destination, bindingKey } = binding;
  return `${JSON.stringify([source, destination.kind, destination.name, bindingKey])}${canonicalTable(binding.arguments)}`;
}

function destinationId(destination: Destination): string {
  return JSON.stringify([destination.kind, destination.name]);
}

function failure(code: TopologyError['code'], message: string): TopologyReply {
  return { ok: false, error: new TopologyError(code, message) };
}

function success(changed: boolean, autoDeletedExchanges: readonly string[] = []): TopologyReply {
  return { ok: true, changed, autoDeletedExchanges };
}

/**
 * Exchanges, queue names and bindings: the state machine of the metadata Raft group and
 * each node's local routing copy. `apply` is deterministic and never reads a clock, so
 * every replica that applies the same commands holds the same topology. A refused command
 * changes nothing: every check runs before the first mutation.
 */
export class Topology {
  private readonly exchanges = new Map<string, ExchangeDefinition>();
  /** Invariant: has exactly the keys of `exchanges`. */
  private readonly routers = new Map<string, ExchangeRouter>();
  private readonly queues = new Set<string>();
  /** Invariant: every binding's source and destination exist. */
  private readonly bindings = new Map<string, Binding>();
  private readonly bindingsBySource = new Map<string, Set<string>>();
  private readonly bindingsByDestination = new Map<string, Set<string>>();

  /** A fresh topology holds the built-in `amq.*` exchanges (as RabbitMQ does). */
  constructor() {
    for (const exchange of BUILT_IN_EXCHANGES) {
      this.exchanges.set(exchange.name, exchange);
      this.routers.set(exchange.name, createRouter(exchange.type));
    }
  }

  apply(command: TopologyCommand): TopologyReply {
    const problem = commandProblem(command);
    if (problem !== null) return { ok: false, error: problem };
    switch (command.type) {
      case 'declareExchange':
        return this.declareExchange(command);
      case 'deleteExchange':
        return this.deleteExchange(command);
      case 'declareQueue':
        return this.declareQueue(command.name);
      case 'deleteQueue':
        return this.deleteQueue(command.name);
      case 'bind':
        return this.bind(command);
      case 'unbind':
        return this.unbind(command);
    }
  }

  exchange(name: string): ExchangeDefinition | undefined {
    return this.exchanges.get(name);
  }

  hasQueue(name: string): boolean {
    return this.queues.has(name);
  }

  /** The matcher of a declared exchange, for `route`; read-only so bindings change only by command. */
  routerOf(name: string): Pick<ExchangeRouter, 'match'> | undefined {
    return this.routers.get(name);
  }

  /**
   * Exchanges sorted by name, the built-in `amq.*` ones included unless `includeBuiltIn`
   * is false (the default exchange is implicit and never listed).
   */
  listExchanges(options: { readonly includeBuiltIn?: boolean } = {}): ExchangeDefinition[] {
    const all = [...this.exchanges.values()];
    const listed = options.includeBuiltIn === false ? all.filter((exchange) => builtInExchange(exchange.name) === undefined) : all;
    return listed.sort((a, b) => compareStrings(a.name, b.name));
  }

  listQueues(): string[] {
    return [...this.queues].sort(compareStrings);
  }

  /** Bindings sorted by their identity, so the order does not depend on history. */
  listBindings(): Binding[] {
    return [...this.bindings.entries()].sort(([a], [b]) => compareStrings(a, b)).map(([, binding]) => binding);
  }

  /**
   * Checks every invariant of the indexes against the bindings. O(bindings): for tests and
   * for a replica to verify a restored snapshot, not for every command.
   */
  assertInvariants(): void {
    assert(!this.exchanges.has(DEFAULT_EXCHANGE), 'the default exchange is stored');
    assert(this.routers.size === this.exchanges.size, 'routers and exchanges differ');
    for (const builtIn of BUILT_IN_EXCHANGES) {
      const stored = this.exchanges.get(builtIn.name);
      assert(stored !== undefined && declareMismatch(stored, builtIn) === null, () => `built-in exchange ${builtIn.name} missing or changed`);
    }
    for (const [id, binding] of this.bindings) {
      assert(id === bindingId(binding), () => `binding stored under the wrong id ${id}`);
      assert(this.exchanges.has(binding.source), () => `binding ${id} from a missing exchange`);
      const { kind, name } = binding.destination;
      assert(kind === 'queue' ? this.queues.has(name) : this.exchanges.has(name), () => `binding ${id} to a missing ${kind}`);
      assert(this.bindingsBySource.get(binding.source)?.has(id) === true, () => `binding ${id} missing from the source index`);
      assert(this.bindingsByDestination.get(destinationId(binding.destination))?.has(id) === true, () => `binding ${id} missing from the destination index`);
    }
    const indexed = (index: Map<string, Set<string>>): number => [...index.values()].reduce((sum, ids) => sum + ids.size, 0);
    assert(indexed(this.bindingsBySource) === this.bindings.size, 'source index holds stale bindings');
    assert(indexed(this.bindingsByDestination) === this.bindings.size, 'destination index holds stale bindings');
  }

  private declareExchange(command: DeclareExchangeCommand): TopologyReply {
    if (command.name === DEFAULT_EXCHANGE) {
      if (command.passive === true) return success(false);
      return failure('PERMISSION_DENIED', 'the default exchange "" always exists and cannot be declared; publish to it or declare a named exchange');
    }
    const existing = this.exchanges.get(command.name);
    if (command.passive === true) {
      return existing === undefined ? failure('NOT_FOUND', `exchange ${JSON.stringify(command.name)} does not exist`) : success(false);
    }
    const wanted: ExchangeDefinition = {
      name: command.name,
      type: command.exchangeType,
      autoDelete: command.autoDelete ?? false,
      alternateExchange: command.alternateExchange ?? null,
    };
    const reserved = reservedNameProblem(wanted);
    if (reserved !== null) return reserved;
    if (existing !== undefined) return declareMismatch(existing, wanted) ?? success(false);
    if (this.exchanges.size - BUILT_IN_EXCHANGES.length >= TOPOLOGY_LIMITS.exchangesCountMax) {
      return failure('RESOURCE_EXHAUSTED', `already ${TOPOLOGY_LIMITS.exchangesCountMax} exchanges; delete unused ones first`);
    }
    this.exchanges.set(wanted.name, wanted);
    this.routers.set(wanted.name, createRouter(wanted.type));
    return success(true);
  }

  private deleteExchange(command: DeleteExchangeCommand): TopologyReply {
    if (command.name === DEFAULT_EXCHANGE) {
      return failure('PERMISSION_DENIED', 'the default exchange "" cannot be deleted');
    }
    if (builtInExchange(command.name) !== undefined) {
      return failure('PERMISSION_DENIED', `the built-in exchange ${JSON.stringify(command.name)} cannot be deleted`);
    }
    if (!this.exchanges.has(command.name)) {
      return failure('NOT_FOUND', `exchange ${JSON.stringify(command.name)} does not exist`);
    }
    const sourceBindings = this.bindingsBySource.get(command.name)?.size ?? 0;
    if (command.ifUnused === true && sourceBindings > 0) {
      return failure('FAILED_PRECONDITION', `exchange ${JSON.stringify(command.name)} is in use: it is the source of ${sourceBindings} bindings; unbind them or delete without ifUnused`);
    }
    const orphans: string[] = [];
    this.removeExchange(command.name, orphans);
    return success(true, this.autoDeleteOrphans(orphans));
  }

  /** Routing needs only the set of queue names; the queue machine owns the rest. */
  private declareQueue(name: string): TopologyReply {
    if (this.queues.has(name)) return success(false);
    if (this.queues.size >= TOPOLOGY_LIMITS.queuesCountMax) {
      return failure('RESOURCE_EXHAUSTED', `already ${TOPOLOGY_LIMITS.queuesCountMax} queues; delete unused ones first`);
    }
    this.queues.add(name);
    return success(true);
  }

  private deleteQueue(name: string): TopologyReply {
    if (!this.queues.has(name)) return failure('NOT_FOUND', `queue ${JSON.stringify(name)} does not exist`);
    const orphans: string[] = [];
    this.removeBindingsTo({ kind: 'queue', name }, orphans);
    this.queues.delete(name);
    return success(true, this.autoDeleteOrphans(orphans));
  }

  private bind(command: BindCommand): TopologyReply {
    const binding = this.bindingOf(command);
    const problem = this.endpointsProblem(binding);
    if (problem !== null) return { ok: false, error: problem };
    if (this.exchanges.get(binding.source)?.type === 'headers') {
      const matchProblem = headersMatchProblem(binding.arguments);
      if (matchProblem !== null) return failure('INVALID_ARGUMENT', matchProblem);
    }
    const id = bindingId(binding);
    if (this.bindings.has(id)) return success(false);
    if (this.bindings.size >= TOPOLOGY_LIMITS.bindingsCountMax) {
      return failure('RESOURCE_EXHAUSTED', `already ${TOPOLOGY_LIMITS.bindingsCountMax} bindings; remove unused ones first`);
    }
    this.addBinding(id, binding);
    return success(true);
  }

  /** Unbinding what is not bound succeeds with changed = false, as in RabbitMQ 3.x. */
  private unbind(command: UnbindCommand): TopologyReply {
    const binding = this.bindingOf(command);
    const problem = this.endpointsProblem(binding);
    if (problem !== null) return { ok: false, error: problem };
    const id = bindingId(binding);
    if (!this.bindings.has(id)) return success(false);
    const orphans: string[] = [];
    this.removeBinding(id, orphans);
    return success(true, this.autoDeleteOrphans(orphans));
  }

  private bindingOf(command: BindCommand | UnbindCommand): Binding {
    return {
      source: command.source,
      destination: { kind: command.destination.kind, name: command.destination.name },
      bindingKey: command.bindingKey,
      arguments: normalizeArguments(command.arguments),
    };
  }

  /** The default exchange is neither a source nor a destination of bindings (as in AMQP). */
  private endpointsProblem(binding: Binding): TopologyError | null {
    const { source, destination } = binding;
    if (source === DEFAULT_EXCHANGE || (destination.kind === 'exchange' && destination.name === DEFAULT_EXCHANGE)) {
      return new TopologyError('PERMISSION_DENIED', 'the default exchange "" cannot be bound or unbound; it routes to queues by name');
    }
    if (!this.exchanges.has(source)) return new TopologyError('NOT_FOUND', `source exchange ${JSON.stringify(source)} does not exist`);
    const exists = destination.kind === 'queue' ? this.queues.has(destination.name) : this.exchanges.has(destination.name);
    if (!exists) return new TopologyError('NOT_FOUND', `destination ${destination.kind} ${JSON.stringify(destination.name)} does not exist`);
    return null;
  }

  private addBinding(id: string, binding: Binding): void {
    const router = this.routers.get(binding.source);
    assert(router !== undefined, () => `no router for exchange ${binding.source}`);
    this.bindings.set(id, binding);
    addToIndex(this.bindingsBySource, binding.source, id);
    addToIndex(this.bindingsByDestination, destinationId(binding.destination), id);
    router.add(id, binding);
  }

  /**
   * Removes one binding. A source left without bindings is added to `orphans`, to be
   * auto-deleted by the caller: cascades run from a work list, not by recursion, because a
   * chain of thousands of auto-delete exchanges must not overflow the stack on every replica.
   */
  private removeBinding(id: string, orphans: string[]): void {
    const binding = this.bindings.get(id);
    assert(binding !== undefined, () => `removing unknown binding ${id}`);
    this.bindings.delete(id);
    removeFromIndex(this.bindingsBySource, binding.source, id);
    removeFromIndex(this.bindingsByDestination, destinationId(binding.destination), id);
    this.routers.get(binding.source)?.remove(id, binding);
    if (!this.bindingsBySource.has(binding.source)) orphans.push(binding.source);
  }

  /** Deletes the auto-delete exchanges among `orphans`, and those their deletion orphans in turn. */
  private autoDeleteOrphans(orphans: string[]): string[] {
    const autoDeleted: string[] = [];
    for (let next = 0; next < orphans.length; next++) {
      const name = orphans[next];
      assert(name !== undefined, 'orphan work list out of range');
      const exchange = this.exchanges.get(name);
      if (exchange?.autoDelete !== true || this.bindingsBySource.has(name)) continue;
      autoDeleted.push(name);
      this.removeExchange(name, orphans);
    }
    return autoDeleted;
  }

  /** Removes the exchange and its bindings in both directions; orphaned sources go to `orphans`. */
  private removeExchange(name: string, orphans: string[]): void {
    assert(this.exchanges.delete(name), () => `removing unknown exchange ${name}`);
    for (const id of [...(this.bindingsBySource.get(name) ?? [])]) this.removeBinding(id, orphans);
    this.routers.delete(name);
    this.removeBindingsTo({ kind: 'exchange', name }, orphans);
    assert(!this.bindingsBySource.has(name), () => `exchange ${name} deleted with bindings left`);
  }

  private removeBindingsTo(destination: Destination, orphans: string[]): void {
    const key = destinationId(destination);
    for (const id of [...(this.bindingsByDestination.get(key) ?? [])]) this.removeBinding(id, orphans);
    assert(!this.bindingsByDestination.has(key), () => `bindings to ${key} left after removal`);
  }
}

/**
 * `amq.*` names are the broker's (AMQP access-refused): a user may redeclare a built-in
 * exchange exactly as it is, but not declare a new `amq.*` exchange or a built-in one
 * with other arguments.
 */
function reservedNameProblem(wanted: ExchangeDefinition): TopologyReply | null {
  if (!wanted.name.startsWith(RESERVED_EXCHANGE_PREFIX)) return null;
  const builtIn = builtInExchange(wanted.name);
  if (builtIn === undefined) {
    return failure(
      'PERMISSION_DENIED',
      `exchange name ${JSON.stringify(wanted.name)} uses the reserved prefix "${RESERVED_EXCHANGE_PREFIX}"; choose a name without it`,
    );
  }
  const mismatch = declareMismatch(builtIn, wanted);
  if (mismatch === null || mismatch.ok) return null;
  return failure('PERMISSION_DENIED', `${mismatch.error.message.replace(/; declare it.*$/, '')}; built-in exchanges cannot be changed`);
}

function declareMismatch(existing: ExchangeDefinition, wanted: ExchangeDefinition): TopologyReply | null {
  const fields = ['type', 'autoDelete', 'alternateExchange'] as const;
  for (const field of fields) {
    if (existing[field] !== wanted[field]) {
      return failure(
        'FAILED_PRECONDITION',
        `exchange ${JSON.stringify(existing.name)} exists with ${field} = ${JSON.stringify(existing[field])}, ` +
          `but was declared with ${field} = ${JSON.stringify(wanted[field])}; declare it with the same arguments or delete it first`,
      );
    }
  }
  return null;
}

function addToIndex(index: Map<string, Set<string>>, key: string, id: string): void {
  const ids = index.get(key) ?? new Set<string>();
  ids.add(id);
  index.set(key, ids);
}

function removeFromIndex(index: Map<string, Set<string>>, key: string, id: string): void {
  const ids = index.get(key);
  assert(ids?.delete(id) === true, () => `binding ${id} missing from index ${key}`);
  if (ids.size === 0) index.delete(key);
}

export function compareStrings(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
