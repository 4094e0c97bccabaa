/**
 * Whether a soak passed: each of the issue's conditions as a check with its measured figures. A check that cannot
 * be judged from a run this short (memory and resource growth need a minute's window at each end, and the first
 * one to be out of the warm-up) says so instead of passing; recovery is judged in every run, how fast only in a
 * long one (see SHORT_RECOVERY).
 */
import { type Growth, growthOf, median } from './growth.js';
import { firstAnswerMs, longestWaitMs, okPerSecond, p99WithEnoughBudget, recoveryMs } from './recovery.js';
import type { ServiceSample, SoakResult } from './soak.js';
import type { SoakRecord } from './soak-load.js';

export interface Check {
  name: string;
  /** null: not judged (the run is too short for it). */
  pass: boolean | null;
  detail: string;
}

/** How the service came back after one fault (ms from when the fault cleared). */
export interface Recovery {
  kind: string;
  /** The first answer in time after the fault cleared, to a read through what broke made since it began. */
  firstAnswerMs: number | null;
  /**
   * FIRST_ANSWER_WITHIN_MS, plus `waitBeforeMs`, plus the breaker's cooldown where it opened; null: not judged, no
   * such read was answered in time in the quiet before the fault either (nothing to come back to).
   */
  firstAnswerAllowedMs: number | null;
  /** The longest wait for such an answer in the quiet before the fault: the service's own pace on this machine. */
  waitBeforeMs: number;
  /** Goodput back to `share` of its level before the fault, and held (null: never, within the records). */
  recoveryMs: number | null;
  /** null: not judged, no goodput before the fault to compare with. */
  allowedMs: number | null;
  share: number;
  breakerOpened: boolean;
}

export interface Verdict {
  pass: boolean;
  checks: Check[];
  /** Per fault: how it came back, and what it was allowed. */
  recoveries: Recovery[];
  p99: { beforeMs: number | null; afterMs: number | null };
  growth: Record<string, Growth>;
}

/** Memory a process may grow by from the first minute to the last (bytes). */
export const MEMORY_LIMIT_BYTES = 5 * 2 ** 20;
/** The growth window: the first and the last minute. */
const WINDOW_MS = 60_000;
/**
 * A run this long judges growth (a minute's window at each end, out of the warm-up, and minutes between) and how
 * fast goodput came back (each fault's level before read over its full 10 s); `npm run soak` runs ten minutes.
 */
export const LONG_RUN_MS = 4 * WINDOW_MS;
/**
 * Resource counts are medians of samples taken under load, where requests in flight hold a socket, a timer and a
 * listener for a moment, and a pool keeps the connections a burst opened until they idle out: a count may sit
 * higher in the last window by as much as it swung within the first (and by 3 at least). A leak of one per
 * request grows by tens of thousands over the run, one per thousand requests by a hundred.
 */
const IN_FLIGHT_ALLOWANCE = 3;
/**
 * Back by itself, in every run: after what broke was back — a restarted server once it said it accepts connections
 * again, the KILLs done, SIGCONT, the link restored — the first answer in time to a read through it (a MariaDB read
 * for the KILL) made since the fault began. What the services did, not a level read off the clock: a read that
 * waited through a restart and was answered ran on the new sessions, and an answer in time lands within the read's
 * 1 s budget however busy the machine (a busy machine makes fewer answers in time, not later ones). Allowed: 2 s —
 * the read's budget, and a second for the pools to open new connections (a few ms; tens on a loaded machine) —
 * plus the longest the service went without such an answer in the quiet before the fault (its own pace on this
 * machine in this run: tens of ms on an idle one, most of a second when other processes hold both cores), plus the
 * breaker's cooldown where it opened (a breaker open at the clearing refuses for up to that long). A service that did
 * not reconnect, or a breaker stuck open, has no answer at all. A fault with not one such answer in the whole quiet
 * before it is not judged (there is no pace to hold the service to: the machine was too busy for the load then), and
 * a run in which no fault could be judged fails.
 */
export const FIRST_ANSWER_WITHIN_MS = 2_000;
/**
 * How fast, in a long run: goodput (answers in time per 500 ms) back to 90 % of its level over the 10 s before the
 * fault, held for 1 s, within 2 s of the fault clearing (plus the breaker's cooldown where it opened). The
 * ten-minute run's load is 70 % of the capacity it measured first on the same machine, whatever else it runs, and a
 * bucket then holds ~40 answers (~80 a second at 130 requests/s) against a level read over 10 s.
 */
export const RECOVERY = { share: 0.9, withinMs: 2_000 } as const;
/**
 * In a shorter run (the suite's minute, at a fixed 60 requests/s whatever the machine can do) a 500 ms bucket holds
 * ~19 answers in time, and the level before each fault is read over 3.5 to 4.5 s: counting alone moves a bucket by
 * ±4, a fifth of the level, and a core taken by another process bunches answers into fewer buckets. 90 % is then inside an undisturbed
 * bucket's own swing, and "held for a second" waits on luck as much as on the service: with the other core busy it
 * came after 3.5 s in 2 runs of 4. So a short run judges that goodput came back to a level by itself, not how fast:
 * 75 % of its level, held for 1 s, before the next fault began (or the load ended). Three quarters is under what a
 * working service holds two buckets in a row with the other core busy, and over a service that lost a database: with
 * every MariaDB read failing (half the reads) goodput is just over half its level. The next fault comes 5.7 s at the
 * least after one cleared in a one-minute run (the paused hop → the drip): room for the breaker's cooldown, a busy
 * machine's backlog and the second the level must hold. The ten-minute run judges 90 % within 2 s.
 */
