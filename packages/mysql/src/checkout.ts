/**
 * Pool checkout under the budget. mysql2's pool has no acquire timeout and no way to leave its queue, so the
 * wait is raced against the call's stop; a connection that arrives after the stop won is released at once,
 * with nothing sent on it.
 */
import type { Pool, PoolConnection } from 'mysql2/promise';
import type { StopRelay } from './stop-relay.js';

/** @internal */
export function checkout(pool: Pool, relay: StopRelay): Promise<PoolConnection> {
  return new Promise((resolve, reject) => {
    let waiting = true;
    const off = relay.on((reason) => {
      waiting = false;
      reject(reason);
    });
    if (!waiting) return; // stopped already: the pool is not even asked
    pool.getConnection().then(
      (connection) => {
        off();
        if (waiting) resolve(connection);
        else connection.release();
      },
      (error: unknown) => {
        off();
        if (waiting) reject(error);
      },
    );
  });
}
