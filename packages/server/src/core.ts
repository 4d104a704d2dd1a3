/**
 * The node without its network edge (no gRPC listener): what the simulator imports to run
 * the code a node runs, on simulated time, storage and peers.
 */
export { RaftGroup, type GroupMachine, type GroupObserver, type GroupTestOnlyBugs, type RaftGroupOptions, type RaftTuning } from './raft-group.js';
export { BrokerNode, type BrokerNodeParts, type NodeTestOnlyBugs } from './node.js';
export type { LocalConsumer } from './consumers.js';
export type { LocalQueue } from './local-queue.js';
export { META_GROUP, queueGroupId } from './local-queue.js';
export { systemEnv, type NodeEnv, type Timer } from './node-env.js';
export type { PeerLink } from './peer-link.js';
export { GroupTicker, type TickedGroup } from './group-ticker.js';
export { NODE_BEAT_GROUP, PeerLiveness, beatMessage } from './peer-liveness.js';
export { NodeMetrics } from './metrics.js';
export { DEFAULTS, type NodeConfig } from './config.js';
export { BrokerError, Status } from './errors.js';
export { ForwardError } from './transport.js';
export { FETCH_BYTES_MAX } from './snapshot-bodies.js';
export type { MetaCommand, MetaReply, QueueDefinition } from './meta-machine.js';
export type { QueueApplyResult } from './queue-replica.js';
export { decodeRaftBatch, encodeRaftBatch, type GroupMessage } from './raft-codec.js';
export type { OutgoingDelivery } from './wire.js';
