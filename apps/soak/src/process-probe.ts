/**
 * What one process holds, sampled through a soak: its memory after a full collection, and the resources that keep
 * its event loop alive (sockets, timers, handles), counted by type. A leak of a listener, a timer or a socket per
 * request shows as a count that grows with the requests served; a leak of memory as a heap that does not come
 * back down after a collection.
 */
import { getHeapSpaceStatistics, setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

/** One sample of a process. */
export interface ProcessSample {
  /** When, on the process's `performance.now()` (ms). */
  at: number;
  /** Resident set size (bytes). */
  rssBytes: number;
  /**
   * What V8's young generation has committed (its new space and new large objects, bytes): part of the RSS that
   * V8 grows and shrinks with the allocation rate (2 to 32 MB; inventory's fell from 32 to 2 MB while it was paused),
   * and that holds no object past two collections — a leak shows elsewhere.
   */
  youngBytes: number;
  /** V8's heap in use right after a full collection (bytes). */
  heapBytes: number;
  /** Its active resources by type, as `process.getActiveResourcesInfo()` names them (`TCPSocketWrap`, `Timeout`…). */
  resources: Record<string, number>;
}

let collectGarbage: (() => void) | undefined;

/**
 * V8's full collection: `globalThis.gc` when the process was started with `--expose-gc`, else the same function
 * taken from a context made after turning the flag on (V8 exposes it to contexts created from then on).
 */
function fullCollection(): () => void {
  if (collectGarbage !== undefined) return collectGarbage;
  const exposed = (globalThis as { gc?: unknown }).gc;
  if (typeof exposed === 'function') {
    collectGarbage = exposed as () => void;
  } else {
    setFlagsFromString('--expose-gc');
    collectGarbage = runInNewContext('gc') as () => void;
  }
  return collectGarbage;
}

/**
 * Samples this process: two full collections first (the second frees what the first's finalizers let go of),
 * then its memory and its active resources.
 *
 * @example
 * ```ts
 * const sample = sampleProcess();
 * console.log(sample.heapBytes, sample.resources.Timeout ?? 0);
 * ```
 */
export function sampleProcess(): ProcessSample {
  const collect = fullCollection();
  collect();
  collect();
  const memory = process.memoryUsage();
  const resources: Record<string, number> = {};
  for (const type of process.getActiveResourcesInfo()) resources[type] = (resources[type] ?? 0) + 1;
  let youngBytes = 0;
  for (const space of getHeapSpaceStatistics()) {
    if (space.space_name === 'new_space' || space.space_name === 'new_large_object_space') {
      youngBytes += space.space_size;
    }
  }
  return { at: performance.now(), rssBytes: memory.rss, youngBytes, heapBytes: memory.heapUsed, resources };
}
