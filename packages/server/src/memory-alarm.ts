/**
 * Spec 2 flow control, the memory alarm: while the process's resident memory is above the
 * high watermark (memory-limit.ts), publishes are refused (service.ts) rather than let a
 * backlog grow the process until the kernel kills it; consumers, acks and gets go on, so the
 * backlog can drain. A real node samples it with the disk check (node.ts); the alarm clears
 * by itself at the first sample back below the watermark.
 */
import type { Logger } from 'pino';

import type { NodeConfig } from './config.js';
import { memoryHighWatermarkBytes, memoryLimit } from './memory-limit.js';
import type { NodeMetrics } from './metrics.js';

export interface MemoryAlarmOptions {
  readonly watermarkBytes: number;
  /** The process's resident memory now: `process.memoryUsage.rss()` in a real node; a test drives it. */
  readonly readResidentBytes: () => number;
  readonly logger: Logger;
  readonly metrics: NodeMetrics;
}

const MIB = 1024 * 1024;
const describeBytes = (bytes: number): string => `${bytes} bytes (${(bytes / MIB).toFixed(1)} MiB)`;

export class MemoryAlarm {
  readonly watermarkBytes: number;
  /** Whether the last sample was above the watermark. */
  active = false;
  /** The resident memory at the last sample (0 before the first). */
  residentBytes = 0;
  private readonly options: MemoryAlarmOptions;

  constructor(options: MemoryAlarmOptions) {
    this.options = options;
    this.watermarkBytes = options.watermarkBytes;
    options.metrics.memoryHighWatermarkBytes.set(options.watermarkBytes);
    options.metrics.memoryAlarm.set(0);
  }

  /**
   * This process's alarm: the watermark from the config and the memory limit (read once, at
   * start), the resident memory from `process.memoryUsage.rss()` unless a test gives another.
   */
  static ofProcess(
    config: Pick<NodeConfig, 'memoryHighWatermark' | 'memoryHighWatermarkBytes'>,
    logger: Logger,
    metrics: NodeMetrics,
    readResidentBytes: () => number = () => process.memoryUsage.rss(),
  ): MemoryAlarm {
    const limit = memoryLimit();
    const alarm = new MemoryAlarm({ watermarkBytes: memoryHighWatermarkBytes(config, limit), readResidentBytes, logger, metrics });
    logger.info({ watermarkBytes: alarm.watermarkBytes, limitBytes: limit.bytes, limitSource: limit.source }, 'memory high watermark');
    return alarm;
  }

  /** Samples the resident memory; raises or clears the alarm when it crossed the watermark. */
  check(): void {
    this.residentBytes = this.options.readResidentBytes();
    const alarm = this.residentBytes > this.watermarkBytes;
    if (alarm === this.active) return;
    this.active = alarm;
    this.options.metrics.memoryAlarm.set(alarm ? 1 : 0);
    const fields = { residentBytes: this.residentBytes, watermarkBytes: this.watermarkBytes };
    if (alarm) this.options.logger.warn(fields, 'memory alarm: resident memory is above the high watermark; publishes are refused until it falls below');
    else this.options.logger.info(fields, 'memory alarm cleared');
  }

  /** What a refused publish tells the client. */
  refusal(nodeId: string): string {
    return (
      `node ${nodeId} is using ${describeBytes(this.residentBytes)} of resident memory (RSS), above its high watermark of ` +
      `${describeBytes(this.watermarkBytes)} (memoryHighWatermark or memoryHighWatermarkBytes); publishes are refused until it falls below: consume the backlog, or raise the watermark`
    );
  }
}
