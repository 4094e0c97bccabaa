/**
 * Checking a connection out of a pg pool under a call: the pool has no per-checkout timeout, so the wait is
 * raced against the call's stop. Shared by `withDeadline()` and `instrumentPg()`.
 */

import type { CheckoutQueue } from '@deadline/core/internal';
import { type OutgoingCall, outsideContext, unpatched } from '@deadline/core/internal';
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
      ? queue.checkout(call, () => pool.connect(), releaseLate)
      : call.race(() => unpatched(() => pool.connect()), releaseLate);
  return connected.catch((error: unknown) => {
    call.end(error);
    throw error;
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
