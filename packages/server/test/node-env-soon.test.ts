/** systemEnv.soon: the first batch of a turn after its callback's microtasks, later ones at the end of the turn. */
import { describe, expect, it } from 'vitest';
import { systemEnv } from '../src/node-env.js';

/** Resolves in a later event-loop turn (a fresh one for the next case). */
const nextTurn = (): Promise<void> => new Promise((resolve) => setTimeout(resolve, 1));

describe('systemEnv.soon', () => {
  it('runs the first batch of a turn after the microtasks queued before it, before any immediate', async () => {
    await nextTurn();
    const order: string[] = [];
    await new Promise<void>((done) => {
      setImmediate(() => {
        order.push('immediate');
        done();
      });
      queueMicrotask(() => order.push('microtask before'));
      systemEnv.soon(() => order.push('soon 1'));
      // Asked for before the batch ran: the same batch.
      systemEnv.soon(() => order.push('soon 2'));
    });
    expect(order).toEqual(['microtask before', 'soon 1', 'soon 2', 'immediate']);
  });

  it('runs what a busy turn asks for after its first batch at the end of the turn, then goes at once again', async () => {
    await nextTurn();
    const order: string[] = [];
    await new Promise<void>((done) => {
      systemEnv.soon(() => {
        order.push('first batch');
        // The first batch of this turn ran: a later one waits for the end of the turn.
        systemEnv.soon(() => {
          order.push('end of turn');
          done();
        });
        queueMicrotask(() => order.push('microtask after the first batch'));
      });
    });
    expect(order).toEqual(['first batch', 'microtask after the first batch', 'end of turn']);
    await nextTurn();
    const later: string[] = [];
    await new Promise<void>((done) => {
      setImmediate(() => {
        later.push('immediate');
        done();
      });
      systemEnv.soon(() => later.push('soon in a new turn'));
    });
    expect(later).toEqual(['soon in a new turn', 'immediate']);
  });
});
