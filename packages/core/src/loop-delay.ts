/**
 * How long work queues in this process before it runs: the event loop's delay, as admission reads it when a request
 * arrives. A request's bytes wait in the socket while the loop is busy elsewhere, so by the time its handler is
 * called its caller has already spent about one busy stretch of the loop — time the budget anchored at arrival does
 * not know about — and whatever it starts waits behind the same queue again.
 *
 * Measured by a timer that should fire every {@link TICK_MS}: how late its last tick was (the loop's last busy
 * stretch, which requests read now arrived during), plus how far past its next tick the loop is now (the stretch it
 * is in: requests read late in it waited that much longer). Only the last tick counts: once the loop runs freely
 * again, its next tick is on time and the queue reads 0, so a request arriving on an idle loop is not judged by a
 * stretch long over. One timer per process, unreferenced (it never keeps the process alive), started by the first
 * reader.
 */
import { monotonicNow } from './clock.js';

/** How often the loop is sampled, in ms. */
const TICK_MS = 20;

let timer: NodeJS.Timeout | undefined;
let lastTickAt = 0;
let lastDelayMs = 0;

function tick(): void {
  const now = monotonicNow();
  lastDelayMs = Math.max(0, now - lastTickAt - TICK_MS);
  lastTickAt = now;
}

/**
 * The event loop's current delay, in ms: how late its last tick was, plus how far past its next tick it is now. 0 on
 * an idle loop (within a millisecond or two of timer slack).
 *
 * @example
 * ```ts
 * const queueMs = loopDelayMs();
 * if (remainingMs < 2 * queueMs + expectedMs) refuse();
 * ```
 * @internal
 */
export function loopDelayMs(): number {
  const now = monotonicNow();
  if (timer === undefined) {
    lastTickAt = now;
    timer = setInterval(tick, TICK_MS);
    timer.unref();
    return 0;
  }
  const overdue = now - lastTickAt - TICK_MS;
  return overdue > 0 ? lastDelayMs + overdue : lastDelayMs;
}
