import { describe, expect, it } from 'vitest';
import { argumentWarnings, parseQueueArguments, QueueArgumentError } from '../src/machine/index.js';

describe('spec 4-7: queue arguments', () => {
  it('defaults: delivery_limit 20, at-least-once, drop-head, dedup window 2 min, consumer timeout 30 min', () => {
    const args = parseQueueArguments();
    expect(args.deliveryLimit).toBe(20);
    expect(args.deadLetterStrategy).toBe('at-least-once');
    expect(args.overflow).toBe('drop-head');
    expect(args.dedupWindowMs).toBe(120_000);
    expect(args.consumerTimeoutMs).toBe(1_800_000);
    expect(args.maxPriority).toBe(0);
    expect(args.singleActiveConsumer).toBe(false);
  });

  it('delivery_limit -1 means unlimited', () => {
    expect(parseQueueArguments({ deliveryLimit: -1 }).deliveryLimit).toBe(-1);
    expect(() => parseQueueArguments({ deliveryLimit: -2 })).toThrow(QueueArgumentError);
  });

  it('wrong argument types are typed errors naming the argument', () => {
    const cases: Array<[string, unknown]> = [
      ['messageTtlMs', '1000'],
      ['maxLength', 1.5],
      ['overflow', 'drop-tail'],
      ['maxPriority', 32],
      ['singleActiveConsumer', 'yes'],
      ['deadLetterExchange', 7],
      ['deadLetterStrategy', 'exactly-once'],
    ];
    for (const [argument, value] of cases) {
      try {
        parseQueueArguments({ [argument]: value });
        expect.unreachable(`${argument} accepted ${String(value)}`);
      } catch (error) {
        expect(error).toBeInstanceOf(QueueArgumentError);
        expect((error as QueueArgumentError).argument).toBe(argument);
        expect((error as QueueArgumentError).code).toBe('INVALID_ARGUMENT');
        expect((error as QueueArgumentError).name).toBe('QueueArgumentError');
      }
    }
  });

  it('arguments that are not an object (from a bad log entry) are a typed error, not a TypeError', () => {
    for (const input of [null, 'maxLength=1', 7, [1, 2]]) {
      expect(() => parseQueueArguments(input as never), JSON.stringify(input)).toThrow(QueueArgumentError);
    }
  });

  it('unknown arguments are refused', () => {
    expect(() => parseQueueArguments({ nope: 1 } as never)).toThrow(/unknown queue argument nope/);
  });

  it('spec 4: a delivery limit without a dead-letter exchange warns on declare', () => {
    expect(argumentWarnings(parseQueueArguments())).toHaveLength(1);
    expect(argumentWarnings(parseQueueArguments({ deadLetterExchange: 'dlx' }))).toHaveLength(0);
    expect(argumentWarnings(parseQueueArguments({ deliveryLimit: -1 }))).toHaveLength(0);
  });
});
