/**
 * The fetch client variants the bench compares, each a dispatcher that `fetch()` is given: the loopback
 * throughput rows (fetch-overhead.ts) and the instruction counts (fetch-client-process.ts) build them here.
 */
import { deadlineInterceptor } from '@deadline/http';
import { Agent, type Dispatcher } from 'undici';

/** The client variants, each a dispatcher that `fetch()` is given. */
export const FETCH_VARIANTS = {
  'fetch, bare Agent': () => new Agent() as Dispatcher,
  'fetch + deadlineInterceptor': () => new Agent().compose(deadlineInterceptor()) as Dispatcher,
  // The floor of any interceptor: undici translates between fetch's handler API and the interceptors' one (the
  // response's headers parsed, then rebuilt as buffers) on every call, whatever the interceptor does.
  'fetch + an interceptor that does nothing': () =>
    new Agent().compose((dispatch) => (opts, handler) => dispatch(opts, handler)) as Dispatcher,
} as const;

export type FetchVariant = keyof typeof FETCH_VARIANTS;
