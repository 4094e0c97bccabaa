/** How a call settled, for tests that time it: never rejects. */

/** When `work` settled, in ms since `start` (a `performance.now()` reading), and with what error (or none). */
export async function settle(start: number, work: Promise<unknown>): Promise<{ error: unknown; elapsed: number }> {
  try {
    await work;
    return { error: undefined, elapsed: performance.now() - start };
  } catch (error) {
    return { error, elapsed: performance.now() - start };
  }
}

/**
 * How late a plain timer for `ms`, set now, fires (ms past `ms`; never below 0): for a bound on something due at
 * the same time, the floor measured in the same run — whatever kept this process from running its timers (a file
 * beside it on two cores, a preemption, a GC pause) held both up alike.
 */
export function timerLateness(ms: number): Promise<number> {
  const start = performance.now();
  return new Promise((resolve) => setTimeout(() => resolve(Math.max(0, performance.now() - start - ms)), ms));
}

/** What {@link loopStalls} returns. */
export interface LoopStalls {
  /** The longest this process's event loop stalled (no tick) at any time between `from` and `to`. */
  longestBetween(from: number, to: number): number;
  stop(): void;
}

/**
 * A 1 ms interval's ticks, kept until `stop()`: a gap between two is a stall of this process (the machine kept it
 * off the CPU, a GC paused it), which holds up alike every timer, socket read and poll of a measurement.
 */
export function loopStalls(): LoopStalls {
  const ticks = [performance.now()];
  const timer = setInterval(() => ticks.push(performance.now()), 1);
  return {
    longestBetween(from, to) {
      let longest = 0;
      const all = [...ticks, performance.now()];
      for (let i = 1; i < all.length; i++) {
        const [start, end] = [all[i - 1] as number, all[i] as number];
        if (end > from && start < to) longest = Math.max(longest, end - start);
      }
      return longest;
    },
    stop() {
      clearInterval(timer);
    },
  };
}
