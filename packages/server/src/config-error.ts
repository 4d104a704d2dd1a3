/** A configuration the node refuses to start with; `quorumq node` prints its message and exits 2. */
export class ConfigError extends Error {
  override readonly name = 'ConfigError';
}
