/**
 * Pool checkout under the budget. mysql2's pool has no acquire timeout and no way to leave its queue, so the
 * wait is raced against the call's stop; a connection that arrives after the stop won is released at once,
 * with nothing sent on it. Through the pool's deadline-aware queue when there is one (checkout-queue.ts).
 */

import { type CheckoutQueue, type OutgoingCall, unpatched } from '@deadline/core/internal';
import type { Pool, PoolConnection } from 'mysql2/promise';

/** @internal */
export function checkout(pool: Pool, queue: CheckoutQueue | undefined, call: OutgoingCall): Promise<PoolConnection> {
  // Bounded here: an instrumented pool (instrumentMysql) passes it through.
  const connect = () => pool.getConnection();
  // Stopped already: the pool is not even asked. A connection that comes after the stop goes straight back.
  const late = (connection: PoolConnection) => connection.release();
  return queue !== undefined ? queue.checkout(call, connect, late) : call.race(() => unpatched(connect), late);
}
