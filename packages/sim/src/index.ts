export { Simulation, runSeed, SIM_BUGS } from './simulation.js';
export type { SimBug, SimOptions, SimResult, FaultCounts } from './simulation.js';
export { SafetyChecker, SafetyViolation } from './checker.js';
export type { Property, LogView } from './checker.js';
export { FakeDisk } from './fake-disk.js';
export { BrokerSimulation, runBrokerSeed, BROKER_SIM_BUGS } from './broker/broker-simulation.js';
export type { BrokerSimBug, BrokerSimOptions, BrokerSimResult } from './broker/broker-simulation.js';
