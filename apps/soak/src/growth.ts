/**
 * Whether a process grew over a soak: the median of its samples in the first window against the median of those
 * in the last, for its memory and for each kind of resource it held. Medians, because a sample can fall on a
 * burst (requests in flight hold sockets and timers for a moment); windows, because the first minute is the
 * process warm and the last is the process after everything the run did to it.
 */
import type { ProcessSample } from './process-probe.js';

/** How much a process grew from the first window to the last (negative: it shrank). */
export interface Growth {
  heapBytes: number;
  rssBytes: number;
  /** The RSS less what the young generation had committed (see `ProcessSample.youngBytes`). */
  rssOutsideYoungBytes: number;
  /** Per resource type seen in either window: the last window's median count minus the first's. */
  resources: Record<string, number>;
  /** How many samples each window held. */
  samples: { first: number; last: number };
}

/**
 * The growth of `samples` (in the order taken) from the first `windowMs` to the last `windowMs`. Throws a
 * `RangeError` when a window holds no sample: there is nothing to compare.
 *
 * @example
 * ```ts
 * const growth = growthOf(samples, 60_000);
 * if (growth.heapBytes > 5 * 2 ** 20) console.log('the heap grew by more than 5 MB');
 * ```
 */
export function growthOf(samples: readonly ProcessSample[], windowMs: number): Growth {
  if (!(windowMs > 0)) throw new RangeError(`the window must be a positive number of ms, not ${windowMs}`);
  const start = samples[0]?.at ?? 0;
  const end = samples.at(-1)?.at ?? 0;
  const first = samples.filter((s) => s.at < start + windowMs);
  const last = samples.filter((s) => s.at > end - windowMs);
  if (samples.length === 0 || first.length === 0 || last.length === 0) {
    throw new RangeError(`no samples to compare (${samples.length} in all)`);
  }
  const types = new Set([...first, ...last].flatMap((s) => Object.keys(s.resources)));
  const resources: Record<string, number> = {};
  for (const type of types) {
    const count = (s: ProcessSample) => s.resources[type] ?? 0;
    resources[type] = median(last.map(count)) - median(first.map(count));
  }
  return {
    heapBytes: median(last.map((s) => s.heapBytes)) - median(first.map((s) => s.heapBytes)),
    rssBytes: median(last.map((s) => s.rssBytes)) - median(first.map((s) => s.rssBytes)),
    rssOutsideYoungBytes:
      median(last.map((s) => s.rssBytes - s.youngBytes)) - median(first.map((s) => s.rssBytes - s.youngBytes)),
    resources,
    samples: { first: first.length, last: last.length },
  };
}

/**
 * The median of `values` (the mean of the middle two for an even count); NaN for none.
 *
 * @example
 * ```ts
 * median([3, 1, 40, 2]); // 2.5
 * ```
 */
export function median(values: number[]): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const middle = sorted.length >> 1;
  return sorted.length % 2 === 1
    ? (sorted[middle] as number)
    : ((sorted[middle - 1] as number) + (sorted[middle] as number)) / 2;
}
