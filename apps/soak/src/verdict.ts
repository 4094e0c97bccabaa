/**
 * Whether a soak passed: each of the issue's conditions as a check with its measured figures. A check that cannot
 * be judged from a run this short (memory and resource growth need a minute's window at each end, and the first
 * one to be out of the warm-up) says so instead of passing.
 */
import { type Growth, growthOf, median } from './growth.js';
import { p99WithEnoughBudget, recoveryMs } from './recovery.js';
import type { ServiceSample, SoakResult } from './soak.js';

export interface Check {
  name: string;
  /** null: not judged (the run is too short for it). */
  pass: boolean | null;
  detail: string;
}

export interface Verdict {
  pass: boolean;
  checks: Check[];
  /** Per fault: how long goodput took to be back (ms), and what it was allowed. */
  recoveries: { kind: string; recoveryMs: number | null; allowedMs: number; breakerOpened: boolean }[];
  p99: { beforeMs: number | null; afterMs: number | null };
  growth: Record<string, Growth>;
}

/** Memory a process may grow by from the first minute to the last (bytes). */
export const MEMORY_LIMIT_BYTES = 5 * 2 ** 20;
/** The growth window: the first and the last minute. */
const WINDOW_MS = 60_000;
/**
 * Resource counts are medians of samples taken under load, where requests in flight hold a socket, a timer and a
 * listener for a moment, and a pool keeps the connections a burst opened until they idle out: a count may sit
 * higher in the last window by as much as it swung within the first (and by 3 at least). A leak of one per
 * request grows by tens of thousands over the run, one per thousand requests by a hundred.
 */
const IN_FLIGHT_ALLOWANCE = 3;
/** Recovery: back to this share of the goodput before the fault, within this long (plus a breaker's cooldown). */
const RECOVERY_SHARE = 0.9;
const RECOVERY_WITHIN_MS = 2_000;
/** "The same" p99: after at most this much over before, relatively and absolutely (machine noise). */
const P99_RATIO = 1.25;
const P99_SLACK_MS = 20;
/** A p99 of fewer requests than this is decided by fewer than 10 of them: one pause on a shared machine. */
const P99_MIN_REQUESTS = 1_000;

/**
 * Judges a soak.
 *
 * @example
 * ```ts
 * const verdict = judge(await runSoak({ durationMs: 600_000 }));
 * for (const check of verdict.checks) console.log(check.pass ? 'ok  ' : 'FAIL', check.name, check.detail);
 * ```
 */
