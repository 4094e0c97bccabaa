/**
 * Racing work against a context's stop: the one way an adapter ends a piece of work it cannot cancel itself (a
 * user's handler, a job's processor) when its context stops — the work's promise is left to settle unheard.
 */
import type { StopListener, StopReason } from './scope.js';

/** What can stop: a context, an incoming call. */
interface Stoppable {
  onStop(listener: StopListener): () => void;
}

/**
 * `work()`'s result, or the stop reason of `stoppable` if it stops first (then `stopped` hears of it before the
 * promise rejects). When it has already stopped, `work` is not started. The stop listener goes when the work
 * settles: a stream may read each of its messages through here.
 * @internal
 *
 * @example
 * ```ts
 * const result = await untilStopped(ctx, () => processor(job, token, ctx.signal));
 * ```
 */
export function untilStopped<T>(
  stoppable: Stoppable,
  work: () => Promise<T>,
  stopped?: (reason: StopReason) => void,
): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    let done = false;
    const off = stoppable.onStop((reason) => {
      done = true;
      stopped?.(reason);
      reject(reason);
    });
    if (done) return;
    work().then(
      (value) => {
        off();
        resolve(value);
      },
      (error: unknown) => {
        off();
        reject(error);
      },
    );
  });
}
