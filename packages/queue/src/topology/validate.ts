import { describeValue } from './describe.js';
import { TopologyError } from './errors.js';
import { cloneHeaderValue, headerValueProblem, type HeaderValue } from './header-value.js';
import { TOPOLOGY_LIMITS, utf8ByteLength } from './limits.js';
import { EXCHANGE_TYPES, type BindingArguments, type TopologyCommand } from './model.js';

/**
 * Commands arrive decoded from the metadata log, so every field is checked as untrusted
 * input before anything changes. The checks here need no state; the ones that do (does
 * the exchange exist, do the arguments match) live in the command handlers.
 */
export function commandProblem(command: TopologyCommand): TopologyError | null {
  const fields: Record<string, unknown> = typeof command === 'object' && command !== null ? { ...command } : {};
  const problem = shapeProblem(fields);
  return problem === null ? null : new TopologyError('INVALID_ARGUMENT', problem);
}

function shapeProblem(fields: Record<string, unknown>): string | null {
  switch (fields['type']) {
    case 'declareExchange':
      return (
        nameProblem('exchange name', fields['name'], TOPOLOGY_LIMITS.exchangeNameBytesMax, true) ??
        exchangeTypeProblem(fields['exchangeType']) ??
        optionalBooleanProblem('autoDelete', fields['autoDelete']) ??
        optionalBooleanProblem('passive', fields['passive']) ??
        alternateExchangeProblem(fields['alternateExchange'])
      );
    case 'deleteExchange':
      return (
        nameProblem('exchange name', fields['name'], TOPOLOGY_LIMITS.exchangeNameBytesMax, true) ??
        optionalBooleanProblem('ifUnused', fields['ifUnused'])
      );
    case 'declareQueue':
    case 'deleteQueue':
      return nameProblem('queue name', fields['name'], TOPOLOGY_LIMITS.queueNameBytesMax, false);
    case 'bind':
    case 'unbind':
      return bindingProblem(fields);
    default:
      return `unknown topology command type ${describeValue(fields['type'])}`;
  }
}

/**
 * Exchange names may be empty because `""` names the default exchange (the handlers
 * refuse to change it); queue names may not, since the broker has no clock or randomness
 * here to generate one: the client side names server-named queues before proposing.
 */
function nameProblem(what: string, value: unknown, bytesMax: number, allowEmpty: boolean): string | null {
  if (typeof value !== 'string') return `${what} must be a string, got ${typeof value}`;
  if (!allowEmpty && value === '') return `${what} must not be empty`;
  const bytes = utf8ByteLength(value);
  if (bytes > bytesMax) return `${what} is ${bytes} bytes of UTF-8; at most ${bytesMax} are allowed`;
  return null;
}

function exchangeTypeProblem(value: unknown): string | null {
  return typeof value === 'string' && (EXCHANGE_TYPES as readonly string[]).includes(value)
    ? null
    : `exchange type must be one of ${EXCHANGE_TYPES.join(', ')}, got ${describeValue(value)}`;
}

function optionalBooleanProblem(what: string, value: unknown): string | null {
  return value === undefined || typeof value === 'boolean' ? null : `${what} must be a boolean when given`;
}

function alternateExchangeProblem(value: unknown): string | null {
  if (value === undefined || value === null) return null;
  if (value === '') return 'alternateExchange must name an exchange; the default exchange cannot be an alternate';
  return nameProblem('alternateExchange', value, TOPOLOGY_LIMITS.exchangeNameBytesMax, false);
}

function bindingProblem(fields: Record<string, unknown>): string | null {
  return (
    nameProblem('source exchange name', fields['source'], TOPOLOGY_LIMITS.exchangeNameBytesMax, true) ??
    destinationProblem(fields['destination']) ??
    nameProblem('binding key', fields['bindingKey'], TOPOLOGY_LIMITS.routingKeyBytesMax, true) ??
    argumentsProblem(fields['arguments'])
  );
}

function destinationProblem(value: unknown): string | null {
  if (typeof value !== 'object' || value === null || !('kind' in value) || !('name' in value)) {
    return 'destination must be {kind: "queue" | "exchange", name}';
  }
  switch (value.kind) {
    case 'queue':
      return nameProblem('destination queue name', value.name, TOPOLOGY_LIMITS.queueNameBytesMax, false);
    case 'exchange':
      return nameProblem('destination exchange name', value.name, TOPOLOGY_LIMITS.exchangeNameBytesMax, true);
    default:
      return `destination kind must be "queue" or "exchange", got ${describeValue(value.kind)}`;
  }
}

function argumentsProblem(value: unknown): string | null {
  if (value === undefined) return null;
  if (!(value instanceof Map)) return 'binding arguments must be a Map of header values';
  if (value.size > TOPOLOGY_LIMITS.bindingArgumentsCountMax) {
    return `binding has ${value.size} arguments; at most ${TOPOLOGY_LIMITS.bindingArgumentsCountMax} are allowed`;
  }
  const budget = { values: 0 };
  for (const [key, argument] of value) {
    if (typeof key !== 'string' || key === '') return 'binding argument names must be non-empty strings';
    if (argument === null) continue;
    const problem = headerValueProblem(argument, 0, budget);
    if (problem !== null) return `binding argument ${JSON.stringify(key)}: ${problem}`;
  }
  return null;
}

/** A copy of the arguments sorted by name, so that equal bindings are stored identically. */
export function normalizeArguments(args: BindingArguments | undefined): BindingArguments {
  const entries = [...(args ?? new Map<string, HeaderValue | null>())].map(
    ([key, value]): [string, HeaderValue | null] => [key, value === null ? null : cloneHeaderValue(value)],
  );
  entries.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return new Map(entries);
}
