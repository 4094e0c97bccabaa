/**
 * The fetch client variants the bench compares, each a dispatcher that `fetch()` is given: the loopback
 * throughput rows (fetch-overhead.ts) and the instruction counts (fetch-client-process.ts) build them here.
 */
import { DeadlineDispatcher, deadlineInterceptor } from '@deadline/http';
import { Agent, Dispatcher } from 'undici';

/** The floor of any dispatcher that wraps another: one more object and one more call per request, nothing else. */
class ForwardingDispatcher extends Dispatcher {
  readonly #base = new Agent();
  override dispatch(opts: Dispatcher.DispatchOptions, handler: Dispatcher.DispatchHandler): boolean {
    return this.#base.dispatch(opts, handler);
  }
  override close(): Promise<void> {
    return this.#base.close();
  }
  override destroy(): Promise<void> {
    return this.#base.destroy();
  }
}

/** The client variants, each a dispatcher that `fetch()` is given. */
export const FETCH_VARIANTS = {
  'fetch, bare Agent': () => new Agent() as Dispatcher,
  'fetch + a dispatcher that only forwards': () => new ForwardingDispatcher() as Dispatcher,
  // What `createFetch()` and `installGlobalDispatcher()` use: fetch's handler passed on in the API it speaks.
  'fetch + DeadlineDispatcher': () => new DeadlineDispatcher({ dispatcher: new Agent() }) as Dispatcher,
  // For those who compose their own: undici translates between fetch's handler API and the interceptors' one
  // (the response's headers parsed, then rebuilt as buffers) on every call, whatever the interceptor does.
  'fetch + deadlineInterceptor': () => new Agent().compose(deadlineInterceptor()) as Dispatcher,
  'fetch + an interceptor that does nothing': () =>
    new Agent().compose((dispatch) => (opts, handler) => dispatch(opts, handler)) as Dispatcher,
} as const;

export type FetchVariant = keyof typeof FETCH_VARIANTS;
