/**
 * Every group's options have one hidden class (RaftGroup's withEveryOption): the metadata
 * group's and a queue's name different optional fields, and the Ready loop, optimised while
 * one of them was busy, was deoptimised when the other wrote. Compared with V8's %HaveSameMap.
 */
import { MemoryKvStore, NodeStorage, NodeWalFs } from '@quorumq/storage';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setFlagsFromString } from 'node:v8';
import { afterEach, describe, expect, it } from 'vitest';
import { systemEnv } from '../src/node-env.js';
import { RaftGroup } from '../src/raft-group.js';
import { Echo } from './echo-machine.js';

setFlagsFromString('--allow-natives-syntax');
const haveSameMap = new Function('a', 'b', 'return %HaveSameMap(a, b);') as (a: object, b: object) => boolean;
setFlagsFromString('--no-allow-natives-syntax');

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

describe('RaftGroup options', () => {
  it('have one hidden class whichever optional fields a group is given, and keep their values', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'quorumq-group-shape-'));
    dirs.push(dir);
    const storage = await NodeStorage.open({ dir, fs: new NodeWalFs(), kv: new MemoryKvStore() });
    const base = {
      env: systemEnv,
      nodeId: 'n1',
      storage,
      machine: new Echo(),
      initialVoters: ['n1', 'n2', 'n3'],
      send: () => {},
      onFatal: (error: unknown) => {
        throw error;
      },
      electionTicks: 10,
      heartbeatTicks: 1,
    };
    const knownMember = (): boolean => true;
    // Like the metadata group: its own optional fields, a spread last.
    const meta = new RaftGroup<string>({ groupId: 'meta', ...base, onApplied: () => {}, knownMember, rationedElections: false, announceCommit: true, ...{ tuning: { appendEntriesMax: 64 } } });
    // Like a queue: other optional fields, in another order.
    const queue = new RaftGroup<string>({ ...base, groupId: 'q/1', knownMember, onPrepared: () => {}, onPrepareFailed: () => {} });
    const optionsOf = (group: RaftGroup<string>): Record<string, unknown> => (group as unknown as { options: Record<string, unknown> }).options;
    expect(haveSameMap(optionsOf(meta), optionsOf(queue))).toBe(true);
    expect(optionsOf(meta).announceCommit).toBe(true);
    expect(optionsOf(meta).knownMember).toBe(knownMember);
    expect(optionsOf(queue).announceCommit).toBeUndefined();
    expect(optionsOf(queue).groupId).toBe('q/1');
    meta.stop('test over');
    queue.stop('test over');
    await storage.close();
  });
});
