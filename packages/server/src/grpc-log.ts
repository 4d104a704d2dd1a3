/**
 * grpc-js's own log lines, into the node's log.
 *
 * grpc-js writes what it reports (a listener it could not bind, a call it could not route)
 * to stderr as bare text (`E No address added out of total 1 resolved`), beside a node's JSON
 * log lines. A node sends them through its logger instead, as warnings from `grpc-js`; what
 * they report is also raised to the code that made the call, which says it in its own words.
 * grpc-js keeps one logger per process: a node process has one node (its warm-up's nodes log
 * nothing), so the process's node owns it.
 */
import { format } from 'node:util';

import { setLogger } from '@grpc/grpc-js';
import type { Logger } from 'pino';

export function routeGrpcLogs(logger: Logger): void {
  const child = logger.child({ component: 'grpc-js' });
  const warn = (message: unknown, ...rest: unknown[]): void => child.warn(format(message, ...rest));
  const debug = (message: unknown, ...rest: unknown[]): void => child.debug(format(message, ...rest));
  setLogger({ error: warn, info: debug, debug });
}
