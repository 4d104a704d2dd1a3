/**
 * A small driver for machine tests: it stamps each command with the next Raft index and
 * the simulated leader clock, and keeps the effects of the last apply.
 */
import {
  apply,
  createQueueState,
  parseQueueArguments,
  type Command,
  type Effect,
  type EnqueueCommand,
  type QueueArgumentsInput,
  type QueueState,
  type Reply,
} from '../src/machine/index.js';

export class Harness {
  state: QueueState;
  index = 0;
  now = 1_000;
  effects: Effect[] = [];
  reply: Reply = { type: 'ok' };

  constructor(args: QueueArgumentsInput = {}, name = 'q') {
    this.state = createQueueState(name, parseQueueArguments(args), this.now);
  }

  run(command: Command): Reply {
    this.index += 1;
    const result = apply({ index: this.index, term: 1, now: this.now }, command, this.state);
    this.state = result.state;
    this.effects = result.effects;
    this.reply = result.reply;
    return result.reply;
  }

  publish(extra: Partial<EnqueueCommand> = {}): number {
    const reply = this.run({ type: 'enqueue', sizeBytes: 10, exchange: 'ex', routingKeys: ['rk'], ...extra });
    return reply.type === 'enqueued' ? reply.messageId : -1;
  }

  advance(ms: number): void {
    this.now += ms;
    this.run({ type: 'tick' });
  }

  deliveries(consumerId?: string): Array<Extract<Effect, { type: 'deliver' }>> {
    return this.effects.filter(
      (e): e is Extract<Effect, { type: 'deliver' }> => e.type === 'deliver' && (consumerId === undefined || e.consumerId === consumerId),
    );
  }

  ofType<T extends Effect['type']>(type: T): Array<Extract<Effect, { type: T }>> {
    return this.effects.filter((e): e is Extract<Effect, { type: T }> => e.type === type);
  }
}
