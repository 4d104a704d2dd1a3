export { check, type CheckResult } from './checker.js';
export { ChaosCluster, type ChaosClusterOptions, type ChaosNode, type UnexpectedExit } from './cluster.js';
export { History, type Attempt, type Consumption } from './history.js';
export { LeaderMonitor, type LeaderView } from './monitor.js';
export { Prng, randomSeed } from './prng.js';
export { PairProxy } from './proxy.js';
export { runLeaderKillRounds, type RoundResult, type RoundsOptions, type RoundsReport } from './rounds.js';
export { DEFAULT_FAULTS, replayCommand, runChaos, summaryLine, type ChaosOptions, type ChaosReport, type FaultRecord, type LeaderElection, type TimelineEvent } from './runner.js';
export { FAULT_KINDS, describeFault, makeSchedule, parseFaults, type FaultKind, type ScheduledFault } from './schedule.js';
export { ALL_QUEUES, DLX, QUEUES } from './workload.js';
export {
  COMPOSE_FAULTS,
  ComposeCluster,
  composeConflicts,
  dockerArgs,
  dockerCli,
  parseInspect,
  projectNetwork,
  reconnectAliases,
  type ComposeAction,
  type ComposeClusterOptions,
  type ContainerInfo,
  type DockerRunner,
} from './compose-cluster.js';
export { rejoined, type StatusView } from './monitor.js';
export type { ClientTuning, ClusterKind, NemesisCluster } from './target.js';