export function judge(result: SoakResult): Verdict {
  const checks: Check[] = [];
  const longEnough = result.durationMs >= 4 * WINDOW_MS;
  const growth: Record<string, Growth> = {};
  for (const [service, samples] of Object.entries(result.samples)) {
    growth[service] = growthOf(samples, longEnough ? WINDOW_MS : result.durationMs / 6);
  }
  const mb = (bytes: number) => `${(bytes / 2 ** 20).toFixed(2)} MB`;
  checks.push({
    name: 'memory: RSS and heap after GC grow < 5 MB, first minute to last',
    pass: longEnough
      ? Object.values(growth).every(
          (g) => g.heapBytes < MEMORY_LIMIT_BYTES && g.rssOutsideYoungBytes < MEMORY_LIMIT_BYTES,
        )
      : null,
    detail: Object.entries(growth)
      .map(
        ([s, g]) =>
          `${s} heap ${mb(g.heapBytes)}, RSS outside the young generation ${mb(g.rssOutsideYoungBytes)} (all of it ${mb(g.rssBytes)})`,
      )
      .join('; '),
  });
  const resourceGrowth = Object.entries(result.samples).map(([service, samples]) => {
    const window = longEnough ? WINDOW_MS : result.durationMs / 6;
    const start = samples[0]?.at ?? 0;
    const end = samples.at(-1)?.at ?? 0;
    const first = samples.filter((s) => s.at < start + window);
    const last = samples.filter((s) => s.at > end - window);
    const counts = (s: ServiceSample): Record<string, number> => ({
      ...s.resources,
      handles: Object.values(s.resources).reduce((a, b) => a + b, 0),
      'abort listeners': s.abortListeners,
    });
    const types = new Set([...first, ...last].flatMap((s) => Object.keys(counts(s))));
    const rows = [...types].map((type) => {
      const of = (list: ServiceSample[]) => list.map((s) => counts(s)[type] ?? 0);
      const growth = median(of(last)) - median(of(first));
      // How much the count moved within the first minute alone: growth below that is the load's, not a leak's.
      const allowance = Math.max(IN_FLIGHT_ALLOWANCE, Math.max(...of(first)) - Math.min(...of(first)));
      return { type, growth, allowance };
    });
    return { service, rows };
  });
  checks.push({
    name: 'handles, sockets, timers and abort listeners do not grow (beyond their swing within the first minute)',
    pass: longEnough ? resourceGrowth.every((r) => r.rows.every((row) => row.growth <= row.allowance)) : null,
    detail: resourceGrowth
      .map(
        (r) =>
          `${r.service}: ${r.rows
            .filter((row) => row.growth !== 0 || ['handles', 'abort listeners'].includes(row.type))
            .map((row) => `${row.type} ${row.growth > 0 ? '+' : ''}${row.growth} (≤ ${row.allowance})`)
            .join(', ')}`,
      )
      .join('; '),
  });
  const pools = [
    ...result.finish.orders.pools.map((p) => ({ ...p, service: 'orders' })),
    ...result.finish.inventory.pools.map((p) => ({ ...p, service: 'inventory' })),
  ];
  checks.push({
    name: 'every pool idle at the end, no connection left with a statement time limit',
    pass: pools.every((p) => p.total === p.idle && p.waiting === 0 && p.settings.altered.length === 0),
    detail: pools
      .map(
        (p) =>
          `${p.service} ${p.name}: ${p.idle}/${p.total} idle, ${p.waiting} waiting, ${p.settings.altered.length} of ${p.settings.connections} altered${p.settings.altered.length > 0 ? ` (${p.settings.altered.join(', ')})` : ''}`,
      )
      .join('; '),
  });
  const unhandled = Object.entries(result.unhandled).flatMap(([service, list]) => list.map((u) => `${service}: ${u}`));
  checks.push({
    name: 'no unhandled rejection or uncaught exception',
    pass: unhandled.length === 0,
    detail: unhandled.length === 0 ? 'none in any process' : unhandled.slice(0, 5).join('; '),
  });
  const queued = new Set(result.jobs.queued);
  const lost = result.jobs.added.filter((id) => result.jobs.processed[id] === undefined && !queued.has(id));
  const twice = Object.entries(result.jobs.processed).filter(([, n]) => n > 1);
  checks.push({
    name: 'every BullMQ job acknowledged was processed exactly once, or is still queued',
    pass: lost.length === 0 && twice.length === 0,
    detail: `${result.jobs.added.length} acknowledged, ${Object.keys(result.jobs.processed).length} processed, ${twice.length} more than once, ${queued.size} still queued, ${lost.length} lost`,
  });
  const drain = result.finish.orders.drain;
  checks.push({
    name: 'every detached task ended by the drain',
    pass: drain !== undefined && drain.pending.length === 0,
    detail:
      drain === undefined
        ? 'no drain report'
        : `${drain.completed} completed in the drain, ${drain.pending.length} still running`,
  });
  const keysAnswered = result.charges.filter((c) => c.chargeIds.length > 0);
  const repeated = Object.entries(result.chargeRows).filter(([, n]) => n > 1);
  const answeredWithout = keysAnswered.filter((c) => result.chargeRows[c.order] !== 1);
  const changed = keysAnswered.filter((c) => new Set(c.chargeIds).size > 1);
  checks.push({
    name: 'exactly one side effect per idempotency key',
    pass: repeated.length === 0 && answeredWithout.length === 0 && changed.length === 0,
    detail: `${result.charges.length} keys (${result.charges.reduce((a, c) => a + c.attempts, 0)} attempts), ${keysAnswered.length} answered; ${repeated.length} charged more than once, ${answeredWithout.length} answered without exactly one charge, ${changed.length} answered with different charges`,
  });

  const recoveries = result.faults.map((fault, index) => {
    const previousEnd = index === 0 ? 0 : (result.faults[index - 1]?.clearedAt ?? 0);
    // The goodput before: the quiet stretch since the previous fault (after it had recovered), at most 10 s.
    const beforeMs = Math.min(10_000, Math.max(1_000, (fault.startedAt - previousEnd) / 2));
    const breakerOpened = result.records.some(
      (r) => r.circuitOpen && r.doneAt >= fault.startedAt && r.doneAt <= fault.clearedAt + RECOVERY_WITHIN_MS,
    );
    const allowedMs = RECOVERY_WITHIN_MS + (breakerOpened ? result.breakerCooldownMs : 0);
    const ms = recoveryMs(result.records, fault, { share: RECOVERY_SHARE, beforeMs, bucketMs: 500, holdMs: 1_000 });
    return { kind: fault.kind, recoveryMs: ms, allowedMs, breakerOpened };
  });
  checks.push({
    name: 'goodput back to ≥ 90 % within 2 s of each fault clearing (+ the breaker’s cooldown where it opened)',
    pass: recoveries.every((r) => r.recoveryMs !== null && r.recoveryMs <= r.allowedMs),
    detail: recoveries
      .map(
        (r) =>
          `${r.kind} ${r.recoveryMs === null ? 'never' : `${(r.recoveryMs / 1000).toFixed(1)} s`} (≤ ${r.allowedMs / 1000} s${r.breakerOpened ? ', breaker opened' : ''})`,
      )
      .join('; '),
  });
  const first = result.faults[0];
  const last = result.faults.at(-1);
  // Before: after the warm-up (a tenth of the time to the first fault) up to it. After: from 10 s after the last
  // fault cleared (or a tenth of what remains) to the end.
  const beforeFrom = (first?.startedAt ?? 0) / 10;
  const afterFrom = (last?.clearedAt ?? 0) + Math.min(10_000, (result.durationMs - (last?.clearedAt ?? 0)) / 10);
  const beforeTo = first?.startedAt ?? result.durationMs;
  const p99 = {
    beforeMs: p99WithEnoughBudget(result.records, beforeFrom, beforeTo),
    afterMs: p99WithEnoughBudget(result.records, afterFrom, result.durationMs),
  };
  const counted = (from: number, to: number) =>
    result.records.filter((r) => r.enoughBudget && r.ok && r.sentAt >= from && r.sentAt < to).length;
  const sizes = [counted(beforeFrom, beforeTo), counted(afterFrom, result.durationMs)];
  const judged = sizes.every((n) => n >= P99_MIN_REQUESTS);
  checks.push({
    name: 'p99 of requests with enough budget the same before and after the faults',
    pass: !judged
      ? null
      : p99.beforeMs !== null &&
        p99.afterMs !== null &&
        p99.afterMs <= Math.max(p99.beforeMs * P99_RATIO, p99.beforeMs + P99_SLACK_MS),
    detail: `before ${p99.beforeMs?.toFixed(0) ?? '—'} ms, after ${p99.afterMs?.toFixed(0) ?? '—'} ms (same: after ≤ before × ${P99_RATIO} or + ${P99_SLACK_MS} ms), of ${sizes[0]} and ${sizes[1]} requests${judged ? '' : `: too few to judge (a p99 needs ${P99_MIN_REQUESTS} or more, or a handful of requests decides it)`}`,
  });
  return { pass: checks.every((c) => c.pass !== false), checks, recoveries, p99, growth };
}
