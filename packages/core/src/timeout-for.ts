/**
 * "How long may this call take?" — asked right before every downstream call (and every retry attempt), so
 * that each one gets what is left *now*, and a call that cannot finish is never made.
 */
import { MAX_TIMER_DELAY_MS } from './clock.js';
import { publishExceeded } from './diagnostics.js';
import { CancelledError, DeadlineExceededError, InvalidArgumentError } from './errors.js';
import type { Scope } from './scope.js';
import { storage } from './storage.js';

/**
 * Options of {@link timeoutFor}.
 *
 * @example
 * ```ts
 * const options: TimeoutOptions = { marginMs: 20, minMs: 5, maxMs: 2_000 };
 * const ms = timeoutFor('orders-db', options);
 * ```
 */
export interface TimeoutOptions {
  /** Kept back for this hop's own work after the call returns (reading the reply, answering). Default 0. */
  marginMs?: number | undefined;
  /** Below this, the call is not made: `DeadlineExceededError` with phase `before-call`. Default 1. */
  minMs?: number | undefined;
  /** Upper bound (the call's own timeout), ≥ max(1, minMs); also the result when there is no deadline. */
  maxMs?: number | undefined;
}

function check(
  option: string,
  value: number | undefined,
  min: number,
  fallback: number | undefined,
): number | undefined {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || Number.isNaN(value) || value < min) {
    throw new InvalidArgumentError(option, `a number ≥ ${min}`, value);
  }
  return value;
}

/**
 * The timeout, in whole ms, to give a call to `target` now: `min(maxMs, remaining − marginMs)`, never above
 * 2^31−1 (so it is safe for `setTimeout`). Throws instead of returning when the call should not be made:
 * - `DeadlineExceededError` (phase `before-call`, `target` set) when that is below `minMs`;
 * - `CancelledError` when the context was cancelled (the client left, the request ended).
 *
 * Without a deadline it returns `maxMs` (`undefined` if not given): behaviour outside a context is unchanged.
 *
 * @example
 * ```ts
 * import { timeoutFor } from '@deadline/core';
 * const ms = timeoutFor('inventory', { marginMs: 20, maxMs: 2_000 }); // throws if < 1 ms would be left
 * await client.get('/stock', { timeout: ms });
 * ```
 */
export function timeoutFor(target: string, options?: TimeoutOptions): number | undefined {
  return timeoutIn(storage.getStore(), target, options);
}

/**
 * {@link timeoutFor} in `scope`, the current context its caller already read: on Node 24 and later each read of
 * AsyncLocalStorage is a lookup in the context frame's Map, and an HTTP call made four of them (callgrind). @internal
 */
export function timeoutIn(scope: Scope | undefined, target: string, options?: TimeoutOptions): number | undefined {
  const marginMs = check('marginMs', options?.marginMs, 0, 0) as number;
  const minMs = check('minMs', options?.minMs, 0, 1) as number;
  const max = check('maxMs', options?.maxMs, Math.max(1, minMs), undefined);
  // Whole milliseconds, never above what setTimeout honours: drivers take it as is.
  const maxMs = max === undefined ? undefined : Math.floor(Math.min(max, MAX_TIMER_DELAY_MS));
  if (scope === undefined) return maxMs;
  const stopped = scope.stopReason;
  if (stopped instanceof CancelledError) {
    // The why in the message, not as a cause too: loggers print a cause's message after the error's own.
    throw new CancelledError(`not calling ${target}: ${stopped.message}`, { reason: stopped.reason });
  }
  const deadline = scope.deadline;
  if (deadline.isNone) return maxMs;
  const remaining = deadline.remainingMs();
  const timeout = Math.floor(remaining - marginMs);
  if (stopped !== undefined || timeout < minMs || timeout < 1) {
    const error = new DeadlineExceededError({
      budgetMs: deadline.budgetMs,
      elapsedMs: deadline.elapsedMs(),
      phase: 'before-call',
      target,
      hop: scope.hop,
      message: `not calling ${target}: ${Math.floor(remaining)} ms left, the call needs at least ${Math.max(minMs, 1) + marginMs} ms`,
    });
    publishExceeded(scope, error);
    throw error;
  }
  const cap = maxMs ?? MAX_TIMER_DELAY_MS;
  return Math.min(timeout, cap);
}
