export { loadConfig, ConfigError, DEFAULTS, type NodeConfig } from './config.js';
export { startNode, createLogger, type RunningNode } from './server.js';
export { routeGrpcLogs } from './grpc-log.js';
export { BrokerNode } from './node.js';
export { BrokerError } from './errors.js';
