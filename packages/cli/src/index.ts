export {
  LocalCluster,
  freePort,
  CLI_MAIN,
  type LocalNode,
  type LocalClusterOptions,
  type LocalClusterTls,
  type LocalClientTls,
  type UnexpectedExit,
} from './local-cluster.js';
export { healthStatus, healthCredentials, type HealthTls } from './health.js';
export {
  makeCertificate,
  makeCertificateAuthority,
  makeClusterCertificates,
  makeNodeCertificate,
  type CertificateAuthority,
  type CertificateFilePair,
  type ClusterCertificates,
  type LeafOptions,
} from './certificates.js';
export { ensureClusterSecret, CLUSTER_SECRET_FILE } from './cluster-secret.js';
export { NODE_PROCESS_FLAGS, V8_POOL_SIZE_DEFAULT, localNodeFlags, nodeProcessArgs, v8PoolSize } from './node-process.js';
export { findHelperThreads, idleHelperThreads, idleThreads, platformThreads, threadStartTime, uvPoolSize, type HelperThreadsFound, type HelperThreadsOutcome, type ThreadStart } from './helper-threads.js';
