/**
 * The one clock every deadline in this process is measured on.
 *
 * `performance.now()` is monotonic: NTP steps and manual clock changes cannot make elapsed time negative or
 * stretch a budget, which is why wall-clock (`Date.now()`) arithmetic never appears in this package.
 * Test fake timers that swap `globalThis.performance` (with the timers they also fake) are followed: while
 * `globalThis.setTimeout` is still the one this module found, the clock is the one it found too; once a fake
 * swapped the timers, the clock is read from the global again. (A fake of `performance.now()` alone, the timers
 * left real, is followed from Node 26 only: on Node 20, 22 and 24 the clock is read from `process.hrtime()`, below.)
 */

/** The timer function and the clock this module found when it loaded. */
const loadedSetTimeout = globalThis.setTimeout;
const loadedPerformance = globalThis.performance;

/**
 * `performance.now()` costs more than `process.hrtime()` on Node 20, 22 and 24 (a brand check wrapped in
 * `hideStackFrames`): per read, callgrind, 234 against 171 instructions on Node 20, 348 against 201 on Node 22, 202
 * against 181 on Node 24, two reads a request. There the clock is read from `process.hrtime()` itself, on
 * `performance.now()`'s origin. On Node 24 its brand check's functions also took 195 bytes of the 920 V8 inlines
 * into a request's start, which left RequestState's constructor out of it (a construct stub, ~1k instructions a
 * request with what V8 could no longer fold: express, `--trace-turbo-inlining`, callgrind). From Node 26,
 * `performance.now()` is the cheaper (222 against 248) and `process.hrtime()` the larger (238 bytes), so it is kept.
 */
const loadedHrtime = Number.parseInt(process.versions.node, 10) < 26 ? process.hrtime : undefined;

/** `process.hrtime()` in milliseconds, unshifted. */
function hrtimeMs(hrtime: NodeJS.HRTime): number {
  // Indexed, not destructured: destructuring compiles to the iterator protocol, and its bytecode counts against
  // what V8 will inline into a request's start.
  const time = hrtime();
  return (time[0] as number) * 1e3 + (time[1] as number) / 1e6;
}

/**
 * Where `performance.now()`'s zero lies on `process.hrtime()`'s clock (both read libuv's monotonic clock): from
 * the reading taken between the closest pair of `process.hrtime()` readings, a fraction of a microsecond off.
 */
function hrtimeOrigin(hrtime: NodeJS.HRTime): number {
  let best = Number.POSITIVE_INFINITY;
  let origin = 0;
  for (let i = 0; i < 20; i++) {
    const before = hrtimeMs(hrtime);
    const at = loadedPerformance.now();
    const after = hrtimeMs(hrtime);
    if (after - before < best) {
      best = after - before;
      origin = (before + after) / 2 - at;
    }
  }
  return origin;
}

const loadedOrigin = loadedHrtime === undefined ? 0 : hrtimeOrigin(loadedHrtime);

/**
 * Milliseconds on this process's monotonic clock (fractional), on `performance.now()`'s origin. Only differences
 * between two readings mean anything. Not `globalThis.performance.now()` on every call: Node defines
 * `performance` on the global as a lazy getter, and reading it there cost 0.6k instructions per fastify request
 * (callgrind, Node 20 and 24); `setTimeout` is a plain property, a load the JIT folds.
 */
export const monotonicNow: () => number =
  loadedHrtime === undefined
    ? () => (globalThis.setTimeout === loadedSetTimeout ? loadedPerformance.now() : globalThis.performance.now())
    : () =>
        globalThis.setTimeout === loadedSetTimeout
          ? hrtimeMs(loadedHrtime) - loadedOrigin
          : globalThis.performance.now();

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
