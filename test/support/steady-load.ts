/**
 * A steady load for fault tests: a few loops call the same function back to back while a test kills
 * connections or restarts a server under them. Every outcome is recorded with its time, so a test can say what
 * the fault did (which errors, how long calls took) and whether the load came back to the rate it had before.
 *
 * A failed call is followed by a short pause, as a real caller's retry would be: a loop spinning on instant
 * failures would measure nothing but itself. Every call, failed or not, is followed by a turn of the event loop: a
 * call that settles in microtasks (a checkout refused at once, for want of the time a statement typically takes)
 * would otherwise run again and again without one, and nothing else — not the connection it waits for to come
 * free — ever would (seen: a MariaDB fault test spun so, its worker at 2.5 GB, until killed 15 minutes on).
 *
 * "Back to its rate" is judged beside a twin: the same load, run at the same time on connections the fault does
 * not touch (see {@link besideTwin}). Test files run three at a time on two cores, so the machine's speed changes
 * from one second to the next by more than a fault does (seen: 329 jobs/s in the second before a kill, 155/s in
 * the second after, the worker back in 5 ms); the twin, slowed alike, is the floor measured in the same run.
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
  /** When each call that succeeded ended, in order (`performance.now()`). */
  successTimes(): number[];
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
        await new Promise((resolve) => setImmediate(resolve));
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
    successTimes() {
      return outcomes.filter((o) => o.error === undefined).map((o) => o.endedAt);
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

/** Events per second among `times` (`performance.now()`, any order) between `from` and `to`. */
export function rateOf(times: readonly number[], from: number, to: number): number {
  return (times.filter((t) => t >= from && t < to).length * 1000) / (to - from);
}

/**
 * The longest stretch between `from` and `to` with none of `times` in it (`from` and `to` count as edges): for a
 * twin that nothing disturbed, how long the machine itself kept calls from ending.
 */
export function longestGap(times: readonly number[], from: number, to: number): number {
  const inside = times.filter((t) => t > from && t < to).sort((a, b) => a - b);
  let longest = 0;
  let last = from;
  for (const t of [...inside, to]) {
    longest = Math.max(longest, t - last);
    last = t;
  }
  return longest;
}

/** A load's and its twin's success times, and the windows around a fault to compare. */
export interface TwinWindows {
  /** When the load's calls (or jobs) succeeded; the twin's, beside it and untouched by the fault. */
  load: readonly number[];
  twin: readonly number[];
  /** The window before the fault, and the one after it whose rate is judged (`[from, to)`, `performance.now()`). */
  before: readonly [number, number];
  after: readonly [number, number];
}

/** What {@link besideTwin} found: the load's rates, and the rate after it is held to. */
export interface TwinJudgement {
  before: number;
  after: number;
  twinBefore: number;
  twinAfter: number;
  /** The load's rate before, scaled down as far as the twin's rate fell between the windows. */
  expectedAfter: number;
  /** For a report: the four rates in a line. */
  line: string;
}

/**
 * A load's rate after a fault beside its twin's: whatever slowed the machine between the two windows (a file on
 * the other core, a server busy with another file, a stall) slowed the twin alike, so the load is expected back
 * at its rate before times the twin's after/before — never above its own rate before: the twin also gains what
 * the load leaves unused while it reconnects or its server is down (they share the process), and ran at 2.7 times
 * its rate before beside a Redis load whose server was restarting. A twin with no success at all before leaves the
 * load's own rate before as the expectation.
 */
export function besideTwin({ load, twin, before, after }: TwinWindows): TwinJudgement {
  const rates = {
    before: rateOf(load, ...before),
    after: rateOf(load, ...after),
    twinBefore: rateOf(twin, ...before),
    twinAfter: rateOf(twin, ...after),
  };
  const scale = rates.twinBefore > 0 ? Math.min(1, rates.twinAfter / rates.twinBefore) : 1;
  const expectedAfter = rates.before * scale;
  const line = `${rates.before.toFixed(0)}/s before, ${rates.after.toFixed(0)}/s after (its twin ${rates.twinBefore.toFixed(0)}/s, ${rates.twinAfter.toFixed(0)}/s: ${expectedAfter.toFixed(0)}/s expected)`;
  return { ...rates, expectedAfter, line };
}
