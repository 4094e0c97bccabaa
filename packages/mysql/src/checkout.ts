/**
 * Pool checkout under the budget. mysql2's pool has no acquire timeout and no way to leave its queue, so the
 * wait is raced against the call's stop; a connection that arrives after the stop won is released at once,
 * with nothing sent on it.
 */

import { type OutgoingCall, unpatched } from '@deadline/core/internal';
import type { Pool, PoolConnection } from 'mysql2/promise';

/** @internal */
export function checkout(pool: Pool, call: OutgoingCall): Promise<PoolConnection> {
  // Stopped already: the pool is not even asked. A connection that comes after the stop goes straight back.
  return call.race(
    // Bounded here: an instrumented pool (instrumentMysql) passes it through.
    () => unpatched(() => pool.getConnection()),
    (late) => late.release(),
  );
}
