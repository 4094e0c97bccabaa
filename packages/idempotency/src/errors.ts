/**
 * The error a step throws when its request no longer holds its key.
 */
import { DeadlineError, ErrorCode } from '@deadline/core';
import { defineErrorClass, findErrorWithCode } from '@deadline/core/internal';

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
export class IdempotencyKeyLostError extends DeadlineError {
  declare readonly code: typeof ErrorCode.IdempotencyKeyLost;
  /** The step whose result could not be recorded. */
  readonly step: string;
  /** The key's scope (hashed tenant, method, route and key). */
  readonly scope: string;

  constructor(step: string, scope: string) {
    super(
      ErrorCode.IdempotencyKeyLost,
      `step '${step}': this request no longer holds its Idempotency-Key; another request took it over`,
    );
    this.step = step;
    this.scope = scope;
  }

  /** 409 Conflict: what fastify's and express's error handlers send. */
  get statusCode(): 409 {
    return 409;
  }
}
defineErrorClass(IdempotencyKeyLostError, 'IdempotencyKeyLostError', ErrorCode.IdempotencyKeyLost);

/**
 * True for an {@link IdempotencyKeyLostError} from any copy of this package, in `error` or the errors it wraps.
 *
 * @example
 * ```ts
 * try { await step('charge', () => payments.charge(order)); }
 * catch (error) { if (isIdempotencyKeyLostError(error)) log.warn('taken over'); throw error; }
 * ```
 */
export function isIdempotencyKeyLostError(error: unknown): boolean {
  return findErrorWithCode(error, ErrorCode.IdempotencyKeyLost) !== undefined;
}
