/**
 * Rate-limited warnings, for events a misconfigured or hostile peer can repeat many times a
 * second (refused peer calls, dropped Raft messages): at most one line per key per interval,
 * which says how many were left out since the previous one.
 */
import type { Logger } from 'pino';

export class WarnLimiter {
  private readonly last = new Map<string, { at: number; suppressed: number }>();

  constructor(
    private readonly logger: Logger,
    private readonly intervalMs = 10_000,
    private readonly now: () => number = Date.now,
  ) {}

  /** Logs `message` unless a line with this key was logged less than an interval ago. */
  warn(key: string, fields: Record<string, unknown>, message: string): void {
    const now = this.now();
    const seen = this.last.get(key);
    if (seen !== undefined && now - seen.at < this.intervalMs) {
      seen.suppressed += 1;
      return;
    }
    const suppressed = seen?.suppressed ?? 0;
    this.last.set(key, { at: now, suppressed: 0 });
    this.logger.warn(suppressed > 0 ? { ...fields, suppressedSinceLast: suppressed } : fields, message);
  }
}
