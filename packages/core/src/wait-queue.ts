/**
 * Who gets the next free resource (a pooled connection) when callers wait for it: first come, first served
 * while the queue keeps up with its waiters' deadlines; newest first once it does not.
 *
 * Why: under a request budget a waiter that has queued long is near its deadline. Served in arrival order,
 * a saturated pool hands every connection to the request with the least time left, whose statement is then
 * cut — the database works, nobody gets an answer, and the queue never drains. Served newest first, the
 * connection goes to a request with time to use it, and the old waiters leave the queue at their deadline
 * without having cost the database anything ("adaptive LIFO", as in Facebook's "Fail at scale", 2015).
 *
 * When to switch is read off the deadlines, not a fixed wait: newest first once the oldest waiter has spent
 * in the queue as long as it has left. Before that, the queue may be long but it still serves every waiter in
 * time (a steady 200 ms wait under 1 s budgets), and arrival order is the fair one: switching there would
 * leave the oldest to starve for nothing.
 */
import type { OutgoingCall } from './call.js';
import { monotonicNow, timerDelay } from './clock.js';
import { DeadlineExceededError } from './errors.js';

interface Waiter {
  readonly since: number;
  /** When its call must stop (monotonic ms; Infinity without a deadline). */
  readonly stopsAt: number;
  readonly resolve: () => void;
  off: () => void;
  /** Fires when the time left no longer covers `reserveMs`. */
  timer: NodeJS.Timeout | undefined;
}

/** @internal */
export class WaitQueue {
  /** In arrival order. */
  readonly #waiters: Waiter[] = [];

  get size(): number {
    return this.#waiters.length;
  }

  /**
   * Waits for a turn ({@link serveNext}), for as long as `call` may: when the call stops first the waiter
   * leaves the queue and the promise rejects with the stop reason. With `reserveMs` (what the work typically
   * takes once served), it leaves as soon as the time left no longer covers that: the call stops with a
   * `DeadlineExceededError`, phase `before-call` — as a call is not made with less than its `minMs` left —
   * instead of being served only to be cut, and its hop can still answer before the caller's own deadline.
   */
  wait(call: OutgoingCall, reserveMs = 0): Promise<void> {
    const stopped = call.stopReason;
    if (stopped !== undefined) return Promise.reject(stopped);
    const spareMs = call.timeoutMs === undefined ? Infinity : call.timeoutMs - call.elapsedMs() - reserveMs;
    if (reserveMs > 0 && spareMs <= 0) return Promise.reject(notEnoughTime(call, reserveMs));
    return new Promise<void>((resolve, reject) => {
      const now = monotonicNow();
      const stopsAt = call.timeoutMs === undefined ? Infinity : now + call.timeoutMs - call.elapsedMs();
      const waiter: Waiter = { since: now, stopsAt, resolve, off: () => {}, timer: undefined };
      this.#waiters.push(waiter);
      waiter.off = call.onStop((reason) => {
        this.#leave(waiter);
        reject(reason);
      });
      if (reserveMs > 0 && spareMs < Infinity) {
        waiter.timer = setTimeout(() => call.stop(notEnoughTime(call, reserveMs)), timerDelay(spareMs));
        waiter.timer.unref();
      }
    });
  }

  /**
   * Gives one waiter its turn: the oldest, unless the oldest has already waited as long as it has left — then
   * the newest. False if none waits.
   */
  serveNext(): boolean {
    const waiters = this.#waiters;
    if (waiters.length === 0) return false;
    const oldest = waiters[0] as Waiter;
    const now = monotonicNow();
    const standing = now - oldest.since >= oldest.stopsAt - now;
    const waiter = (standing ? waiters.pop() : waiters.shift()) as Waiter;
    waiter.off();
    clearTimeout(waiter.timer);
    waiter.resolve();
    return true;
  }

  #leave(waiter: Waiter): void {
    clearTimeout(waiter.timer);
    const at = this.#waiters.indexOf(waiter);
    if (at !== -1) this.#waiters.splice(at, 1);
  }
}

function notEnoughTime(call: OutgoingCall, reserveMs: number): DeadlineExceededError {
  const leftMs = Math.max(0, Math.round((call.timeoutMs as number) - call.elapsedMs()));
  return new DeadlineExceededError({
    phase: 'before-call',
    target: call.target,
    hop: call.hop,
    budgetMs: call.timeoutMs,
    elapsedMs: call.elapsedMs(),
    message: `not calling ${call.target}: ${leftMs} ms left in the queue, less than its work takes (~${Math.round(reserveMs)} ms)`,
  });
}
