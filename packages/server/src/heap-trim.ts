/**
 * Gives memory an idle node no longer uses back to the operating system: a full garbage
 * collection (buffers dropped since the last one are freed only when V8 collects their
 * objects, and an idle process allocates nothing that would make it), then glibc's
 * `malloc_trim(0)`, which returns the free pages inside the C heap.
 *
 * Why the trim: glibc returns its main heap to the system only from the top. The data path
 * allocates buffers of every size (log entries, gRPC frames, snapshot columns); after a
 * backlog drained, ~100 MB of them were free inside the heap but still resident, below
 * buffers that live long (measured: one drained node 239 MB, 142 MB after `malloc_trim(0)`).
 * The alternatives measured cost throughput or did not help (docs/architecture.md, "Memory
 * after a drain"). Node offers no such call: it goes through koffi (a maintained FFI whose
 * binaries come as npm packages, no build step).
 *
 * The collection is V8's `gc`, present in a process started with `--expose-gc` (the CLI and
 * the image start nodes so). Only after work (IdleMemory): one forced collection in a node
 * that had done nothing yet left its publish rate a quarter lower afterwards (200,000 x 1 KiB
 * into one queue: 13,400-15,400 msg/s against 19,000-20,500), while one after a first phase
 * of work changed nothing measurable in the next (16,000-16,800 against 16,300-16,600).
 *
 * Either part may be missing (a process started without the flag; a C library without
 * `malloc_trim`, such as musl; a platform koffi has no binary for): it is skipped, and
 * `missing` says why.
 */
import { createRequire } from 'node:module';

export interface HeapTrim {
  /** A full collection (where the process has one), then the trim. */
  release(): void;
}

export function loadHeapTrim(): { readonly trim: HeapTrim | null; readonly missing: readonly string[] } {
  const missing: string[] = [];
  const gc: unknown = (globalThis as { gc?: unknown }).gc;
  const collect = typeof gc === 'function' ? (gc as () => void) : null;
  if (collect === null) missing.push('no full collection: the process was started without --expose-gc');
  let mallocTrim: ((pad: number) => number) | null = null;
  try {
    // koffi is CommonJS; a require keeps its load (and a failure) inside this try.
    const koffi = createRequire(import.meta.url)('koffi') as typeof import('koffi');
    mallocTrim = koffi.load('libc.so.6').func('int malloc_trim(size_t pad)') as (pad: number) => number;
  } catch (error) {
    missing.push(`no malloc_trim: ${error instanceof Error ? error.message : String(error)}`);
  }
  if (collect === null && mallocTrim === null) return { trim: null, missing };
  return {
    missing,
    trim: {
      release() {
        collect?.();
        mallocTrim?.(0);
      },
    },
  };
}
