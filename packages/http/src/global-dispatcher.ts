/**
 * The no-code-change path: the process-wide undici dispatcher, which Node's built-in `fetch()` and undici's
 * `request()`/`fetch()` use unless told otherwise, wrapped in a `DeadlineDispatcher`.
 */
import { getGlobalDispatcher, setGlobalDispatcher } from 'undici';
import { DeadlineDispatcher, type DispatcherOptions } from './dispatcher.js';

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
  // Installed again: built on what the earlier installation sent through, so the two do not stack.
  const base = options?.dispatcher ?? (previous instanceof DeadlineDispatcher ? previous.base : previous);
  const installed = new DeadlineDispatcher({ ...options, dispatcher: base });
  setGlobalDispatcher(installed);
  return function uninstallGlobalDispatcher() {
    if (getGlobalDispatcher() === installed) setGlobalDispatcher(previous);
  };
}
