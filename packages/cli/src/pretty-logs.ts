/**
 * Readable node logs for `quorumq cluster` on a terminal. A node writes pino's JSON lines;
 * here each becomes text (pino-pretty: local time, level, message, then the other fields on
 * the same line; an error's stack on the lines below), every line prefixed with the node id
 * so that the interleaved output of the nodes stays readable. Anything that is not a JSON
 * object passes through as it is, prefixed too.
 */
import pinoPretty from 'pino-pretty';

/** How `quorumq cluster` prints its nodes' logs: `auto` is `pretty` on a terminal, else `json`. */
export type LogFormat = 'auto' | 'json' | 'pretty';

export const LOG_FORMATS: readonly LogFormat[] = ['auto', 'json', 'pretty'];

/** Whether logs written to `stream` are made readable, for the format the user chose. */
export function prettyLogsFor(format: LogFormat, stream: { readonly isTTY?: boolean }): boolean {
  return format === 'pretty' || (format === 'auto' && stream.isTTY === true);
}

/** A function from one line a node wrote to the text to print for it (without the final newline). */
export function nodeLogFormatter(options: { colorize?: boolean } = {}): (nodeId: string, line: string) => string {
  const pretty = pinoPretty.prettyFactory({
    colorize: options.colorize ?? pinoPretty.isColorSupported,
    translateTime: 'SYS:HH:MM:ss.l',
    // The prefix names the node; pino's pid and hostname are the same for every node here.
    ignore: 'pid,hostname,node',
    singleLine: true,
  });
  return (nodeId, line) => {
    const log = parseObject(line);
    const text = log === null ? line : pretty(log);
    return text
      .trimEnd()
      .split('\n')
      .map((l) => `${nodeId} | ${l.trimEnd()}`)
      .join('\n');
  };
}

function parseObject(line: string): Record<string, unknown> | null {
  if (!line.startsWith('{')) return null;
  try {
    const value: unknown = JSON.parse(line);
    return typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : null;
  } catch {
    return null;
  }
}
