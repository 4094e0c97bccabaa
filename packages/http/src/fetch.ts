/**
 * The opt-in path: a `fetch` that goes through a `DeadlineDispatcher` whatever the global dispatcher is, and
 * rejects with the deadline error itself rather than `TypeError: fetch failed` wrapped around it.
 */
import { ErrorCode, isDeadlineError } from '@deadline/core';
import { findErrorWithCode } from '@deadline/core/internal';
import { DeadlineDispatcher, type DispatcherOptions } from './dispatcher.js';

/**
 * Returns a `fetch` bound to the deadline: same signature and `Response` as the global one.
 * A call refused or cut off rejects with `DeadlineExceededError` or `CancelledError`.
 *
 * @example
 * ```ts
 * import { createFetch } from '@deadline/http';
 *
 * const fetchInventory = createFetch({ marginMs: 20, dispatcher: new Agent({ connections: 16 }) });
 * const stock = await fetchInventory('http://inventory/stock/42');
 * ```
 */
export function createFetch(options?: DispatcherOptions): typeof globalThis.fetch {
  const dispatcher = new DeadlineDispatcher(options);
  return async function deadlineFetch(input, init) {
    try {
      // `dispatcher` is undici's extension of RequestInit, honoured by Node's built-in fetch.
      return await globalThis.fetch(input, { ...init, dispatcher } as unknown as RequestInit);
    } catch (error) {
      throw unwrapFetchError(error);
    }
  };
}

/**
 * `fetch` wraps dispatcher errors in `TypeError('fetch failed')`; ours (a deadline error, a circuit breaker's
 * refusal) are more useful bare. @internal
 */
export function unwrapFetchError(error: unknown): unknown {
  if (!(error instanceof TypeError)) return error;
  const cause = (error as { cause?: unknown }).cause;
  if (isDeadlineError(cause)) return cause;
  return findErrorWithCode(cause, ErrorCode.CircuitOpen) ?? error;
}

let defaultFetch: typeof globalThis.fetch | undefined;

/**
 * `fetch` under the current deadline, with default options (no margin, its own connection pool).
 *
 * @example
 * ```ts
 * import { fetch } from '@deadline/http';
 * const res = await fetch('http://inventory/stock/42'); // inside a request: budget sent, cut at the deadline
 * ```
 */
export function fetch(input: string | URL | Request, init?: RequestInit): Promise<Response> {
  defaultFetch ??= createFetch();
  return defaultFetch(input, init);
}
