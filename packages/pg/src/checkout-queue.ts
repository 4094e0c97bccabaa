/**
 * A `pg.Pool`'s checkout behind core's deadline-aware `CheckoutQueue` (core's checkout-queue.ts): what pg-pool
 * has free, and when a connection may have come free (its `release` and `remove` events).
 *
 * Only pg-pool's public surface is read: `idleCount`, `totalCount`, `waitingCount`, `options.max` and its
 * events. A pool without them (another implementation, a single client) is checked out from directly.
 */
import { CheckoutQueue } from '@deadline/core/internal';
import type { PgPoolLike } from './with-deadline.js';

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

const queues = new WeakMap<object, CheckoutQueue>();

/**
 * The queue in front of `pool` (two wrappers of one pool share it), or undefined for a pool that does not count.
 * @internal
 */
export function checkoutQueueOf(pool: PgPoolLike): CheckoutQueue | undefined {
  if (!isCountingPool(pool)) return undefined;
  let queue = queues.get(pool);
  if (queue === undefined) {
    const counting = pool;
    // Idle connections and room for new ones, less pg-pool's own waiters.
    const created = new CheckoutQueue(
      () => counting.idleCount + (counting.options.max as number) - counting.totalCount - counting.waitingCount,
    );
    const pump = () => created.pump();
    // 'release' comes before the connection is back among the idle ones: the queue looks in a microtask.
    counting.on('release', pump);
    counting.on('remove', pump);
    queues.set(pool, created);
    queue = created;
  }
  return queue;
}
