/**
 * Every collection of the topology has a maximum, so that one client cannot grow the
 * metadata group's state (and every node's routing copy) without bound.
 *
 * Names and keys are capped at 255 bytes of UTF-8 because AMQP 0-9-1 carries them as
 * short strings: a longer name could never be used by a RabbitMQ client anyway.
 */
export const TOPOLOGY_LIMITS = {
  exchangeNameBytesMax: 255,
  queueNameBytesMax: 255,
  /** Binding keys and routing keys. */
  routingKeyBytesMax: 255,
  /** Routing keys of one message (its own plus CC/BCC or dead-letter originals). */
  routingKeysCountMax: 64,
  exchangesCountMax: 10_000,
  queuesCountMax: 100_000,
  bindingsCountMax: 1_000_000,
  /** Entries in one binding's arguments table. */
  bindingArgumentsCountMax: 64,
  /** Nesting of list/map header values, so that equality and validation stay bounded. */
  headerValueDepthMax: 16,
  /** Total values (including nested ones) in one binding's arguments. */
  bindingArgumentValuesCountMax: 1_024,
} as const;

const utf8 = new TextEncoder();

export function utf8ByteLength(text: string): number {
  return utf8.encode(text).byteLength;
}
