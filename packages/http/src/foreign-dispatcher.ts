/**
 * A dispatcher of another copy of undici, driven through this one. The global dispatcher is often not this
 * undici's: Node puts its own bundled one there at the app's first global `fetch()` — and Node 22 as soon as
 * `node:http` is loaded, so in nearly every server. On Node 20 and 22 that is undici 6, which neither turns the
 * handlers it composes into the newer API the interceptor speaks, nor takes handlers of that API: composed
 * directly, every call failed ("invalid onError method") or never finished. Wrapped in this class, the
 * composition is this undici's (every handler reaches the interceptor in the newer API) and each handler
 * reaches the foreign dispatcher speaking both (either-api-handler.ts). Its events ('connect', 'drain', …) stay
 * on the foreign dispatcher.
 */
import { Dispatcher } from 'undici';
import { EitherApiHandler } from './either-api-handler.js';

/** The part of a dispatcher of any undici used here. */
interface AnyDispatcher {
  dispatch(options: Dispatcher.DispatchOptions, handler: Dispatcher.DispatchHandler): boolean;
  close(): Promise<void>;
  destroy(error?: Error | null): Promise<void>;
}

/** `dispatcher` itself when it is this undici's, else it wrapped. @internal */
export function ownUndici(dispatcher: Dispatcher): Dispatcher {
  return dispatcher instanceof Dispatcher ? dispatcher : new ForeignDispatcher(dispatcher as unknown as AnyDispatcher);
}

class ForeignDispatcher extends Dispatcher {
  readonly #foreign: AnyDispatcher;

  constructor(foreign: AnyDispatcher) {
    super();
    this.#foreign = foreign;
  }

  override dispatch(options: Dispatcher.DispatchOptions, handler: Dispatcher.DispatchHandler): boolean {
    return this.#foreign.dispatch(options, new EitherApiHandler(handler));
  }

  override close(): Promise<void>;
  override close(callback: () => void): void;
  override close(callback?: () => void): Promise<void> | undefined {
    const closed = this.#foreign.close();
    if (callback === undefined) return closed;
    closed.then(callback, callback);
    return undefined;
  }

  override destroy(): Promise<void>;
  override destroy(error: Error | null): Promise<void>;
  override destroy(callback: () => void): void;
  override destroy(error: Error | null, callback: () => void): void;
  override destroy(errorOrCallback?: Error | null | (() => void), callback?: () => void): Promise<void> | undefined {
    const error = typeof errorOrCallback === 'function' ? null : errorOrCallback;
    const done = typeof errorOrCallback === 'function' ? errorOrCallback : callback;
    const destroyed = this.#foreign.destroy(error ?? null);
    if (done === undefined) return destroyed;
    destroyed.then(done, done);
    return undefined;
  }
}
