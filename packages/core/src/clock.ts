/**
 * The one clock every deadline in this process is measured on.
 *
 * `performance.now()` is monotonic: NTP steps and manual clock changes cannot make elapsed time negative or
 * stretch a budget, which is why wall-clock (`Date.now()`) arithmetic never appears in this package.
 * The global is read on every call (not captured once) so that test fake-timers that swap
 * `globalThis.performance` see the same time as the timers they also fake.
 */

/** Milliseconds on this process's monotonic clock (fractional). Only differences between two readings mean anything. */
export function monotonicNow(): number {
  return globalThis.performance.now();
}

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
