export * from './topology/index.js';
export * from './machine/index.js';
