/**
 * The error a step throws when its request no longer holds its key.
 */

/**
 * Thrown by `step()` when the request's key was taken over by another request (this one ran past its lock, which
 * ends at its deadline plus `lockGraceMs`): the step's result could not be recorded, and the request that owns
 * the key now will answer. Its `statusCode` (409) is what fastify's and express's error handlers send.
 *
 * @example
 * ```ts
 * try {
 *   await step('charge', () => payments.charge(order));
 * } catch (error) {
 *   if (error instanceof IdempotencyKeyLostError) log.warn({ key: error.scope }, 'taken over');
 *   throw error;
 * }
 * ```
 */
export class IdempotencyKeyLostError extends Error {
  readonly code = 'ERR_IDEMPOTENCY_KEY_LOST';
  readonly statusCode = 409;
  /** The step whose result could not be recorded. */
  readonly step: string;
  /** The key's scope (hashed tenant, method, route and key). */
  readonly scope: string;

  constructor(step: string, scope: string) {
    super(`step '${step}': this request no longer holds its Idempotency-Key; another request took it over`);
    this.name = 'IdempotencyKeyLostError';
    this.step = step;
    this.scope = scope;
  }
}
