export { LocalCluster, freePort, CLI_MAIN, type LocalNode, type LocalClusterOptions } from './local-cluster.js';
export { healthStatus } from './health.js';
