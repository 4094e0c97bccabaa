/**
 * The checkout of a connection pool, in front of a deadline-aware queue of its own. While the pool has a connection
 * free (idle, or room for a new one), a checkout goes straight to the pool. Once it has none, callers inside a
 * deadline wait here instead, in a `WaitQueue` (wait-queue.ts): served in arrival order while the queue keeps up
 * with their deadlines, newest first once it does not, and gone from the queue once their time left no longer
 * covers what a unit of work on this pool typically takes. A connection coming free (the adapter calls `pump()`)
 * is handed to the next waiter by letting it ask the pool.
 *
 * The pool's own queue (mysql2's, pg-pool's) serves in arrival order and keeps a waiter until the pool's own
 * timeout, if it has one, whatever the waiter's deadline: under overload every connection goes to the request
 * with the least time left. This is the driver-independent half; each database adapter says how many connections
 * its pool has free and when one may have come free.
 */
import type { OutgoingCall } from './call.js';
import { unpatched } from './unpatched.js';
import { WaitQueue } from './wait-queue.js';

/** @internal */
export class CheckoutQueue {
  /** Connections nobody has claimed: idle ones and room for new ones, less the pool's own waiters. */
  readonly #unclaimed: () => number;
  readonly #queue = new WaitQueue();
  /** Turns given whose checkout has not asked the pool yet: those connections are spoken for. */
  #granted = 0;
  #pumpScheduled = false;
  /** What a unit of work typically holds a connection for (ms; a moving average of those that succeeded). */
  #typicalMs = 0;

  /** `unclaimed`: how many connections the pool could hand out now without queueing anyone. */
  constructor(unclaimed: () => number) {
    this.#unclaimed = unclaimed;
  }

  /**
   * A connection for `call` from `connect()`, no later than the call's stop; one that arrives after the stop is
   * handed to `late` (which gives it back) and the checkout rejects with the stop's reason.
   */
  async checkout<C>(call: OutgoingCall, connect: () => Promise<C>, late: (connection: C) => void): Promise<C> {
    if (this.#queue.size > 0 || this.#free() <= 0) {
      await this.#queue.wait(call, this.#typicalMs);
      this.#granted--;
    }
    try {
      // Unpatched: an instrumented driver would bound the pool's checkout a second time.
      return await call.race(() => unpatched(connect), late);
    } finally {
      // A turn not used (the call stopped as it came), or a connection that failed to open: pass it on.
      this.pump();
    }
  }

  /**
   * A unit of work that succeeded held its connection `ms`: a waiter with less time left than that leaves the
   * queue (its statement would be cut), early enough for its hop to answer before the caller's deadline.
   */
  observe(ms: number): void {
    // An exponentially weighted average: follows a change of workload within a few dozen statements.
    this.#typicalMs = this.#typicalMs === 0 ? ms : this.#typicalMs + 0.1 * (ms - this.#typicalMs);
  }

  /**
   * A connection may have come free (given back, closed, or a turn not used): the next waiters get their turns
   * once the pool is done with it — in a microtask, as pools announce a release before they have filed the
   * connection among the idle ones.
   */
  pump(): void {
    if (this.#pumpScheduled || this.#queue.size === 0) return;
    this.#pumpScheduled = true;
    queueMicrotask(() => {
      this.#pumpScheduled = false;
      for (let free = this.#free(); free > 0 && this.#queue.serveNext(); free--) this.#granted++;
    });
  }

  #free(): number {
    return this.#unclaimed() - this.#granted;
  }
}
