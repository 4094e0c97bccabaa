/**
 * When the soak breaks what, as shares of the run, so the ten-minute run and the suite's one-minute run go through
 * the same faults in the same order. Each fault gets the quiet time before it that its recovery is measured
 * against, and the run ends with a stretch of quiet the "after" latencies are read from.
 */

export type FaultKind = 'postgres-restart' | 'redis-restart' | 'mariadb-kill' | 'hop-paused' | 'slow-drip';

/** One fault in a run's plan (ms from the start of the load). */
export interface PlannedFault {
  kind: FaultKind;
  at: number;
  /** How long the fault is held (pause, drip); 0 for those that last as long as they take (restarts, a kill). */
  holdMs: number;
}

/**
 * The plan for a run of `durationMs`: PostgreSQL restarted at 15 %, Redis at 28 %, inventory's MariaDB
 * connections killed at 41 %, inventory paused (SIGSTOP) at 53 % for 5 s, and the orders → inventory link
 * dripping at 65 % for 30 s — both holds scaled down with runs shorter than ten minutes, to a floor of 1.5 s
 * and 5 s. The rest of the run is quiet: from 70 % on in ten minutes, from 82 % at the shortest (30 s).
 *
 * @example
 * ```ts
 * const plan = faultPlan(600_000); // [{ kind: 'postgres-restart', at: 90_000, holdMs: 0 }, …]
 * ```
 */
export function faultPlan(durationMs: number): PlannedFault[] {
  if (!(durationMs >= 30_000)) throw new RangeError(`a soak runs at least 30 s, not ${durationMs} ms`);
  const scale = Math.min(1, durationMs / 600_000);
  return [
    { kind: 'postgres-restart', at: 0.15 * durationMs, holdMs: 0 },
    { kind: 'redis-restart', at: 0.28 * durationMs, holdMs: 0 },
    { kind: 'mariadb-kill', at: 0.41 * durationMs, holdMs: 0 },
    { kind: 'hop-paused', at: 0.53 * durationMs, holdMs: Math.max(1_500, 5_000 * scale) },
    { kind: 'slow-drip', at: 0.65 * durationMs, holdMs: Math.max(5_000, 30_000 * scale) },
  ];
}
