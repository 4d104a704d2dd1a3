import type { quorumq } from './generated/quorumq.js';

/** Spec 5: why a message was dead-lettered. */
export declare const DEAD_LETTER_REASONS: readonly ['rejected', 'expired', 'maxlen', 'delivery_limit', 'compacted'];

/** One death record in its plain form (as the queue machine keeps it): times in ms since the epoch. */
export interface PlainDeathRecord<Reason extends string = string> {
  readonly queue: string;
  readonly reason: Reason;
  readonly count: number;
  readonly exchange: string;
  readonly routingKeys: readonly string[];
  readonly firstTime: number;
  readonly lastTime: number;
  /** The message's own expiration (ms) when it had one, else null. */
  readonly originalExpirationMs: number | null;
}

export interface PlainDeathSummary<Reason extends string = string> {
  readonly reason: Reason;
  readonly queue: string;
  readonly exchange: string;
}

/** A message's death records, newest first, with the first and last death summarised. */
export interface PlainDeaths<Reason extends string = string> {
  readonly records: readonly PlainDeathRecord<Reason>[];
  readonly first: PlainDeathSummary<Reason>;
  readonly last: PlainDeathSummary<Reason>;
}

/** The death fields of a wire Message. */
export interface WireDeaths {
  deaths: quorumq.v1.DeathRecord.$Properties[];
  firstDeath: quorumq.v1.DeathSummary.$Properties | null;
  lastDeath: quorumq.v1.DeathSummary.$Properties | null;
}

/** The wire fields of a message's death records; `null` gives the fields cleared. Summaries may be absent (the node derives them). */
export declare function deathsToWire(
  deaths: (Omit<PlainDeaths, 'first' | 'last'> & { readonly first?: PlainDeathSummary | null; readonly last?: PlainDeathSummary | null }) | null | undefined,
): WireDeaths;

/** A message's death records from the wire, or null when it has none (reasons unchecked). */
export declare function deathsFromWire(
  message: Pick<quorumq.v1.Message.$Properties, 'deaths' | 'firstDeath' | 'lastDeath'> | null | undefined,
): PlainDeaths | null;

/** Spec 5: `x-death` and `x-first-death-*` / `x-last-death-*`, as wire header values. */
export declare function xDeathHeaders(deaths: PlainDeaths): Record<string, quorumq.v1.HeaderValue.$Properties>;
