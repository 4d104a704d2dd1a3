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

/** The UTF-8 length of `text`, counted without encoding it (it runs on every publish). */
export function utf8ByteLength(text: string): number {
  let bytes = 0;
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i);
    if (code < 0x80) bytes += 1;
    else if (code < 0x800) bytes += 2;
    else if (code >= 0xd800 && code <= 0xdbff && i + 1 < text.length && (text.charCodeAt(i + 1) & 0xfc00) === 0xdc00) {
      // A surrogate pair: one 4-byte code point.
      bytes += 4;
      i += 1;
    } else {
      // Other 3-byte code points; a lone surrogate is encoded as U+FFFD (3 bytes).
      bytes += 3;
    }
  }
  return bytes;
}
