// Death records (spec 5) between their plain form and the wire, and their RabbitMQ header
// form. Hand-written, like fields.js: the node and the SDK both import it (from
// '@quorumq/proto/deaths'), so each mapping is written once.
//
// The plain form is the queue machine's `Deaths` (@quorumq/queue): records newest first, one
// per (queue, reason), times in ms since the Unix epoch, `originalExpirationMs` null when
// the message had no expiration; `first` and `last` summarise the oldest and newest death.
// On the wire they are Message.deaths, first_death and last_death (proto/quorumq/v1/broker.proto).

/** Spec 5: why a message was dead-lettered. */
export const DEAD_LETTER_REASONS = Object.freeze(['rejected', 'expired', 'maxlen', 'delivery_limit', 'compacted']);

const TWO_32 = 4294967296;

/** A 64-bit wire value (number, bigint, decimal string or protobufjs Long) as a number; 0 when absent. */
function wireNumber(value) {
  if (typeof value === 'number') return value;
  if (value == null) return 0;
  if (typeof value === 'bigint' || typeof value === 'string') return Number(value);
  if (typeof value === 'object' && typeof value.low === 'number' && typeof value.high === 'number') {
    return (value.unsigned ? value.high >>> 0 : value.high | 0) * TWO_32 + (value.low >>> 0);
  }
  return 0;
}

const summaryToWire = (s) => (s == null ? null : { reason: s.reason, queue: s.queue, exchange: s.exchange });

/**
 * The wire fields of a message's death records (to spread into a Message). `null` gives the
 * fields cleared: a stored message republished or delivered never keeps stale records.
 */
export function deathsToWire(deaths) {
  if (deaths == null) return { deaths: [], firstDeath: null, lastDeath: null };
  return {
    deaths: deaths.records.map((r) => ({
      queue: r.queue,
      reason: r.reason,
      count: r.count,
      exchange: r.exchange,
      routingKeys: [...r.routingKeys],
      firstTimeMs: r.firstTime,
      lastTimeMs: r.lastTime,
      originalExpirationMs: r.originalExpirationMs ?? null,
    })),
    firstDeath: summaryToWire(deaths.first),
    lastDeath: summaryToWire(deaths.last),
  };
}

/**
 * A message's death records from the wire, or null when it has none. Unset fields take
 * proto3's defaults, a count below 1 counts as 1, and a missing summary is taken from the
 * oldest (first) or newest (last) record. Reasons are not checked here: the node refuses
 * unknown ones (see DEAD_LETTER_REASONS), the SDK passes them on.
 */
export function deathsFromWire(message) {
  const records = (message?.deaths ?? []).map((r) => ({
    queue: r.queue ?? '',
    reason: r.reason ?? '',
    count: Math.max(1, r.count == null ? 1 : wireNumber(r.count)),
    exchange: r.exchange ?? '',
    routingKeys: [...(r.routingKeys ?? [])],
    firstTime: wireNumber(r.firstTimeMs),
    lastTime: wireNumber(r.lastTimeMs),
    originalExpirationMs: r.originalExpirationMs == null ? null : wireNumber(r.originalExpirationMs),
  }));
  const newest = records[0];
  const oldest = records[records.length - 1];
  if (newest === undefined || oldest === undefined) return null;
  const summary = (s, fallback) => ({
    reason: s?.reason ?? fallback.reason,
    queue: s?.queue ?? fallback.queue,
    exchange: s?.exchange ?? fallback.exchange,
  });
  return { records, first: summary(message.firstDeath, oldest), last: summary(message.lastDeath, newest) };
}

const str = (value) => ({ stringValue: value });

/**
 * Spec 5: the RabbitMQ header form of the death records, for code that reads headers:
 * `x-death` (a list of maps, newest first: count, reason, queue, time = the first death of
 * that queue and reason as a timestamp, exchange, routing-keys, original-expiration as a
 * string of ms when set) and `x-first-death-*` / `x-last-death-*` (reason, queue, exchange).
 */
export function xDeathHeaders(deaths) {
  const xDeath = deaths.records.map((r) => {
    const entries = {
      count: { intValue: r.count },
      reason: str(r.reason),
      queue: str(r.queue),
      time: { timestampMs: r.firstTime },
      exchange: str(r.exchange),
      'routing-keys': { listValue: { values: r.routingKeys.map(str) } },
    };
    if (r.originalExpirationMs != null) entries['original-expiration'] = str(String(r.originalExpirationMs));
    return { mapValue: { entries } };
  });
  return {
    'x-death': { listValue: { values: xDeath } },
    'x-first-death-reason': str(deaths.first.reason),
    'x-first-death-queue': str(deaths.first.queue),
    'x-first-death-exchange': str(deaths.first.exchange),
    'x-last-death-reason': str(deaths.last.reason),
    'x-last-death-queue': str(deaths.last.queue),
    'x-last-death-exchange': str(deaths.last.exchange),
  };
}
