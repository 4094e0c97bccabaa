/**
 * A steady load for fault tests: a few loops call the same function back to back while a test kills
 * connections or restarts a server under them. Every outcome is recorded with its time, so a test can say what
 * the fault did (which errors, how long calls took) and whether the load came back to the rate it had before.
 *
 * A failed call is followed by a short pause, as a real caller's retry would be: a loop spinning on instant
 * failures would measure nothing but itself.
 */

/** One call's outcome. */
export interface Outcome {
  /** When the call started and ended (`performance.now()`). */
  startedAt: number;
  endedAt: number;
  /** The error, when it failed. */
  error?: unknown;
}

/** What {@link steadyLoad} returns: the record so far, and how to stop it. */
export interface SteadyLoad {
  readonly outcomes: readonly Outcome[];
  /** Calls that succeeded per second between `from` and `to` (`performance.now()` times; by end time). */
  rate(from: number, to: number): number;
  /** Outcomes that failed and ended between `from` and `to`. */
  failures(from?: number, to?: number): Outcome[];
  /** The first call after `from` that succeeded, by end time. */
  firstSuccessAfter(from: number): Outcome | undefined;
  /** Waits until `count` more calls have succeeded (rejects after `limitMs`). */
  successes(count: number, limitMs?: number): Promise<void>;
  /** Stops the loops; resolves when every call in flight has settled. */
  stop(): Promise<void>;
}

const PAUSE_AFTER_FAILURE_MS = 10;

/** Starts `loops` loops, each calling `call` back to back until stopped. */
export function steadyLoad(loops: number, call: () => Promise<unknown>): SteadyLoad {
  const outcomes: Outcome[] = [];
  let stopped = false;
  let succeeded = 0;
  const waiters: { count: number; resolve: () => void }[] = [];
  const loop = async () => {
    while (!stopped) {
      const startedAt = performance.now();
      try {
        await call();
        outcomes.push({ startedAt, endedAt: performance.now() });
        succeeded++;
        for (const waiter of waiters.filter((w) => succeeded >= w.count)) {
          waiters.splice(waiters.indexOf(waiter), 1);
          waiter.resolve();
        }
      } catch (error) {
        outcomes.push({ startedAt, endedAt: performance.now(), error });
        await new Promise((resolve) => setTimeout(resolve, PAUSE_AFTER_FAILURE_MS));
      }
    }
  };
  const running = Array.from({ length: loops }, loop);
  return {
    outcomes,
    rate(from, to) {
      const ok = outcomes.filter((o) => o.error === undefined && o.endedAt >= from && o.endedAt < to).length;
      return (ok * 1000) / (to - from);
    },
    failures(from = 0, to = Number.POSITIVE_INFINITY) {
      return outcomes.filter((o) => o.error !== undefined && o.endedAt >= from && o.endedAt < to);
    },
    firstSuccessAfter(from) {
      return outcomes.find((o) => o.error === undefined && o.endedAt >= from);
    },
    successes(count, limitMs = 20_000) {
      return new Promise((resolve, reject) => {
        const timer = setTimeout(
          () => reject(new Error(`fewer than ${count} more successful calls in ${limitMs} ms`)),
          limitMs,
        );
        waiters.push({
          count: succeeded + count,
          resolve: () => {
            clearTimeout(timer);
            resolve();
          },
        });
      });
    },
    async stop() {
      stopped = true;
      await Promise.all(running);
    },
  };
}
