/**
 * Checking a connection out of a pg pool under a call: the pool has no per-checkout timeout, so the wait is
 * raced against the call's stop. Shared by `withDeadline()` and `instrumentPg()`.
 */

import type { CheckoutQueue } from '@deadline/core/internal';
import { type OutgoingCall, outsideContext, unpatched } from '@deadline/core/internal';
import { endArrival, holdOnArrival } from './held-connection.js';
import type { PgPoolClientLike, PgPoolLike } from './with-deadline.js';

/**
 * A connection, waiting no longer than the call may: the pool has no per-checkout timeout. Through the
 * deadline-aware queue when there is one, else `pool.connect()`. A connection that arrives after the stop
 * goes straight back (see {@link releaseLate}). Ends the call when the checkout fails. @internal
 */
export function checkoutFrom(
  pool: PgPoolLike,
  queue: CheckoutQueue | undefined,
  call: OutgoingCall,
): Promise<PgPoolClientLike> {
  const connected =
    queue !== undefined
      ? queue.checkout(call, () => connectHeld(pool), releaseLate)
      : call.race(() => unpatched(() => connectHeld(pool)), releaseLate);
  return connected.catch((error: unknown) => {
    call.end(error);
    throw error;
  });
}

/** pg-pool's `connect(callback)`; also the promise form, which a pool of the app's own may offer alone. */
type ConnectWithCallback = (callback: (error: Error | undefined, client: PgPoolClientLike) => void) => unknown;

/**
 * `pool.connect()`, the connection held from the moment pg-pool hands it over (see `holdOnArrival`): by
 * callback, where the pool takes one (pg-pool's `connect` declares it); a promise's continuation would come too
 * late. Its release lets go of that hold (pg-pool's own listener is back on by then); pg-pool sets a new
 * `release` at every checkout, so the wrapper is for this one only.
 */
function connectHeld(pool: PgPoolLike): Promise<PgPoolClientLike> {
  if (pool.connect.length === 0) return pool.connect();
  return new Promise((resolve, reject) => {
    (pool.connect as unknown as ConnectWithCallback).call(pool, (error, client) => {
      if (error !== undefined && error !== null) {
        reject(error);
        return;
      }
      holdOnArrival(client);
      const release = client.release;
      client.release = function releaseHeld(this: PgPoolClientLike, ...args: Parameters<typeof release>) {
        try {
          return release.apply(this, args);
        } finally {
          endArrival(client);
        }
      };
      resolve(client);
    });
  });
}

/**
 * A connection that came after its call stopped goes back to the pool outside any context: pg-pool hands it to
 * the next waiter (or opens a client) right inside `release()`, and that waiter's callback, or the new client's
 * socket, would otherwise run in the stopped request's context, whose deadline has passed. @internal
 */
export function releaseLate(late: PgPoolClientLike): void {
  outsideContext(() => late.release());
}
