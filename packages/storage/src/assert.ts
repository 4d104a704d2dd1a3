import { StorageInvariantError } from './errors.js';

/**
 * Invariant checks that stay on in production: a durability layer that continues past a
 * broken invariant can acknowledge data it will not return after a restart.
 */
export function assert(condition: boolean, message: string | (() => string)): asserts condition {
  if (!condition) {
    throw new StorageInvariantError(typeof message === 'string' ? message : message());
  }
}
