export {
  LocalCluster,
  freePort,
  CLI_MAIN,
  type LocalNode,
  type LocalClusterOptions,
  type UnexpectedExit,
} from './local-cluster.js';
export { healthStatus } from './health.js';
export { ensureClusterSecret, CLUSTER_SECRET_FILE } from './cluster-secret.js';
export { NODE_PROCESS_FLAGS, nodeProcessArgs } from './node-process.js';
