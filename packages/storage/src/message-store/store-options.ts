/**
 * The message store's options, their defaults and their bounds.
 */
import type { StorageLogger } from '../node-storage.js';
import type { StoreFs } from './store-fs.js';

export interface MessageStoreOptions {
  readonly dir: string;
  readonly fs: StoreFs;
  /** A segment is sealed once the next frame would take it past this. Default 64 MiB. */
  readonly segmentBytes?: number;
  /** Bound of the read-ahead cache. Default 32 MiB. */
  readonly cacheBytes?: number;
  /** Size (and alignment) of one read-ahead chunk; a larger record is read alone. Default 1 MiB. */
  readonly readAheadBytes?: number;
  /** A sealed segment whose live bytes fall below this share of its size is compacted. Default 0.5. */
  readonly compactBelow?: number;
  /**
   * A mostly dead segment is compacted only once the store has released this many bytes of
   * records since one of its own last died: the records of a queue consumed in order die
   * soon after their neighbours, and copying them out first is work thrown away (measured:
   * a drain at 256 in flight copied up to half of every segment). Default: `segmentBytes`.
   */
  readonly compactSettleBytes?: number;
  /** How many recent `put` keys are remembered for sharing (FIFO). Default 16,384. */
  readonly recentKeys?: number;
  /** How to run the writer "at the end of this turn" (and let compaction yield). Default: setImmediate. */
  readonly scheduleFlush?: (run: () => void) => void;
  /** Where damaged records, failed writes and failed deletions are reported. Default: console.warn. */
  readonly logger?: StorageLogger;
  /** The id of a new store (32 lowercase hex digits). Default: 16 random bytes; the simulator injects its own. */
  readonly newStoreId?: () => string;
}

export const MESSAGE_STORE_DEFAULTS = {
  segmentBytes: 64 * 1024 * 1024,
  cacheBytes: 32 * 1024 * 1024,
  readAheadBytes: 1024 * 1024,
  compactBelow: 0.5,
  recentKeys: 16_384,
} as const;

const SEGMENT_BYTES_MIN = 4096;
const SEGMENT_BYTES_MAX = 1024 * 1024 * 1024;
const READ_AHEAD_BYTES_MIN = 4096;
const READ_AHEAD_BYTES_MAX = 64 * 1024 * 1024;

/** The options with their defaults filled in. */
export type StoreConfig = Required<Omit<MessageStoreOptions, 'newStoreId'>>;

const consoleLogger: StorageLogger = { warn: (message) => console.warn(message) };

/** The options with defaults; throws a RangeError naming the first bad one. */
export function resolveOptions(options: MessageStoreOptions): StoreConfig {
  const config: StoreConfig = {
    dir: options.dir,
    fs: options.fs,
    segmentBytes: options.segmentBytes ?? MESSAGE_STORE_DEFAULTS.segmentBytes,
    cacheBytes: options.cacheBytes ?? MESSAGE_STORE_DEFAULTS.cacheBytes,
    readAheadBytes: options.readAheadBytes ?? MESSAGE_STORE_DEFAULTS.readAheadBytes,
    compactBelow: options.compactBelow ?? MESSAGE_STORE_DEFAULTS.compactBelow,
    compactSettleBytes: options.compactSettleBytes ?? options.segmentBytes ?? MESSAGE_STORE_DEFAULTS.segmentBytes,
    recentKeys: options.recentKeys ?? MESSAGE_STORE_DEFAULTS.recentKeys,
    scheduleFlush: options.scheduleFlush ?? ((run) => setImmediate(run)),
    logger: options.logger ?? consoleLogger,
  };
  const integerIn = (name: string, value: number, min: number, max: number): void => {
    if (!Number.isSafeInteger(value) || value < min || value > max) throw new RangeError(`${name} must be an integer in [${min}, ${max}], got ${value}`);
  };
  integerIn('segmentBytes', config.segmentBytes, SEGMENT_BYTES_MIN, SEGMENT_BYTES_MAX);
  integerIn('cacheBytes', config.cacheBytes, 0, Number.MAX_SAFE_INTEGER);
  integerIn('readAheadBytes', config.readAheadBytes, READ_AHEAD_BYTES_MIN, READ_AHEAD_BYTES_MAX);
  integerIn('recentKeys', config.recentKeys, 0, Number.MAX_SAFE_INTEGER);
  integerIn('compactSettleBytes', config.compactSettleBytes, 0, Number.MAX_SAFE_INTEGER);
  if (!(config.compactBelow >= 0 && config.compactBelow < 1)) throw new RangeError(`compactBelow must be in [0, 1), got ${config.compactBelow}`);
  return config;
}
