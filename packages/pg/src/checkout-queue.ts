/**
 * The checkout of a `pg.Pool`, in front of its own first-in-first-out queue. While the pool has a connection
 * free (idle, or room for a new one), a checkout goes straight to `pool.connect()`. Once it has none, callers
 * inside a deadline wait here instead, in core's `WaitQueue`: served in arrival order while the queue keeps up
 * with their deadlines, newest first once it does not (see wait-queue.ts), and
 * gone from the queue once their time left no longer covers what a statement here typically takes. A freed connection (the pool's `release` and `remove`
 * events) is handed to the next waiter by letting it call `pool.connect()`.
 *
 * Only pg-pool's public surface is read: `idleCount`, `totalCount`, `waitingCount`, `options.max` and its
 * events. A pool without them (another implementation, a single client) is checked out from directly.
 */
import { type OutgoingCall, unpatched, WaitQueue } from '@deadline/core/internal';
import { releaseLate } from './checkout.js';
import type { PgPoolClientLike, PgPoolLike } from './with-deadline.js';

/** What pg-pool exposes of its state. */
interface CountingPool {
  readonly idleCount: number;
  readonly totalCount: number;
  readonly waitingCount: number;
  readonly options: { max?: number | undefined };
  on(event: 'release' | 'remove', listener: () => void): unknown;
}

function isCountingPool(pool: object): pool is CountingPool {
  const p = pool as Partial<CountingPool>;
  return (
    typeof p.idleCount === 'number' &&
    typeof p.totalCount === 'number' &&
    typeof p.waitingCount === 'number' &&
    typeof p.options?.max === 'number' &&
    typeof p.on === 'function'
  );
}

/** @internal */
export class CheckoutQueue {
  readonly #pool: PgPoolLike & CountingPool;
  readonly #queue: WaitQueue;
  /** Turns given whose `pool.connect()` has not been called yet: those connections are spoken for. */
  #granted = 0;
  #pumpScheduled = false;
  /** What a unit of work typically holds a connection for (ms; a moving average of those that succeeded). */
  #typicalMs = 0;

  private constructor(pool: PgPoolLike & CountingPool) {
    this.#pool = pool;
    this.#queue = new WaitQueue();
    // 'release' comes before the connection is back among the idle ones: look once pg-pool is done with it.
    const pump = () => this.#schedulePump();
    pool.on('release', pump);
    pool.on('remove', pump);
  }

  /** One queue per pool (two wrappers of one pool share it), or undefined for a pool that does not count. */
  static of(pool: PgPoolLike): CheckoutQueue | undefined {
    if (!isCountingPool(pool)) return undefined;
    let queue = queues.get(pool);
    if (queue === undefined) queues.set(pool, (queue = new CheckoutQueue(pool)));
    return queue;
  }

  /** A connection for `call`, no later than its stop; one that arrives after the stop goes straight back. */
  async checkout(call: OutgoingCall): Promise<PgPoolClientLike> {
    if (this.#queue.size > 0 || this.#free() <= 0) {
      await this.#queue.wait(call, this.#typicalMs);
      this.#granted--;
    }
    try {
      return await call.race(() => unpatched(() => this.#pool.connect()), releaseLate);
    } finally {
      // A turn not used (the call stopped as it came), or a connection that failed to open: pass it on.
      this.#schedulePump();
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

  /** Connections nobody has claimed: idle ones and room for new ones, less pg-pool's own waiters and our grants. */
  #free(): number {
    const pool = this.#pool;
    return pool.idleCount + (pool.options.max as number) - pool.totalCount - pool.waitingCount - this.#granted;
  }

  #schedulePump(): void {
    if (this.#pumpScheduled || this.#queue.size === 0) return;
    this.#pumpScheduled = true;
    queueMicrotask(() => {
      this.#pumpScheduled = false;
      for (let free = this.#free(); free > 0 && this.#queue.serveNext(); free--) this.#granted++;
    });
  }
}

const queues = new WeakMap<object, CheckoutQueue>();
