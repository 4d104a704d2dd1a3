import { quorumq } from '@quorumq/proto';
import type { Command, Deaths } from '@quorumq/queue';

import pb = quorumq.v1;

/**
 * A stored message published again (dead-lettered or moved): its routing keys, its deaths in
 * the machine command (not the stored copy), its expiration kept or dropped.
 */
export function republication(
  stored: pb.Message.$Properties | undefined,
  exchange: string,
  routingKeys: readonly string[],
  deaths: Deaths | null,
  keepExpiration: boolean,
): { message: pb.Message.$Properties; command: Command } {
  const message: pb.Message.$Properties = { ...(stored ?? { body: new Uint8Array(0) }), deaths: [], firstDeath: null, lastDeath: null };
  message.routingKey = routingKeys[0] ?? '';
  if (!keepExpiration && message.properties != null) message.properties = { ...message.properties, expirationMs: null };
  const properties = message.properties;
  const command: Command = {
    type: 'enqueue',
    sizeBytes: message.body?.length ?? 0,
    exchange,
    routingKeys: [...routingKeys],
    ...(properties?.priority != null ? { priority: properties.priority } : {}),
    ...(keepExpiration && properties?.expirationMs != null ? { expirationMs: properties.expirationMs } : {}),
    ...(deaths !== null ? { deaths } : {}),
  };
  return { message, command };
}