export const SHORT_RECOVERY = { share: 0.75 } as const;
/** Goodput is counted in buckets this long, and back means back for this long: every bucket in it at the share. */
const BUCKET_MS = 500;
const HOLD_MS = 1_000;
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
  const longEnough = result.durationMs >= LONG_RUN_MS;
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

  const recoveries = judgeRecoveries(result, longEnough);
  const seconds = (ms: number | null) => (ms === null ? 'never' : `${(ms / 1000).toFixed(1)} s`);
  // A fault with nothing to compare with before it (a machine too busy for the load at that moment) is not judged;
  // a run in which no fault could be judged fails: a service that never answered in time did not come back either.
  const within = (ms: number | null, allowed: number | null) =>
    allowed === null ? null : ms !== null && ms <= allowed;
  const all = (judged: (boolean | null)[]) =>
    (judged.length === 0 || judged.some((j) => j !== null)) && judged.every((j) => j !== false);
  checks.push({
    name: 'back by itself after each fault: a read through it answered in time within 2 s of it clearing (+ the longest wait for one before it, + the breaker’s cooldown where it opened)',
    pass: all(recoveries.map((r) => within(r.firstAnswerMs, r.firstAnswerAllowedMs))),
    detail: recoveries
      .map((r) =>
        r.firstAnswerAllowedMs === null
          ? `${r.kind} ${seconds(r.firstAnswerMs)} (not judged: no read through it answered in time in the quiet before it either)`
          : `${r.kind} ${seconds(r.firstAnswerMs)} (≤ ${(r.firstAnswerAllowedMs / 1000).toFixed(1)} s: ${r.waitBeforeMs.toFixed(0)} ms the longest wait before${r.breakerOpened ? ', breaker opened' : ''})`,
      )
      .join('; '),
  });
  checks.push({
    name: longEnough
      ? 'goodput back to ≥ 90 % within 2 s of each fault clearing (+ the breaker’s cooldown where it opened)'
      : 'goodput back to ≥ 75 %, held for 1 s, before the next fault (a run under four minutes; 90 % within 2 s is the ten-minute run’s)',
    pass: all(recoveries.map((r) => within(r.recoveryMs, r.allowedMs))),
    detail: recoveries
      .map((r) =>
        r.allowedMs === null
          ? `${r.kind} (not judged: no answer in time in the quiet before it)`
          : `${r.kind} ${seconds(r.recoveryMs)} (≤ ${(r.allowedMs / 1000).toFixed(1)} s${r.breakerOpened ? ', breaker opened' : ''})`,
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

/** Per fault, how the service came back: its first answer after, and its goodput against its level before. */
function judgeRecoveries(result: SoakResult, long: boolean): Recovery[] {
  return result.faults.map((fault, index) => {
    const previousEnd = index === 0 ? 0 : (result.faults[index - 1]?.clearedAt ?? 0);
    // The goodput before: the quiet stretch since the previous fault (after it had recovered), at most 10 s.
    const beforeMs = Math.min(10_000, Math.max(1_000, (fault.startedAt - previousEnd) / 2));
    const breakerOpened = result.records.some(
      (r) => r.circuitOpen && r.doneAt >= fault.startedAt && r.doneAt <= fault.clearedAt + FIRST_ANSWER_WITHIN_MS,
    );
    const cooldownMs = breakerOpened ? result.breakerCooldownMs : 0;
    // Every read crosses orders' PostgreSQL and Redis, and inventory through the link; the KILL hit MariaDB only.
    const through = (r: SoakRecord) => r.enoughBudget && (fault.kind !== 'mariadb-kill' || r.db === 'mariadb');
    const waitBeforeMs = longestWaitMs(result.records, fault.startedAt - beforeMs, fault.startedAt, through);
    const share = long ? RECOVERY.share : SHORT_RECOVERY.share;
    // A short run: back, and held, before the next fault began (or the load ended).
    const nextAt = result.faults[index + 1]?.startedAt ?? result.durationMs;
    const goodputBefore = okPerSecond(result.records, fault.startedAt - beforeMs, fault.startedAt);
    return {
      kind: fault.kind,
      firstAnswerMs: firstAnswerMs(result.records, fault, through),
      // A wait as long as the whole quiet before: not one answer there either, no pace to hold the service to.
      firstAnswerAllowedMs: waitBeforeMs >= beforeMs ? null : FIRST_ANSWER_WITHIN_MS + waitBeforeMs + cooldownMs,
      waitBeforeMs,
      recoveryMs: recoveryMs(result.records, fault, { share, beforeMs, bucketMs: BUCKET_MS, holdMs: HOLD_MS }),
      allowedMs: !(goodputBefore > 0)
        ? null
        : long
          ? RECOVERY.withinMs + cooldownMs
          : Math.max(0, nextAt - fault.clearedAt - HOLD_MS),
      share,
      breakerOpened,
    };
  });
}
