import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { MessageStore } from '../src/machine/store.js';
import type { NewMessage, Place } from '../src/machine/store.js';

const PLACES: readonly Place[] = ['ready', 'delayed', 'delivered', 'deadLettering', 'moving'];

/** Mostly small sizes; every fifth around 4 GiB, where the 32-bit size column escapes. */
const sizeOf = (id: number): number => (id % 5 === 0 ? 2 ** 32 - 2 + (id % 3) : id % 4096);

function message(id: number, route: number): NewMessage {
  return {
    id,
    sizeBytes: sizeOf(id),
    // Priority and place share a byte: cover the whole priority range (max_priority <= 31).
    priority: id % 32,
    exchange: `ex${route}`,
    routingKeys: [`key${route}`],
    deaths: null,
    expiresAt: route === 0 ? -1 : id + 1000,
    expirationMs: -1,
    notBefore: 0,
  };
}

type Step =
  | { readonly kind: 'insert'; readonly gap: number; readonly route: number; readonly place: number }
  | { readonly kind: 'delete'; readonly pick: number }
  | { readonly kind: 'update'; readonly pick: number; readonly value: number }
  | { readonly kind: 'shrink' };

const step: fc.Arbitrary<Step> = fc.oneof(
  fc.record({ kind: fc.constant('insert' as const), gap: fc.integer({ min: 1, max: 5 }), route: fc.integer({ min: 0, max: 3 }), place: fc.integer({ min: 0, max: 4 }) }),
  fc.record({ kind: fc.constant('delete' as const), pick: fc.nat() }),
  fc.record({ kind: fc.constant('update' as const), pick: fc.nat(), value: fc.integer({ min: 0, max: 1_000_000 }) }),
  fc.record({ kind: fc.constant('shrink' as const) }),
);

describe('MessageStore (compact per-message storage)', () => {
  it('behaves like a Map of plain headers under random inserts, deletes and updates, at any id range', () => {
    fc.assert(
      fc.property(fc.constantFrom(1, 2 ** 31 - 10, 2 ** 32 - 10, 2 ** 40), fc.array(step, { maxLength: 400 }), (base, steps) => {
        const store = new MessageStore();
        const model = new Map<number, { route: number; place: Place; deliveryCount: number }>();
        let nextId = base;
        for (const s of steps) {
          const ids = [...model.keys()];
          if (s.kind === 'shrink') {
            store.shrink();
          } else if (s.kind === 'insert') {
            nextId += s.gap;
            const place = PLACES[s.place]!;
            store.insert(message(nextId, s.route), place);
            model.set(nextId, { route: s.route, place, deliveryCount: 0 });
          } else if (ids.length > 0) {
            const id = ids[s.pick % ids.length]!;
            if (s.kind === 'delete') {
              expect(store.delete(id)).toBe(true);
              model.delete(id);
            } else {
              store.get(id)!.deliveryCount = s.value;
              model.get(id)!.deliveryCount = s.value;
              store.get(id)!.place = PLACES[s.value % PLACES.length]!;
              model.get(id)!.place = PLACES[s.value % PLACES.length]!;
            }
          }
          expect(store.size).toBe(model.size);
        }
        const sortedIds = [...model.keys()].sort((a, b) => a - b);
        expect(store.keys()).toEqual(sortedIds);
        expect(store.lowestId()).toBe(sortedIds[0] ?? null);
        for (const [id, expected] of model) {
          const header = store.get(id)!;
          expect(header.id).toBe(id);
          expect(header.place).toBe(expected.place);
          expect(header.deliveryCount).toBe(expected.deliveryCount);
          expect(header.exchange).toBe(`ex${expected.route}`);
          expect(header.routingKeys).toEqual([`key${expected.route}`]);
          expect(header.sizeBytes).toBe(sizeOf(id));
          expect(header.priority).toBe(id % 32);
        }
        // Escaped sizes are kept only while their message lives.
        expect([...store.bigSizes.keys()].sort((a, b) => a - b)).toEqual(sortedIds.filter((id) => sizeOf(id) >= 2 ** 32 - 1));
        expect(store.has(nextId + 1)).toBe(false);
        expect(store.delete(nextId + 1)).toBe(false);
      }),
      { numRuns: 200 },
    );
  });

  it('grows its index a step at a time: lookups, deletes, clones and shrinks in the middle of a growth', () => {
    const store = new MessageStore();
    const growing = (): boolean => (store as unknown as { previousIndex: Int32Array | null }).previousIndex !== null;
    const live = new Set<number>();
    let id = 0;
    let midGrowth = 0;
    const expectAll = (target: MessageStore): void => {
      expect(target.size).toBe(live.size);
      const wrong = [...live].filter((kept) => target.get(kept)?.id !== kept);
      expect(wrong).toEqual([]);
      expect(target.has(id + 1)).toBe(false);
    };
    // Through several growths (16 -> 65,536 slots), deleting and checking while they are under way.
    while (id < 40_000) {
      id += 1;
      store.insert(message(id, id % 4), 'ready');
      live.add(id);
      if (!growing()) continue;
      midGrowth += 1;
      // Deletes of messages not moved yet (old ids) and moved or new ones.
      for (const victim of [id - 1, Math.floor(id / 2), Math.floor(id / 3)]) {
        if (!live.has(victim)) continue;
        expect(store.delete(victim)).toBe(true);
        live.delete(victim);
      }
      if (midGrowth % 499 === 0) {
        const copy = store.clone();
        expectAll(copy);
        expectAll(store);
        // The copy is independent: the store goes on growing, the copy keeps what it had.
        const before = new Set(live);
        for (let k = 0; k < 50; k++) {
          id += 1;
          store.insert(message(id, 0), 'ready');
          live.add(id);
        }
        expect(copy.size).toBe(before.size);
        expect([...before].filter((kept) => !copy.has(kept))).toEqual([]);
        expect(copy.has(id)).toBe(false);
      }
    }
    expect(midGrowth).toBeGreaterThan(2000);
    expectAll(store);
    // A shrink in the middle of a growth rebuilds the index from the columns.
    while (!growing()) {
      id += 1;
      store.insert(message(id, 1), 'ready');
      live.add(id);
    }
    for (const victim of [...live].filter((v) => v % 7 !== 0)) {
      store.delete(victim);
      live.delete(victim);
    }
    store.shrink();
    expect(growing()).toBe(false);
    expectAll(store);
    expect(store.keys()).toEqual([...live].sort((a, b) => a - b));
  });

  it('gives back the memory of a drained backlog (shrink), keeping every live message as it was', () => {
    const store = new MessageStore();
    for (let id = 1; id <= 100_000; id++) store.insert(message(id, id % 3), 'ready');
    const grown = store.capacity;
    expect(grown).toBeGreaterThanOrEqual(100_000);
    // One old message stays (the head), the rest is consumed.
    for (let id = 2; id <= 100_000; id++) store.delete(id);
    store.shrink();
    expect(store.capacity).toBeLessThanOrEqual(16);
    expect(store.keys()).toEqual([1]);
    expect(store.get(1)).toMatchObject({ id: 1, exchange: 'ex1', sizeBytes: sizeOf(1), priority: 1, place: 'ready' });
    // And it grows again as before.
    for (let id = 200_001; id <= 200_100; id++) store.insert(message(id, 0), 'delayed');
    expect(store.size).toBe(101);
    expect(store.get(200_050)?.place).toBe('delayed');
    expect(store.get(1)?.routingKeys).toEqual(['key1']);
  });
});
