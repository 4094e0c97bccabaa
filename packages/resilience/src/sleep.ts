/**
 * A backoff wait that a cancel ends at once: the request's context stopping (deadline or client gone) or the
 * caller's own signal. Linked by hand (`onStop`, `addEventListener` … removed after), not with
 * `AbortSignal.any()`, which on Node 20 leaks one signal per call on a long-lived parent.
 */
import type { DeadlineContext } from '@deadline/core';
import { timerDelay } from '@deadline/core/internal';

/** Resolves after `ms`; rejects with the reason as soon as `context` stops or `signal` aborts. @internal */
export function cancellableSleep(
  ms: number,
  context: DeadlineContext | undefined,
  signal: AbortSignal | undefined,
): Promise<void> {
  const stopped = context?.stopReason;
  if (stopped !== undefined) return Promise.reject(stopped);
  if (signal?.aborted) return Promise.reject(signal.reason);
  return new Promise<void>((resolve, reject) => {
    let off = () => {};
    const onAbort = () => finish(signal?.reason);
    const timer = setTimeout(() => finish(undefined), timerDelay(ms));
    function finish(reason: unknown) {
      clearTimeout(timer);
      off();
      signal?.removeEventListener('abort', onAbort);
      if (reason === undefined) resolve();
      else reject(reason);
    }
    off = context?.onStop((reason) => finish(reason)) ?? off;
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
