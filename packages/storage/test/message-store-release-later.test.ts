import { afterEach, describe, expect, it } from 'vitest';
import { RELEASES_PER_TURN } from '../src/message-store/store.js';
import { removeTempDirs, tempDir } from './helpers.js';
import { expectBytes, message, openStore } from './message-store-helpers.js';

afterEach(removeTempDirs);

/**
 * `releaseLater`: the many references a purge or a snapshot's save lets go of at once are
 * dropped a slice per turn, so that no turn of the node's one thread holds them all.
 */
describe('MessageStore.releaseLater', () => {
  it(`drops at most ${RELEASES_PER_TURN} references per turn, each record readable until its turn`, async () => {
    const dir = await tempDir('ms-release-later');
    // Turns run when the test says: the store's "end of this turn" is a queue here.
    const turns: Array<() => void> = [];
    const { store } = await openStore(dir, { scheduleFlush: (run) => void turns.push(run) });
    store.recovered();
    const count = 2 * RELEASES_PER_TURN + 100;
    const handles = Array.from({ length: count }, (_, i) => store.put(message(i, 16)));
    const sync = store.sync();
    while (turns.length > 0) turns.shift()!();
    await sync;
    turns.length = 0;

    store.releaseLater([...handles]);
    expect(store.stats().liveRecords).toBe(count); // nothing in the calling turn
    const liveAfterTurns: number[] = [];
    while (turns.length > 0) {
      turns.shift()!();
      liveAfterTurns.push(store.stats().liveRecords);
    }
    expect(liveAfterTurns.slice(0, 3)).toEqual([count - RELEASES_PER_TURN, count - 2 * RELEASES_PER_TURN, 0]);
    await store.close();
  });

  it('keeps the later records readable, and idle() releases what is left at once', async () => {
    const dir = await tempDir('ms-release-idle');
    const { store } = await openStore(dir);
    store.recovered();
    const kept = store.put(message(1, 64));
    store.retain(kept); // a second reference: released later, the record stays
    const others = Array.from({ length: 1000 }, (_, i) => store.put(message(100 + i, 64)));
    await store.sync();
    store.releaseLater([kept, ...others]);
    expectBytes(store.read(others[999]!), message(1099, 64));
    await store.idle();
    expect(store.stats().liveRecords).toBe(1);
    expectBytes(store.read(kept), message(1, 64));
    await store.close();
  });

  it('closing with releases queued drops them quietly: the next open finds the records unreferenced', async () => {
    const dir = await tempDir('ms-release-close');
    const { store, warnings } = await openStore(dir, { scheduleFlush: () => {} }); // turns never come
    store.recovered();
    const handles = Array.from({ length: 10 }, (_, i) => store.put(message(i, 16)));
    store.releaseLater(handles.slice(0, 5));
    await store.close(); // writes what is pending; the queued releases are dropped
    expect(() => store.releaseLater(handles.slice(5))).toThrow(/closed|clos/);
    expect(warnings.messages).toEqual([]);
    const { store: reopened } = await openStore(dir);
    reopened.recovered();
    await reopened.idle();
    expect(reopened.stats().liveRecords).toBe(0);
    await reopened.close();
  });
});
