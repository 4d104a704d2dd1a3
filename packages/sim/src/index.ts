export { Simulation, runSeed, SIM_BUGS } from './simulation.js';
export type { SimBug, SimOptions, SimResult, FaultCounts } from './simulation.js';
export { SafetyChecker, SafetyViolation } from './checker.js';
export type { Property, LogView } from './checker.js';
export { FakeDisk } from './fake-disk.js';
