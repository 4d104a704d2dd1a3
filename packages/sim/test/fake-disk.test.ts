import type { Random } from '@quorumq/raft';
import { expect, test } from 'vitest';
import { FakeDisk } from '../src/fake-disk.js';
import { Scheduler } from '../src/scheduler.js';

/** Latencies in order: `1 + value` ms each (see the fake disk's `later`). */
function latencies(...values: number[]): Random {
  return { nextInt: () => values.shift() ?? 0 };
}

function runAll(scheduler: Scheduler): void {
  for (let event = scheduler.pop(); event !== undefined; event = scheduler.pop()) event.run();
}

test('a sync that completes after a later-called one does not take back what that one made durable', async () => {
  const scheduler = new Scheduler();
  // The first directory sync takes 4 ms, the second 1 ms; then the data syncs likewise.
  const disk = new FakeDisk(scheduler, latencies(3, 0, 3, 0));
  const fs = disk.fsOf('n1');
  await fs.mkdirp('/d');
  const a = await fs.openAppend('/d/a');
  await a.write(Buffer.from('one'));
  const early = fs.syncDir('/d'); // sees only a
  await fs.openAppend('/d/b');
  const later = fs.syncDir('/d'); // sees a and b, completes first
  const first = a.datasync(); // "one"
  await a.write(Buffer.from('two'));
  const second = a.datasync(); // "onetwo", completes first
  runAll(scheduler);
  await Promise.all([early, later, first, second]);
  disk.crash('n1', 0);
  expect((await fs.list('/d')).sort()).toEqual(['a', 'b']);
  expect(Buffer.from(await fs.readFile('/d/a')).toString()).toBe('onetwo');
});
