export {
  LocalCluster,
  freePort,
  CLI_MAIN,
  type LocalNode,
  type LocalClusterOptions,
  type UnexpectedExit,
} from './local-cluster.js';
export { healthStatus } from './health.js';
