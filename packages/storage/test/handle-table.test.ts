/**
 * HandleTable (message-store/handles.ts): slots per live record in typed-array columns cut in
 * pages. Its memory follows the live records: pages are made when needed and dropped once
 * none of their slots is live (a drained node does not keep a table sized for its peak).
 */
import { describe, expect, it } from 'vitest';

import { HANDLE_SLOT_BYTES, HandleTable, PAGE_SLOTS } from '../src/message-store/handles.js';

describe('HandleTable', () => {
  it('keeps each live slot readable while it grows and shrinks, and gives memory back after a drain', () => {
    const table = new HandleTable();
    const empty = table.memoryBytes;
    const handles: number[] = [];
    for (let i = 0; i < 100_000; i++) handles.push(table.allocate(i * 3, i % 7, i * 10, i % 1000));
    const peak = table.memoryBytes;
    expect(peak).toBeGreaterThanOrEqual(100_000 * HANDLE_SLOT_BYTES);
    // Drain in order, keeping every 1,000th record: the survivors stay correct throughout.
    for (let i = 0; i < handles.length; i++) if (i % 1000 !== 0) expect(table.release(handles[i]!)).toBe(true);
    expect(table.live).toBe(100);
    for (let i = 0; i < handles.length; i += 1000) {
      const h = handles[i]!;
      expect(table.isLive(h)).toBe(true);
      expect([table.recordId(h), table.segment(h), table.offset(h), table.messageBytes(h), table.references(h)]).toEqual([i * 3, i % 7, i * 10, i % 1000, 1]);
    }
    // The survivors span the table, so little can go yet; once they leave, all of it does.
    for (let i = 0; i < handles.length; i += 1000) table.release(handles[i]!);
    expect(table.live).toBe(0);
    const more: number[] = [];
    for (let i = 0; i < 20_000; i++) more.push(table.allocate(i, 1, i, 1));
    for (const h of more) table.release(h);
    expect(table.memoryBytes).toBeLessThan(peak / 4);
    expect(table.memoryBytes).toBeLessThanOrEqual(Math.max(empty, 30_000 * HANDLE_SLOT_BYTES));
    expect(table.slots).toBeLessThan(20_001);
  });

  it('hands out the lowest free slots after a shrink, and never a live one twice', () => {
    const table = new HandleTable();
    const handles: number[] = [];
    for (let i = 0; i < 50_000; i++) handles.push(table.allocate(i, 0, i, 1));
    // Keep the first 1,000 and release the rest, newest first (so the free list starts high).
    for (let i = handles.length - 1; i >= 1000; i--) table.release(handles[i]!);
    const live = new Set(handles.slice(0, 1000));
    const fresh: number[] = [];
    for (let i = 0; i < 5000; i++) fresh.push(table.allocate(1_000_000 + i, 2, i, 2));
    for (const h of fresh) {
      expect(live.has(h)).toBe(false);
      live.add(h);
    }
    expect(live.size).toBe(6000);
    expect(Math.max(...fresh)).toBeLessThan(6000 + 1000);
    for (const h of handles.slice(0, 1000)) expect(table.recordId(h)).toBe(h);
    for (let i = 0; i < fresh.length; i++) expect(table.recordId(fresh[i]!)).toBe(1_000_000 + i);
  });

  it('gives back all but the pages of the last live records when those hold the highest slots (a drained backlog\'s tail)', () => {
    const table = new HandleTable();
    const handles: number[] = [];
    for (let i = 0; i < 200_000; i++) handles.push(table.allocate(i, 0, i, 1));
    const peak = table.memoryBytes;
    for (let i = 0; i < handles.length - 512; i++) table.release(handles[i]!);
    table.trim();
    expect(table.live).toBe(512);
    expect(table.memoryBytes).toBeLessThanOrEqual(2 * PAGE_SLOTS * HANDLE_SLOT_BYTES);
    expect(table.memoryBytes).toBeLessThan(peak / 10);
    for (let i = handles.length - 512; i < handles.length; i++) {
      const h = handles[i]!;
      expect(table.isLive(h)).toBe(true);
      expect(table.recordId(h)).toBe(i);
    }
    // The free slots of the pages kept go first, then those of the lowest dropped page, made
    // anew: the table does not grow.
    const keptFree = 200_000 - Math.floor(200_000 / PAGE_SLOTS) * PAGE_SLOTS - 512;
    const fresh: number[] = [];
    for (let i = 0; i < keptFree + 1000; i++) fresh.push(table.allocate(500_000 + i, 1, i, 2));
    expect(Math.min(...fresh.slice(0, keptFree))).toBeGreaterThanOrEqual(Math.floor(200_000 / PAGE_SLOTS) * PAGE_SLOTS);
    expect(fresh.slice(keptFree)).toEqual(Array.from({ length: 1000 }, (_, i) => i));
    expect(table.slots).toBe(200_000);
    for (let i = 0; i < fresh.length; i++) expect(table.recordId(fresh[i]!)).toBe(500_000 + i);
    expect(table.isLive(handles[0]!)).toBe(fresh.includes(handles[0]!));
  });

  it('never hands out a live slot, whatever the order of allocations and releases', () => {
    const table = new HandleTable();
    const live = new Map<number, number>();
    let seed = 12345;
    const next = (n: number): number => {
      seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
      return seed % n;
    };
    let id = 0;
    for (let round = 0; round < 60_000; round++) {
      // Phases of growth and of draining, so that pages fill, empty, drop and come back.
      const grow = Math.floor(round / 10_000) % 2 === 0 ? 3 : 1;
      if (live.size === 0 || next(4) < grow) {
        const h = table.allocate(id, 0, id, 1);
        expect(live.has(h)).toBe(false);
        live.set(h, id++);
      } else {
        const keys = [...live.keys()];
        const h = keys[next(keys.length)]!;
        expect(table.release(h)).toBe(true);
        live.delete(h);
      }
      if (round % 7_919 === 0) table.trim();
    }
    expect(table.live).toBe(live.size);
    for (const [h, recordId] of live) {
      expect(table.isLive(h)).toBe(true);
      expect(table.recordId(h)).toBe(recordId);
    }
  });

  it('lists the live handles of one segment in frame order, whatever order they were made and moved in', () => {
    const table = new HandleTable();
    // 40,000 records over three segments, their offsets in a scrambled order; some released,
    // some moved into segment 1 by a compaction (their offsets after those already there).
    const expected: Array<[offset: number, handle: number]> = [];
    const count = 40_000;
    for (let i = 0; i < count; i++) {
      const offset = ((i * 7919) % count) * 1040 + 24;
      const segment = i % 3;
      const handle = table.allocate(i + 1, segment, offset, 1024);
      if (i % 10 === 0) table.release(handle);
      else if (segment === 1) expected.push([offset, handle]);
      else if (segment === 2 && i % 5 === 2) {
        const moved = count * 1040 + offset;
        table.move(handle, 1, moved);
        expected.push([moved, handle]);
      }
    }
    expected.sort((a, b) => a[0] - b[0]);
    const listed = table.liveIn(1);
    expect(listed.length).toBe(expected.length);
    expect(Array.from(listed)).toEqual(expected.map(([, handle]) => handle));
    expect(Array.from(table.liveIn(7))).toEqual([]);
  });
});
