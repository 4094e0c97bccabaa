/**
 * The undici interceptor, for those who compose their own dispatcher. Each dispatch — every attempt, so a retry
 * never reuses a stale budget — starts an `OutgoingCall` in the caller's context: no time left → the handler
 * fails at once and nothing is sent; else the budget and trace headers replace the caller's, and the call is
 * aborted through undici's controller (a `signal` in the dispatch options is not honoured this deep) when its
 * timeout passes or the request stops. `DeadlineDispatcher` does the same without `compose()`'s translation of
 * fetch's handler (dispatcher.ts).
 */
import { runWithCall, storage } from '@deadline/core/internal';
import type { Dispatcher } from 'undici';
import { DeadlineHandler } from './deadline-handler.js';
import { type DeadlineDispatch, startDispatch } from './dispatch-call.js';
import { type HttpDeadlineOptions, resolveHttpOptions } from './options.js';

type Controller = Dispatcher.DispatchController;

/**
 * An undici interceptor that puts every request made through the dispatcher under the current deadline. For
 * `fetch()`, prefer `DeadlineDispatcher` (or `installGlobalDispatcher()`): `compose()` translates fetch's handler
 * to the interceptors' API and back on every call, which costs more than the interceptor itself.
 *
 * @example
 * ```ts
 * import { Agent, interceptors, setGlobalDispatcher } from 'undici';
 * import { deadlineInterceptor } from '@deadline/http';
 *
 * const agent = new Agent().compose(deadlineInterceptor({ marginMs: 20 }), interceptors.retry());
 * await agent.request({ origin: 'http://inventory:8080', path: '/stock/42', method: 'GET' });
 * ```
 */
export function deadlineInterceptor(options?: HttpDeadlineOptions): Dispatcher.DispatcherComposeInterceptor {
  const resolved = resolveHttpOptions(options);
  return (dispatch) =>
    function deadlineDispatch(opts, handler) {
      const scope = storage.getStore();
      // Outside any context, with no default budget or cap: exactly what undici would do.
      if (resolved.passThroughOutside && scope === undefined) return dispatch(opts, handler);
      let started: DeadlineDispatch;
      try {
        started = startDispatch(opts, resolved, scope);
      } catch (error) {
        // Not made: nothing connected, nothing written. undici's own interceptors report early failures so.
        handler.onResponseError?.(null as unknown as Controller, error as Error);
        return false;
      }
      const { call } = started;
      const deadlineHandler = new DeadlineHandler(handler, call, resolved.downstreamErrors);
      try {
        // With the call in OpenTelemetry's context: instrumentation-undici's span, made inside, is the call's.
        return runWithCall(call, () => dispatch(started.opts, deadlineHandler));
      } catch (error) {
        call.end(error);
        throw error;
      }
    };
}
