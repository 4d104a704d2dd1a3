/**
 * A node's incarnation (node-incarnation.ts): made once per data directory, kept across
 * restarts; a peer's first incarnation is recorded durably and another one under the same id
 * is refused; a peer that knew another incarnation of this node tells it its data was lost.
 */
import { MemoryKvStore } from '@quorumq/storage';
import { describe, expect, it } from 'vitest';

import { NodeIncarnations, lostDataMessage } from '../src/node-incarnation.js';

const settle = (): Promise<void> => new Promise((resolve) => setTimeout(resolve, 10));

describe('node incarnations', () => {
  it('one per data directory, the same after a restart; a new directory gets another', async () => {
    const kv = new MemoryKvStore();
    const first = await NodeIncarnations.load(kv);
    expect(first.own).toMatch(/^[0-9a-f]{32}$/);
    expect((await NodeIncarnations.load(kv)).own).toBe(first.own);
    expect((await NodeIncarnations.load(new MemoryKvStore())).own).not.toBe(first.own);
  });

  it("records a peer's first incarnation durably and refuses another under the same id", async () => {
    const kv = new MemoryKvStore();
    const node = await NodeIncarnations.load(kv);
    const a = 'a'.repeat(32);
    const b = 'b'.repeat(32);
    expect(node.accept('n2', a)).toBe(true);
    expect(node.accept('n2', a)).toBe(true);
    expect(node.accept('n2', b)).toBe(false);
    // A peer of an older release tells none: accepted, nothing recorded for it.
    expect(node.accept('n3', undefined)).toBe(true);
    expect(node.known('n3')).toBeUndefined();
    await settle();
    const restarted = await NodeIncarnations.load(kv);
    expect(restarted.known('n2')).toBe(a);
    expect(restarted.accept('n2', b)).toBe(false);
  });

  it('a peer that knew another incarnation of this node says its data was lost', async () => {
    const node = await NodeIncarnations.load(new MemoryKvStore());
    expect(node.lostOwnData(undefined)).toBe(false);
    expect(node.lostOwnData(node.own)).toBe(false);
    expect(node.lostOwnData('c'.repeat(32))).toBe(true);
    expect(node.lostOwnData('not an incarnation')).toBe(false);
    expect(lostDataMessage('n2', 'n3')).toContain('remove-node n2 --replace-with');
  });
});
