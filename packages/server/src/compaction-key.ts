/**
 * Keyed compaction (spec 9): the key of a message sent to a queue with `compaction_key`, read
 * here (the machine never sees headers) and carried in the enqueue command, so every replica
 * applies the same key. Done wherever an enqueue is proposed (publish, fan-out, dead-letter,
 * move), from the target queue's definition.
 */
import { quorumq } from '@quorumq/proto';
import { COMPACTION_KEY_ROUTING_KEY, type Command, type QueueArguments } from '@quorumq/queue';

import pb = quorumq.v1;

/**
 * A header value as a key: strings as they are; integers, doubles, booleans and timestamps
 * in their decimal or literal form (so the string "7" and the integer 7 are one key); bytes
 * in hex. Lists, maps and void values are not keys.
 */
export function headerKey(value: pb.HeaderValue.$Properties | null | undefined): string | null {
  if (value == null) return null;
  if (value.stringValue != null) return value.stringValue;
  if (value.intValue != null) return String(value.intValue);
  if (value.doubleValue != null) return String(value.doubleValue);
  if (value.boolValue != null) return String(value.boolValue);
  if (value.timestampMs != null) return String(value.timestampMs);
  if (value.bytesValue != null) return Buffer.from(value.bytesValue).toString('hex');
  return null;
}

/** The message's key under `compactionKey` (a header name, or the routing key), or null: the message is not keyed. */
export function messageCompactionKey(compactionKey: string, message: pb.Message.$Properties): string | null {
  if (compactionKey === COMPACTION_KEY_ROUTING_KEY) return message.routingKey ?? '';
  return headerKey(message.headers?.[compactionKey]);
}

/**
 * The enqueue command for a queue with these arguments: with the message's key and tombstone
 * flag when the queue compacts (and the command has no key yet); any other command as it is.
 * A message whose bytes do not decode gets no key (the entry check refuses it anyway).
 */
export function withCompactionKey(args: QueueArguments | undefined, command: Command, message: pb.Message.$Properties | Uint8Array | null): Command {
  const compactionKey = args?.compactionKey;
  if (command.type !== 'enqueue' || compactionKey === undefined || command.compactionKey !== undefined || message === null) return command;
  let decoded: pb.Message.$Properties;
  try {
    decoded = message instanceof Uint8Array ? pb.Message.decode(message) : message;
  } catch {
    return command;
  }
  const key = messageCompactionKey(compactionKey, decoded);
  if (key === null) return command;
  return decoded.tombstone === true ? { ...command, compactionKey: key, tombstone: true } : { ...command, compactionKey: key };
}
