/**
 * The core's Node- and V8-version-specific fast paths, all of them, and nothing else.
 *
 * The rule: a path lives here only if it exists because of a particular Node or V8 version (a branch on the Node
 * version, a variant kept for some Nodes, a workaround for a cost a newer V8 no longer has). Each says what it does,
 * why (the measurement that keeps it), and `Delete when:` — the condition under which it, and its callers' use of
 * it, can go. What every supported Node needs is the design, and stays in its own module (the clock's following of
 * fake timers in clock.ts, the lazy scope, the one expiry timer).
 *
 * Node's support ends: Node 20 in April 2026, Node 22 in April 2027, Node 24 in April 2028.
 */

// ---------------------------------------------------------------------------------------------------------------
// The clock read from `process.hrtime()` (Node 20, 22 and 24)
// ---------------------------------------------------------------------------------------------------------------

/**
 * The timer function and the clock found when the core loaded: clock.ts's own (its `loadedSetTimeout` and
 * `loadedPerformance`), read again here, just before clock.ts reads them, so that this path is whole in this module
 * and its reads on a request stay in the module they are made from.
 */
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
 * (So a fake of `performance.now()` alone, the timers left real, is followed from Node 26 only: see clock.ts.)
 *
 * Delete when: Node 24 leaves support (April 2028; Node 26 is then the oldest) — this whole section, and in
 * clock.ts `monotonicNow`'s arm that takes {@link hrtimeNow}.
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
 * `monotonicNow` on Node 20, 22 and 24 (where {@link loadedHrtime} is set): `process.hrtime()` on
 * `performance.now()`'s origin while the timers are the ones found at load, else the global `performance.now()` (a
 * fake's); `undefined` from Node 26 on, where clock.ts reads `performance.now()`. Delete when: as
 * {@link loadedHrtime}.
 * @internal
 */
export const hrtimeNow: (() => number) | undefined =
  loadedHrtime === undefined
    ? undefined
    : () =>
        globalThis.setTimeout === loadedSetTimeout
          ? hrtimeMs(loadedHrtime) - loadedOrigin
          : globalThis.performance.now();
