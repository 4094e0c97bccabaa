/**
 * A mysql2 pool's checkout behind core's deadline-aware `CheckoutQueue` (core's checkout-queue.ts): how many
 * connections the pool has free, and when one may have come free.
 *
 * mysql2 publishes no counts. Its pool keeps three lists — every connection, the idle ones, and the callbacks of
 * its own waiters (`_allConnections`, `_freeConnections`, `_connectionQueue`, under those names since mysql2 1.x)
 * — and those lengths are read, only when the pool has all three, a connection limit and `waitForConnections`
 * on; any other pool is checked out from as mysql2 does it. A connection comes free when the pool files it among
 * the idle ones (its `release` event), when this package gives one back or destroys it, and when a checkout
 * fails or comes too late. One closed in someone else's hands frees its place without an event: the queue sees it
 * at the next of those.
 */
import { CheckoutQueue } from '@deadline/core/internal';
import type { Pool } from 'mysql2/promise';

/** What is read of mysql2's core pool (`pool.pool` of the promise pool). */
interface CountingPool {
  readonly config: { readonly connectionLimit?: unknown; readonly waitForConnections?: unknown };
  readonly _allConnections: { readonly length: number };
  readonly _freeConnections: { readonly length: number };
  readonly _connectionQueue: { readonly length: number };
  on(event: 'release', listener: () => void): unknown;
}

function countingPool(pool: Pool): CountingPool | undefined {
  const core = (pool as unknown as { pool?: Partial<CountingPool> }).pool;
  if (typeof core !== 'object' || core === null) return undefined;
  const limit = core.config?.connectionLimit;
  const counted =
    typeof limit === 'number' &&
    limit > 0 &&
    core.config?.waitForConnections !== false &&
    typeof core._allConnections?.length === 'number' &&
    typeof core._freeConnections?.length === 'number' &&
    typeof core._connectionQueue?.length === 'number' &&
    typeof core.on === 'function';
  return counted ? (core as CountingPool) : undefined;
}

const queues = new WeakMap<object, CheckoutQueue>();

/**
 * The queue in front of `pool` (two wrappers of one pool share it), or undefined for a pool that cannot be counted.
 * @internal
 */
export function checkoutQueueOf(pool: Pool): CheckoutQueue | undefined {
  const core = countingPool(pool);
  if (core === undefined) return undefined;
  let queue = queues.get(core);
  if (queue === undefined) {
    const limit = core.config.connectionLimit as number;
    // Idle connections and room for new ones, less mysql2's own waiters.
    const created = new CheckoutQueue(
      () =>
        core._freeConnections.length + Math.max(0, limit - core._allConnections.length) - core._connectionQueue.length,
    );
    core.on('release', () => created.pump());
    queues.set(core, created);
    queue = created;
  }
  return queue;
}
