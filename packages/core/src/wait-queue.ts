/**
 * Who gets the next free resource (a pooled connection) when callers wait for it: first come, first served
 * while the queue moves; newest first once it stands.
 *
 * Why: under a request budget a waiter that has queued long is near its deadline. Served in arrival order,
 * a saturated pool hands every connection to the request with the least time left, whose statement is then
 * cut — the database works, nobody gets an answer, and the queue never drains. Served newest first, the
 * connection goes to a request with time to use it, and the old waiters leave the queue at their deadline
 * without having cost the database anything ("adaptive LIFO", as in Facebook's "Fail at scale", 2015). While
 * the oldest waiter has waited less than `lifoAfterMs` the queue is only a burst, and arrival order is fairer.
 */
import type { OutgoingCall } from './call.js';
import { monotonicNow, timerDelay } from './clock.js';
import { DeadlineExceededError } from './errors.js';

interface Waiter {
  readonly since: number;
  readonly resolve: () => void;
  off: () => void;
  /** Fires when the time left no longer covers `reserveMs`. */
  timer: NodeJS.Timeout | undefined;
}

/** @internal */
export class WaitQueue {
  readonly #lifoAfterMs: number;
  /** In arrival order. */
  readonly #waiters: Waiter[] = [];

  /** `lifoAfterMs`: Infinity serves in arrival order always. */
  constructor(lifoAfterMs: number) {
    this.#lifoAfterMs = lifoAfterMs;
  }

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
      const waiter: Waiter = { since: monotonicNow(), resolve, off: () => {}, timer: undefined };
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

  /** Gives one waiter its turn: the oldest while the queue moves, the newest once it stands. False if none waits. */
  serveNext(): boolean {
    const waiters = this.#waiters;
    if (waiters.length === 0) return false;
    const standing = monotonicNow() - (waiters[0] as Waiter).since >= this.#lifoAfterMs;
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
