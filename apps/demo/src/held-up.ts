/**
 * How much this process was held up while something ran: how long it waited for a CPU (Linux counts it, in
 * /proc/self/schedstat: a busy machine) and the longest its event loop stalled beyond a 1 ms tick (that wait,
 * or a GC pause). Every hop of the chain and its client run in this one process, so a row that lands late can
 * say whether the machine held it up — and a stall of the machine is not read as the library's lateness.
 */
import { readFileSync } from 'node:fs';
import { monitorEventLoopDelay } from 'node:perf_hooks';

export interface HoldUp {
  /** Time spent runnable but not running (ms); undefined where the system does not say. */
  cpuWaitMs: number | undefined;
  /** The event loop's longest stall (ms). */
  longestStallMs: number;
}

export async function measureHoldUp<T>(run: () => Promise<T>): Promise<{ value: T; heldUp: HoldUp }> {
  const loop = monitorEventLoopDelay({ resolution: 1 });
  const waitedBefore = cpuWaitSoFar();
  loop.enable();
  try {
    const value = await run();
    const waitedAfter = cpuWaitSoFar();
    const cpuWaitMs =
      waitedBefore === undefined || waitedAfter === undefined ? undefined : Math.round(waitedAfter - waitedBefore);
    // The histogram counts the tick itself: a loop never held up reads about 1 ms.
    return { value, heldUp: { cpuWaitMs, longestStallMs: Math.max(0, Math.round(loop.max / 1e6) - 1) } };
  } finally {
    loop.disable();
  }
}

/** This thread's time waiting on a run queue since it started (ms): the second field of schedstat, in ns. */
function cpuWaitSoFar(): number | undefined {
  try {
    const waited = Number(readFileSync('/proc/self/schedstat', 'utf8').split(' ')[1]);
    return Number.isFinite(waited) ? waited / 1e6 : undefined;
  } catch {
    return undefined;
  }
}
