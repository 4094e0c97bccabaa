/**
 * The no-code-change path: the process-wide undici dispatcher, which Node's built-in `fetch()` and undici's
 * `request()`/`fetch()` use unless told otherwise, composed with the deadline interceptor.
 */
import { type Dispatcher, getGlobalDispatcher, setGlobalDispatcher } from 'undici';
import { ownUndici } from './foreign-dispatcher.js';
import { deadlineInterceptor } from './interceptor.js';
import type { HttpDeadlineOptions } from './options.js';

/**
 * Options of {@link installGlobalDispatcher} and {@link createFetch}: the HTTP options, and the dispatcher to
 * build on.
 *
 * @example
 * ```ts
 * const options: DispatcherOptions = { marginMs: 20, dispatcher: new Agent({ connections: 64 }) };
 * ```
 */
export interface DispatcherOptions extends HttpDeadlineOptions {
  /** The dispatcher to compose with (a configured `Agent`, a `ProxyAgent`…). Default: the current global one. */
  dispatcher?: Dispatcher | undefined;
}

/** What each installed dispatcher was composed on, so installing twice replaces instead of stacking. */
const bases = new WeakMap<Dispatcher, Dispatcher>();

/**
 * Makes the global dispatcher deadline-aware: from now on the plain global `fetch()` and undici's `request()`
 * inside a request context carry its budget and stop with it. Call once at startup. Returns a function that
 * puts the previous global dispatcher back. Installing again replaces the earlier installation.
 *
 * @example
 * ```ts
 * import { installGlobalDispatcher } from '@deadline/http';
 *
 * installGlobalDispatcher({ marginMs: 20 });
 * app.get('/order/:id', async (request) => {
 *   const stock = await fetch(`http://inventory/stock/${request.params.id}`); // budget sent, cut at the deadline
 *   return stock.json();
 * });
 * ```
 */
export function installGlobalDispatcher(options?: DispatcherOptions): () => void {
  const previous = getGlobalDispatcher();
  // Often Node's own bundled undici (see foreign-dispatcher.ts): composed through this one.
  const base = ownUndici(options?.dispatcher ?? bases.get(previous) ?? previous);
  const installed = base.compose(deadlineInterceptor(options)) as Dispatcher;
  bases.set(installed, base);
  setGlobalDispatcher(installed);
  return function uninstallGlobalDispatcher() {
    if (getGlobalDispatcher() === installed) setGlobalDispatcher(previous);
  };
}
