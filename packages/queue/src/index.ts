export * from './topology/index.js';
