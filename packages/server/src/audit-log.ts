/**
 * The audit log: one line per user administration change and per authentication failure,
 * each with an `audit` field naming the event and the user. Written at `info` even when the
 * node's `logLevel` is `warn` or `error` (an operator who turns logs down still keeps the
 * audit trail); `silent` silences it too.
 */
import type { Logger } from 'pino';

export function auditLogger(logger: Logger): Logger {
  const audit = logger.child({});
  if (logger.level !== 'silent' && logger.levelVal > logger.levels.values['info']!) audit.level = 'info';
  return audit;
}
