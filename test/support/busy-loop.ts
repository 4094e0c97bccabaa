/**
 * An event loop kept busy on purpose, for the admission tests of the RPC servers: each turn spins for `spinMs`, so
 * every timer fires that late and the server reads its calls on a loop that reads as loaded (core's `loopDelayMs()`),
 * as it would under a burst of CPU-bound requests. The turns still come, so calls are read and answered, slowly.
 */
export interface BusyLoop {
  /** Lets the loop go back to idle. */
  stop(): void;
}

export function keepLoopBusy(spinMs: number): BusyLoop {
  let running = true;
  const turn = () => {
    if (!running) return;
    const until = performance.now() + spinMs;
    while (performance.now() < until) {
      // busy: the loop can do nothing else
    }
    setImmediate(turn);
  };
  setImmediate(turn);
  return {
    stop() {
      running = false;
    },
  };
}
