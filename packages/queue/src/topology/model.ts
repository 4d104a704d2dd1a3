import type { HeaderValue } from './header-value.js';
import type { TopologyError } from './errors.js';

export type ExchangeType = 'direct' | 'fanout' | 'topic' | 'headers';

export const EXCHANGE_TYPES: readonly ExchangeType[] = ['direct', 'fanout', 'topic', 'headers'];

/** The default exchange: routes to the queue named by the routing key; never stored. */
export const DEFAULT_EXCHANGE = '';

/** Exchange names with this prefix are reserved for the broker (AMQP 0-9-1, RabbitMQ). */
export const RESERVED_EXCHANGE_PREFIX = 'amq.';

/**
 * An exchange as stored. Exchanges are always durable: all topology is replicated by the
 * metadata Raft group, so there is no transient flag to carry.
 */
export interface ExchangeDefinition {
  readonly name: string;
  readonly type: ExchangeType;
  /** Deleted when its last binding as a source goes away (RabbitMQ's exchange auto_delete). */
  readonly autoDelete: boolean;
  /** Receives what this exchange's own bindings do not match; null when unset. */
  readonly alternateExchange: string | null;
}

/**
 * The exchanges every topology has from the start, as in RabbitMQ: they can be bound,
 * published to and named as alternates, but not deleted or declared differently.
 */
export const BUILT_IN_EXCHANGES: readonly ExchangeDefinition[] = Object.freeze(
  (
    [
      ['amq.direct', 'direct'],
      ['amq.fanout', 'fanout'],
      ['amq.headers', 'headers'],
      ['amq.match', 'headers'],
      ['amq.topic', 'topic'],
    ] as const
  ).map(([name, type]): ExchangeDefinition => Object.freeze({ name, type, autoDelete: false, alternateExchange: null })),
);

/** The built-in definition named `name`, if it is one. */
export function builtInExchange(name: string): ExchangeDefinition | undefined {
  return BUILT_IN_EXCHANGES.find((exchange) => exchange.name === name);
}

export type DestinationKind = 'queue' | 'exchange';

export interface Destination {
  readonly kind: DestinationKind;
  readonly name: string;
}

/**
 * A binding's arguments. A null value is a presence-only argument (AMQP's "void" field):
 * on a headers exchange it matches a message that has the header with any value.
 */
export type BindingArguments = ReadonlyMap<string, HeaderValue | null>;

export interface Binding {
  readonly source: string;
  readonly destination: Destination;
  readonly bindingKey: string;
  /** Sorted by key, so that equal bindings are stored and snapshotted identically. */
  readonly arguments: BindingArguments;
}

export interface DeclareExchangeCommand {
  readonly type: 'declareExchange';
  readonly name: string;
  readonly exchangeType: ExchangeType;
  readonly autoDelete?: boolean;
  readonly alternateExchange?: string | null;
  /** Only check that the exchange exists; declare nothing. */
  readonly passive?: boolean;
}

export interface DeleteExchangeCommand {
  readonly type: 'deleteExchange';
  readonly name: string;
  /** Refuse when the exchange is the source of any binding. */
  readonly ifUnused?: boolean;
}

export interface DeclareQueueCommand {
  readonly type: 'declareQueue';
  readonly name: string;
}

export interface DeleteQueueCommand {
  readonly type: 'deleteQueue';
  readonly name: string;
}

export interface BindCommand {
  readonly type: 'bind';
  readonly source: string;
  readonly destination: Destination;
  readonly bindingKey: string;
  readonly arguments?: BindingArguments;
}

export interface UnbindCommand {
  readonly type: 'unbind';
  readonly source: string;
  readonly destination: Destination;
  readonly bindingKey: string;
  readonly arguments?: BindingArguments;
}

export type TopologyCommand =
  | DeclareExchangeCommand
  | DeleteExchangeCommand
  | DeclareQueueCommand
  | DeleteQueueCommand
  | BindCommand
  | UnbindCommand;

export type TopologyCommandType = TopologyCommand['type'];

/**
 * The reply to one command. `changed` is false for an idempotent repeat (declaring what
 * exists, binding what is bound, unbinding what is not bound). `autoDeletedExchanges`
 * lists exchanges removed as a consequence, in the order they were removed.
 */
export type TopologyReply =
  | { readonly ok: true; readonly changed: boolean; readonly autoDeletedExchanges: readonly string[] }
  | { readonly ok: false; readonly error: TopologyError };
