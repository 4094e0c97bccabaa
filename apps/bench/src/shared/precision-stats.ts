/**
 * What the precision and cancel-latency benchmarks share: a row of latencies summarised as percentiles against
 * a goal on the p99, in a plain JSON-able shape.
 */

/** One measured row: percentiles of its samples (ms, two decimals) and whether the goal on the p99 was met. */
export interface LatencyRow {
  name: string;
  /** Samples behind the figures (0 when skipped). */
  n: number;
  p50: number | null;
  p99: number | null;
  max: number | null;
  /** The goal, in words. */
  goal: string;
  /** The goal: the p99 is at most this many ms. */
  goalMs: number;
  /** Whether the p99 is within the goal (false when skipped). */
  met: boolean;
  /** Why the row was not measured (a service that does not answer); absent when it was. */
  skipped?: string;
}

/** Nearest-rank percentile of `values` (sorted or not). */
export function percentile(values: readonly number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  const index = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[index] as number;
}

export const round2 = (x: number): number => Math.round(x * 100) / 100;

/** The row for `samples` (ms) against a goal of p99 ≤ `goalMs`. */
export function latencyRow(name: string, samples: readonly number[], goalMs: number, goal: string): LatencyRow {
  if (samples.length === 0) return skippedRow(name, goalMs, goal, 'no samples');
  const p99 = round2(percentile(samples, 99));
  return {
    name,
    n: samples.length,
    p50: round2(percentile(samples, 50)),
    p99,
    max: round2(Math.max(...samples)),
    goal,
    goalMs,
    met: p99 <= goalMs,
  };
}

/** A row that could not be measured, and why. */
export function skippedRow(name: string, goalMs: number, goal: string, reason: string): LatencyRow {
  return { name, n: 0, p50: null, p99: null, max: null, goal, goalMs, met: false, skipped: reason };
}
