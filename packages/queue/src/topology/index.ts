/** Exchanges, bindings and routing: the public API of the topology layer. */
export { Topology, bindingId } from './topology.js';
export { route } from './route.js';
export type { RouteResult } from './route.js';
export { routeDeadLetter } from './dead-letter.js';
export type { DeadLetterRouteResult } from './dead-letter.js';
export type { RouteStats } from './routers.js';
export { TopologyError, TopologyInvariantError } from './errors.js';
export type { TopologyErrorCode } from './errors.js';
export { TOPOLOGY_LIMITS } from './limits.js';
export { headerValuesEqual } from './header-value.js';
export type { HeaderValue, HeaderValueType, Headers } from './header-value.js';
export { topicWords } from './topic-trie.js';
export { X_MATCH } from './headers-match.js';
export type { HeadersMatchMode } from './headers-match.js';
export { BUILT_IN_EXCHANGES, DEFAULT_EXCHANGE, EXCHANGE_TYPES, RESERVED_EXCHANGE_PREFIX, builtInExchange } from './model.js';
export type * from './model.js';
export { snapshotTopology, restoreTopology, encodeTopologySnapshot, decodeTopologySnapshot } from './snapshot.js';
export type { TopologySnapshot } from './snapshot.js';
