/**
 * An event loop kept busy on purpose, for the admission tests: `spin` holds it for a stretch, `keepLoopBusy` holds
 * every turn, so that each timer fires that late and a server reads its requests on a loop that reads as loaded (core's
 * `loopDelayMs()`), as it would under a burst of CPU-bound requests; `untilLoopIdle` waits for it to read idle again.
 */
import { untilTrue } from './turns.ts';

/** Keeps the loop busy for `ms`: it can do nothing else meanwhile. */
export function spin(ms: number): void {
  const until = performance.now() + ms;
  while (performance.now() < until) {
    // busy: the loop can do nothing else
  }
}

export interface BusyLoop {
  /** Lets the loop go back to idle. */
  stop(): void;
}

/** Spins `spinMs` on every turn until stopped. The turns still come, so requests are read and answered, slowly. */
export function keepLoopBusy(spinMs: number): BusyLoop {
  let running = true;
  const turn = () => {
    if (!running) return;
    spin(spinMs);
    setImmediate(turn);
  };
  setImmediate(turn);
  return {
    stop() {
      running = false;
    },
  };
}

/**
 * Lets the loop turn until `loopDelayMs()` (the core's, from the test's own import of it) reads under a millisecond:
 * its timer ticked on time, within timer slack (on a busy machine it is rarely exactly 0), far below the 10 ms that
 * means loaded.
 */
export async function untilLoopIdle(loopDelayMs: () => number): Promise<void> {
  loopDelayMs();
  await untilTrue(() => loopDelayMs() < 1);
}
