/**
 * The one clock every deadline in this process is measured on.
 *
 * `performance.now()` is monotonic: NTP steps and manual clock changes cannot make elapsed time negative or
 * stretch a budget, which is why wall-clock (`Date.now()`) arithmetic never appears in this package.
 * Test fake timers that swap `globalThis.performance` (with the timers they also fake) are followed: while
 * `globalThis.setTimeout` is still the one this module found, the clock is the one it found too; once a fake
 * swapped the timers, the clock is read from the global again. (A fake of `performance.now()` alone, the timers
 * left real, is followed from Node 26 only: on Node 20, 22 and 24 the clock is read from `process.hrtime()`, a path
 * of engine-paths.ts.)
 */

import { hrtimeNow } from './engine-paths.js';

/** The timer function and the clock this module found when it loaded. */
const loadedSetTimeout = globalThis.setTimeout;
const loadedPerformance = globalThis.performance;

/**
 * Milliseconds on this process's monotonic clock (fractional), on `performance.now()`'s origin. Only differences
 * between two readings mean anything. Not `globalThis.performance.now()` on every call: Node defines
 * `performance` on the global as a lazy getter, and reading it there cost 0.6k instructions per fastify request
 * (callgrind, Node 20 and 24); `setTimeout` is a plain property, a load the JIT folds.
 */
export const monotonicNow: () => number =
  hrtimeNow === undefined
    ? () => (globalThis.setTimeout === loadedSetTimeout ? loadedPerformance.now() : globalThis.performance.now())
    : hrtimeNow;

/**
 * The largest delay `setTimeout` honours (2^31−1 ms, about 24.8 days). Node fires a timer with a longer delay
 * at once (after a warning), so every timer this package arms is clamped to it and re-armed if the deadline is
 * still further away; `timeoutFor()` never returns more.
 *
 * @example
 * ```ts
 * setTimeout(onTimeout, Math.min(ms, MAX_TIMER_DELAY_MS));
 * ```
 */
export const MAX_TIMER_DELAY_MS = 2_147_483_647;

/** A delay safe to hand to `setTimeout`: whole milliseconds, at least 1, at most {@link MAX_TIMER_DELAY_MS}. */
export function timerDelay(ms: number): number {
  if (!(ms > 1)) return 1;
  if (ms >= MAX_TIMER_DELAY_MS) return MAX_TIMER_DELAY_MS;
  return Math.ceil(ms);
}
