/**
 * Recovery points (Brandur Leach's "atomic phases"): inside an idempotent request, a step's result is recorded
 * when it resolves, and a retry that takes the key over gets the recorded result instead of running it again.
 */

import { currentContext } from '@deadline/core';
import { checkFunction, checkName } from '@deadline/core/internal';
import { currentRequest } from './idempotent-request.js';

/**
 * Runs `fn` once per idempotent request, across its retries: the first time, its result is recorded when it
 * resolves (it must be JSON); an attempt that takes the key over after a timeout or a crash gets that result
 * back without calling `fn`. Outside an idempotent request (no key came, or the route is not covered) it simply
 * calls `fn`. Names are unique within a request; a second call with the same name gets the first one's result.
 *
 * Each step also takes one position in the keys of the request's outgoing calls, run or skipped, so the calls
 * made after a skipped step carry the same `Idempotency-Key`s as on the attempt that ran it. No step starts after
 * the request's deadline (it throws the deadline error): the key may pass to a retry then, once the steps still
 * running have settled (a step that finishes after the deadline is recorded first). A write to your own
 * database should carry the step's key (`IDEMPOTENCY_KEYS.get().next()`) under a unique constraint:
 * a statement whose cancel races its commit is reported stopped, yet committed.
 *
 * @example
 * ```ts
 * import { step } from '@deadline/idempotency';
 *
 * app.post('/orders', async (request) => {
 *   const order = await step('order', () => orders.insert(request.body));
 *   const charge = await step('charge', () => payments.charge(order.id, order.total));
 *   await step('mail', () => mailer.confirm(order.id));
 *   return { order: order.id, charge: charge.id };
 * });
 * ```
 */
export function step<T>(name: string, fn: () => T | Promise<T>): Promise<T> {
  checkName('name', name, false);
  checkFunction('fn', fn, false);
  const request = currentRequest();
  if (request === undefined) return Promise.resolve().then(fn);
  return request.step(name, fn, currentContext());
}
