/**
 * A dispatcher of another copy of undici, driven through this one. The global dispatcher is often not this
 * undici's: Node puts its own bundled one there at the app's first global `fetch()` — and Node 22 as soon as
 * `node:http` is loaded, so in nearly every server. On Node 20 and 22 that is undici 6, which neither turns the
 * handlers it composes into the newer API the interceptor speaks, nor takes handlers of that API: composed
 * directly, every call failed ("invalid onError method") or never finished. Wrapped in this class, the
 * composition is this undici's (every handler reaches the interceptor in the newer API) and each handler
 * reaches the foreign dispatcher speaking both (either-api-handler.ts). Its events ('connect', 'drain', …) stay
 * on the foreign dispatcher. A compatibility layer, not a fast path. Delete when: Node 22 leaves support (April
 * 2027) and the undici the later Nodes bundle (7, 8) is shown to compose this one's handlers directly: undici 6,
 * the one known to need it, is then bundled by no supported Node.
 */
import { Dispatcher } from 'undici';
import { EitherApiHandler } from './either-api-handler.js';
import { type AnyDispatcher, SendingDispatcher } from './sending-dispatcher.js';

/** `dispatcher` itself when it is this undici's, else it wrapped. @internal */
export function ownUndici(dispatcher: Dispatcher): Dispatcher {
  return dispatcher instanceof Dispatcher ? dispatcher : new ForeignDispatcher(dispatcher as unknown as AnyDispatcher);
}

class ForeignDispatcher extends SendingDispatcher<AnyDispatcher> {
  override dispatch(options: Dispatcher.DispatchOptions, handler: Dispatcher.DispatchHandler): boolean {
    // A handler of the older API (fetch's, through `DeadlineDispatcher`) is what undici 6 speaks and undici 7
    // and 8 still take: passed as it is.
    const newer = typeof handler.onRequestStart === 'function';
    return this.inner.dispatch(options, newer ? new EitherApiHandler(handler) : handler);
  }
}
